// One rank of the emulated-cluster tests (emulated_cluster_test.cc), started by
// `braidrun --emulate GxM`. Modes:
//   check  all-reduce and all-to-all, bit-exact against references computed here; then, from the
//          transports' counters (braidCommPeerTraffic), every peer on this rank's node
//          (BRAID_HOSTID) is served by shm, every other by tcp, every peer got bytes, and the
//          node's eth0 (this namespace's /proc/net/dev) sent at least this rank's TCP bytes, so
//          inter-node traffic really crossed the emulated links. Exit 0 when all hold.
//   pause  init, then wait for a signal (the Ctrl-C test).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace {

int Fail(int rank, const char* what, int code) {
  std::fprintf(stderr, "[rank %d] %s\n", rank, what);
  return code;
}

// Bytes sent by eth0 in this process's network namespace.
long long Eth0TxBytes() {
  std::ifstream dev("/proc/net/dev");
  std::string line;
  while (std::getline(dev, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "eth0") continue;
    std::istringstream in(line.substr(colon + 1));
    long long v[9] = {};
    for (auto& x : v) in >> x;
    return v[8];  // receive: bytes packets errs drop fifo frame compressed multicast; then tx bytes
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  const long long tx_before = Eth0TxBytes();
  braidComm_t comm;
  if (braidInitFromEnv(&comm) != braidSuccess) {
    std::fprintf(stderr, "init: %s\n", braidGetLastError(nullptr));
    return 2;
  }
  int rank = 0, n = 0;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  if (mode == "pause") {
    pause();
    return 0;
  }
  const int m = std::atoi(std::getenv("BRAID_LOCAL_SIZE") ? std::getenv("BRAID_LOCAL_SIZE") : "0");
  if (m < 1 || n % m != 0) return Fail(rank, "BRAID_LOCAL_SIZE missing or not a divisor", 3);

  // All-reduce of integers (exact in any order): element i of rank r is r * 1000 + i.
  const size_t count = 300000;  // above the express lane: several channels and chunks
  std::vector<int32_t> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(rank * 1000 + i % 977);
  if (braidAllReduce(in.data(), out.data(), count, braidInt32, braidSum, comm) != braidSuccess)
    return Fail(rank, braidGetLastError(comm), 4);
  for (size_t i = 0; i < count; ++i) {
    const int64_t want = 1000LL * n * (n - 1) / 2 + static_cast<int64_t>(n) * (i % 977);
    if (out[i] != want) return Fail(rank, "all-reduce: wrong element", 5);
  }
  // All-to-all: block q of rank r is (r, q, i).
  const size_t per = 4099;
  std::vector<int32_t> a_in(per * n), a_out(per * n);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < per; ++i) a_in[q * per + i] = (rank << 24) | (q << 16) | int32_t(i);
  if (braidAllToAll(a_in.data(), a_out.data(), per, braidInt32, comm) != braidSuccess)
    return Fail(rank, braidGetLastError(comm), 6);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < per; ++i)
      if (a_out[p * per + i] != ((p << 24) | (rank << 16) | int32_t(i)))
        return Fail(rank, "all-to-all: wrong element", 7);

  // Where the bytes went.
  unsigned long long tcp_sent = 0;
  for (int q = 0; q < n; ++q) {
    uint64_t sent = 0, received = 0;
    char transport[16];
    if (braidCommPeerTraffic(comm, q, &sent, &received, transport, sizeof transport) !=
        braidSuccess)
      return Fail(rank, braidGetLastError(comm), 8);
    const bool same_node = q / m == rank / m;
    const char* want = q == rank ? "self" : same_node ? "shm" : "tcp";
    if (std::strcmp(transport, want) != 0) {
      std::fprintf(stderr, "[rank %d] peer %d (%s node) is served by %s, expected %s\n", rank, q,
                   same_node ? "same" : "other", transport, want);
      return 9;
    }
    if (q != rank && (sent == 0 || received == 0)) {
      std::fprintf(stderr, "[rank %d] no traffic with peer %d (%llu sent, %llu received)\n", rank,
                   q, static_cast<unsigned long long>(sent),
                   static_cast<unsigned long long>(received));
      return 10;
    }
    if (!same_node) tcp_sent += sent;
  }
  // Every rank of the node must have sent before anyone reads the link's counter.
  if (braidBarrier(comm) != braidSuccess) return Fail(rank, braidGetLastError(comm), 11);
  const long long tx_after = Eth0TxBytes();
  if (n > m && (tx_before < 0 || tx_after - tx_before < static_cast<long long>(tcp_sent))) {
    std::fprintf(stderr, "[rank %d] eth0 sent %lld bytes, less than this rank's %llu TCP bytes\n",
                 rank, tx_after - tx_before, tcp_sent);
    return 12;
  }
  std::printf("[rank %d] ok: %llu bytes over tcp, eth0 sent %lld\n", rank, tcp_sent,
              tx_after - tx_before);
  braidCommDestroy(comm);
  return 0;
}
