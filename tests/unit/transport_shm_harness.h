// Test harness for the shm transport: builds N ranks inside one process (the transport does not
// care whether its peers are threads or processes), with real doorbells and real segments.
#pragma once

#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/net/doorbell.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace braid::shm_test {

// Every test runs under a watchdog: a hang becomes a SIGALRM death, never a stuck CI job.
class GuardedTest : public ::testing::Test {
 protected:
  void SetUp() override { alarm(120); }
  void TearDown() override {
    alarm(0);
    shm::SetShmFreeBytesForTesting(-1);
  }
};

inline std::string UniqueTag() {
  static std::atomic<int> counter{0};
  return "shmtest" + std::to_string(getpid()) + "x" + std::to_string(counter.fetch_add(1)) + "x" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
}

// Names in /dev/shm that belong to the communicator tagged `tag`.
inline std::vector<std::string> ShmEntries(const std::string& tag) {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.find(tag) != std::string::npos) out.push_back(n);
  }
  closedir(d);
  return out;
}

inline TransportContext MakeContext(int rank, const std::vector<std::string>& hosts,
                                    const std::string& tag, int nchannels, size_t ring_bytes,
                                    uint64_t board_bytes = 0) {
  TransportContext c;
  c.board_bytes = board_bytes;
  c.rank = rank;
  c.nranks = static_cast<int>(hosts.size());
  c.nchannels = nchannels;
  c.comm_tag = tag;
  c.shm_ring_bytes = ring_bytes;
  for (int r = 0; r < c.nranks; ++r) {
    RankInfo info;
    info.rank = r;
    info.pid = getpid();
    info.hostname = "h" + hosts[static_cast<size_t>(r)];
    info.host_id = hosts[static_cast<size_t>(r)];
    c.ranks.push_back(info);
    c.doorbells.push_back(tag + "-bell-" + std::to_string(r));
  }
  c.doorbell_name = c.doorbells[static_cast<size_t>(rank)];
  c.all_on_one_host = false;
  return c;
}

// N ranks of one communicator, connected over shm where canConnect allows.
struct Group {
  std::string tag;
  std::vector<std::string> hosts;
  std::vector<Doorbell> bells;
  std::vector<std::unique_ptr<TransportInstance>> inst;
  std::vector<std::string> blobs;
  // eps[rank][peer][channel]
  std::vector<std::map<int, std::vector<std::unique_ptr<Endpoint>>>> eps;

  Endpoint* ep(int rank, int peer, int channel = 0) {
    return eps[static_cast<size_t>(rank)][peer][static_cast<size_t>(channel)].get();
  }
};

// Creates every rank's instance (stops at the first failure, which it returns).
// `board_bytes`: payload bytes per post of each rank's small-message board (0: none).
inline Status CreateGroup(const std::vector<std::string>& hosts, int nchannels, size_t ring_bytes,
                          Group* g, uint64_t board_bytes = 0) {
  g->tag = UniqueTag();
  g->hosts = hosts;
  const int n = static_cast<int>(hosts.size());
  for (int r = 0; r < n; ++r) {
    auto ctx = MakeContext(r, hosts, g->tag, nchannels, ring_bytes, board_bytes);
    auto bell = Doorbell::Bind(ctx.doorbell_name);
    if (!bell.ok()) return bell.status();
    g->bells.push_back(std::move(bell.value()));
    auto inst = ShmTransportFactory()->create(ctx);
    if (!inst.ok()) return inst.status();
    g->inst.push_back(std::move(inst.value()));
  }
  for (auto& i : g->inst) g->blobs.push_back(i->localBlob());
  return Status::Ok();
}

// Connects every rank to the peers canConnect accepts, then (optionally) finishes.
inline Status ConnectGroup(Group* g, bool finish = true) {
  const int n = static_cast<int>(g->inst.size());
  g->eps.clear();
  g->eps.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::vector<int> peers;
    for (int p = 0; p < n; ++p)
      if (p != r && g->inst[static_cast<size_t>(r)]->canConnect(p, g->blobs)) peers.push_back(p);
    std::vector<std::vector<std::unique_ptr<Endpoint>>> out;
    BRAID_RETURN_IF_ERROR(
        g->inst[static_cast<size_t>(r)]->connect(peers, g->blobs, Deadline::After(10000), &out));
    if (out.size() != peers.size()) return InternalError("connect filled a wrong-sized table");
    for (size_t i = 0; i < peers.size(); ++i)
      g->eps[static_cast<size_t>(r)][peers[i]] = std::move(out[i]);
  }
  if (finish)
    for (auto& i : g->inst) BRAID_RETURN_IF_ERROR(i->finishConnect());
  return Status::Ok();
}

inline Status BuildGroup(const std::vector<std::string>& hosts, int nchannels, size_t ring_bytes,
                         Group* g, uint64_t board_bytes = 0) {
  BRAID_RETURN_IF_ERROR(CreateGroup(hosts, nchannels, ring_bytes, g, board_bytes));
  return ConnectGroup(g);
}

// Sleeps like the engine does: arm, poll the doorbell and the endpoint's fds, disarm, drain.
// Returns poll()'s result (0 = timed out), or 1 when arm() said progress is possible.
inline int Sleep(Endpoint* ep, Doorbell& bell, bool want_send, bool want_recv, int timeout_ms) {
  std::vector<pollfd> fds{pollfd{bell.fd(), POLLIN, 0}};
  if (ep->arm(want_send, want_recv, fds)) return 1;
  int rc = poll(fds.data(), fds.size(), timeout_ms);
  ep->disarm(fds);
  bell.drain();
  return rc;
}

// Deterministic test bytes: position-dependent, so a dropped, repeated or reordered byte shows.
inline std::byte PatternByte(uint64_t i, uint64_t seed) {
  uint64_t x = (i + seed * 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
  return static_cast<std::byte>((x >> 29) ^ (x >> 47));
}

}  // namespace braid::shm_test
