// Abort and destroy are local, bounded and thread-safe (spec/reliability.md items 2-3, issue 7
// item 2): braidCommAbort and braidCommDestroy return within 2 s from any state, including a
// non-blocking init that is blocked waiting for other ranks at the rendezvous root, in the
// transports' connect or in the final barrier; the aborted init releases every thread, fd and
// /dev/shm segment, and a new communicator works afterwards.
//
// Every scenario runs in a forked child under a wall-clock guard (the rendezvous service runs in a
// process of its own, see StartRootProcess), with BRAID_TIMEOUT=60 so that an abort that waits
// for the init's deadline is caught by the guard long before it. Ranks that must stall at a given
// step are played by FakePeer: it joins the rendezvous through the internal Bootstrap, publishes
// the messages a real rank would, and stops at that step (no hook in the library).
#include <dirent.h>
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "build_info.h"
#include "core/net/bootstrap.h"
#include "core/base/config.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/net/unique_id.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;
using Env = std::vector<std::pair<std::string, std::string>>;

// The promise of braid.h for braidCommAbort, and what this test holds destroy to during an init.
constexpr double kBoundS = 2.0;
// The init's own deadline: an abort that waits for it shows as a guard kill, not a slow pass.
const Env kBaseEnv = {{"BRAID_TIMEOUT", "60"}, {"BRAID_HOSTID", "abort-test-host"}};

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs `body` in a forked child with `env` set; its exit code, 124 when the guard killed it.
int RunChild(int guard_s, const Env& env, const std::function<int()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    int code = body();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);
  }
  if (pid < 0) return -1;
  auto guard = Clock::now() + std::chrono::seconds(guard_s);
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (Clock::now() > guard) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      std::fprintf(stderr, "wall-clock guard: the scenario was killed after %d s\n", guard_s);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// A root process per unique id, stopped at the end of the test.
struct Root {
  braidUniqueId id{};
  pid_t pid = StartRootProcess(&id);
  ~Root() { StopRootProcess(pid); }
};

int CountDir(const char* path, const std::string& needle = "") {
  DIR* d = opendir(path);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (needle.empty() || name.find(needle) != std::string::npos) ++n;
  }
  closedir(d);
  return n;
}
int Threads() {
  return CountDir("/proc/self/task");
}
// Includes the descriptor opendir holds while counting (the same in every count).
int Fds() {
  return CountDir("/proc/self/fd");
}
int ShmSegmentsOfThisProcess() {
  return CountDir("/dev/shm", "-p" + std::to_string(getpid()) + "-");
}

// Waits (polling, bounded) until `pred` holds: for states the test can observe, never for time.
bool WaitFor(const std::function<bool()>& pred, double max_s = 20) {
  auto t0 = Clock::now();
  while (!pred()) {
    if (SecondsSince(t0) > max_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Whether every thread but the calling one sleeps in a system call (/proc/<tid>/syscall gives
// its number then, "running" otherwise): the init thread has reached a wait and blocks in it.
bool OtherThreadsBlocked() {
  const std::string self = std::to_string(syscall(SYS_gettid));
  DIR* d = opendir("/proc/self/task");
  if (!d) return false;
  bool all = true;
  while (dirent* e = readdir(d)) {
    std::string tid = e->d_name;
    if (tid == "." || tid == ".." || tid == self) continue;
    std::ifstream f("/proc/self/task/" + tid + "/syscall");
    long nr = -1;
    if (f >> nr && nr >= 0) continue;
    // Gone meanwhile (nothing to read) counts as not blocked: the next look decides.
    all = false;
  }
  closedir(d);
  return all;
}

// Waits until the init blocks where the scenario put it, so that the release interrupts a wait
// rather than racing with the steps before it.
bool WaitUntilBlocked() {
  if (WaitFor(OtherThreadsBlocked)) return true;
  std::fprintf(stderr, "the init never blocked\n");
  return false;
}

// Starts a non-blocking init; false (with a message) unless it is pending.
bool StartPendingInit(braidComm_t* comm, const braidUniqueId& id, int rank, int nranks) {
  braidConfig_t cfg = BRAID_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  braidResult_t rc = braidCommInitRankConfig(comm, nranks, id, rank, &cfg);
  braidResult_t async = braidSuccess;
  if (rc != braidInProgress || !*comm || braidCommGetAsyncError(*comm, &async) != braidSuccess ||
      async != braidInProgress) {
    std::fprintf(stderr, "non-blocking init: rc=%d async=%d: %s\n", rc, async,
                 braidGetLastError(nullptr));
    return false;
  }
  return true;
}

// The init thread plus the communicator's control listener, which the init starts right before
// the first allGather: from then on the init waits for the missing rank at the root.
bool WaitUntilInitWaitsAtRoot(int threads_before) {
  if (!WaitFor([&] { return Threads() >= threads_before + 2; })) {
    std::fprintf(stderr, "the init never reached the rendezvous allGather\n");
    return false;
  }
  return WaitUntilBlocked();
}

enum class Release { kAbort, kDestroy };
const char* Name(Release r) {
  return r == Release::kAbort ? "braidCommAbort" : "braidCommDestroy";
}

// Calls abort or destroy, timed from before the call; false (with a message) when it failed or
// took longer than the bound.
bool TimedRelease(braidComm_t comm, Release how) {
  auto t0 = Clock::now();
  braidResult_t rc = how == Release::kAbort ? braidCommAbort(comm) : braidCommDestroy(comm);
  double dt = SecondsSince(t0);
  if (rc != braidSuccess || dt > kBoundS) {
    std::fprintf(stderr, "%s: rc=%d after %.2f s (bound %.1f s): %s\n", Name(how), rc, dt, kBoundS,
                 braidGetLastError(nullptr));
    return false;
  }
  return true;
}

// After abort or destroy, the handle is dead and every call says so, without crashing.
bool HandleIsDead(braidComm_t comm) {
  braidResult_t async = braidSuccess;
  int n = 0;
  bool ok = braidCommGetAsyncError(comm, &async) == braidErrInvalidUsage &&
            braidCommCount(comm, &n) != braidSuccess &&
            braidCommAbort(comm) == braidErrInvalidUsage &&
            braidCommDestroy(comm) == braidErrInvalidUsage;
  if (!ok) std::fprintf(stderr, "the released handle still answers as if it were live\n");
  return ok;
}

// ---------------------------------------------------------------- a rank that stalls

// Where FakePeer stops.
enum class Stall {
  kNeverAccepts,   // fake rank 1: its tcp listener never accepts; rank 0 waits in connect
  kNeverConnects,  // fake rank 0: never connects; rank 1 waits in connect for it
  kBeforeBarrier,  // fake rank 0: connects every lane, then never enters the final barrier
};
const char* Name(Stall s) {
  switch (s) {
    case Stall::kNeverAccepts:
      return "NeverAccepts";
    case Stall::kNeverConnects:
      return "NeverConnects";
    case Stall::kBeforeBarrier:
      return "BeforeBarrier";
  }
  return "?";
}

// Init messages are length-prefixed fields (comm.cc PutField/SplitFields).
void PutField(std::string* out, const std::string& v) {
  uint32_t n = static_cast<uint32_t>(v.size());
  out->append(reinterpret_cast<const char*>(&n), sizeof(n));
  out->append(v);
}
std::vector<std::string> SplitFields(const std::string& in) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (in.size() - pos >= 4) {
    uint32_t n;
    std::memcpy(&n, in.data() + pos, 4);
    pos += 4;
    if (n > in.size() - pos) break;
    out.emplace_back(in.substr(pos, n));
    pos += n;
  }
  return out;
}

// Plays one rank of a 2-rank communicator over tcp up to `stall`, from the calling thread. It
// holds its connections open until destroyed, so the real rank sees no failure, only silence.
class FakePeer {
 public:
  bool Join(const braidUniqueId& uid, int rank, Stall stall) {
    using namespace braid;
    const int real = 1 - rank;
    auto id = DecodeUniqueId(uid);
    auto cfg = LoadConfigFromEnv();
    if (!id.ok() || !cfg.ok()) return Fail("bad id or environment");
    Deadline deadline = Deadline::After(20000);
    auto bs = Bootstrap::Connect(*id, rank, 2, deadline);
    if (!bs.ok()) return Fail(bs.status().message());
    bs_ = std::move(*bs);
    auto listener = ListenOn(LoopbackInterface().addr, 16);
    if (!listener.ok()) return Fail(listener.status().message());
    listener_ = std::move(*listener);
    auto addr = LocalAddress(listener_.get());
    if (!addr.ok()) return Fail(addr.status().message());

    // Round 1: what exchangeRankInfo publishes, agreeing with the real rank's configuration.
    std::string info;
    PutField(&info, BRAID_VERSION_STRING);
    PutField(&info, std::to_string(getpid()));
    PutField(&info, "abort-test-host");
    PutField(&info, cfg->host_id);
    PutField(&info, std::to_string(cfg->nchannels));
    PutField(&info, std::to_string(cfg->chunk_bytes));
    PutField(&info, cfg->algo);
    PutField(&info, std::string(reinterpret_cast<const char*>(&*addr), sizeof(*addr)));
    PutField(&info, "0,-1");  // placement: NICs not known (core/runtime/placement.h)
    PutField(&info, "");      // and no devices
    PutField(&info, std::to_string(cfg->oneshot_bytes));
    PutField(&info, "3");  // affinity mask: CPUs 0 and 1
    PutField(&info, cfg->lazy_connect ? "1" : "0");
    PutField(&info, "");  // no device-group link
    PutField(&info, std::to_string(cfg->board_two_shot));
    PutField(&info, "0,0");  // no cross-memory probe word
    PutField(&info, std::to_string(cfg->single_copy_bytes));
    PutField(&info, "");  // no TCP interface to count
    PutField(&info, std::to_string(cfg->staging_chunk_bytes));
    PutField(&info, "");  // no device IPC probe
    auto round1 = bs_->allGather(info, deadline);
    if (!round1.ok()) return Fail(round1.status().message());
    // Round 2: whether this rank reads its peers' memory (no), whether it maps their device
    // memory (no), then the transport list; only tcp, at our listener.
    std::string transports;
    PutField(&transports, "0");
    PutField(&transports, "0");
    PutField(&transports, "tcp");
    PutField(&transports, "tcp1 " + FormatAddress(*addr));
    auto round2 = bs_->allGather(transports, deadline);
    if (!round2.ok()) return Fail(round2.status().message());
    std::string peer_blob;
    auto f = SplitFields((*round2)[real]);
    for (size_t i = 2; i + 1 < f.size(); i += 2)
      if (f[i] == "tcp") peer_blob = f[i + 1];
    if (peer_blob.rfind("tcp1 ", 0) != 0) return Fail("the real rank published no tcp address");

    switch (stall) {
      case Stall::kNeverAccepts: {
        // The real rank's connection lands in our backlog: it now waits for a greeting.
        pollfd p{listener_.get(), POLLIN, 0};
        if (::poll(&p, 1, deadline.remainingMs()) != 1) return Fail("rank 0 never connected");
        return true;
      }
      case Stall::kNeverConnects:
        return true;
      case Stall::kBeforeBarrier: {
        auto peer = ParseHostPort(peer_blob.substr(5));
        if (!peer.ok()) return Fail(peer.status().message());
        // The tcp transport's handshake identity: a hash of the communicator tag
        // (tcp_transport.cc).
        std::string tag = "braid-tcp|" + HexOf(bs_->commNonce().data(), 8);
        uint8_t digest[SHA256_DIGEST_LENGTH];
        SHA256(reinterpret_cast<const uint8_t*>(tag.data()), tag.size(), digest);
        const std::vector<uint8_t> secret(id->secret.begin(), id->secret.end());
        // Rank 0's channel count rules; one more lane carries the express traffic.
        for (int lane = 0; lane < cfg->nchannels + 1; ++lane) {
          HandshakeHello hello;
          hello.purpose = 2;
          hello.rank = rank;
          hello.nranks = 2;
          hello.channel = lane;
          std::memcpy(hello.comm_nonce, digest, sizeof(hello.comm_nonce));
          auto fd = ConnectWithDeadline(*peer, deadline);
          if (!fd.ok()) return Fail(fd.status().message());
          Status hs = HandshakeClient(fd->get(), secret, hello, deadline);
          if (!hs.ok()) return Fail(hs.message());
          lanes_.push_back(std::move(*fd));
        }
        return true;
      }
    }
    return false;
  }

 private:
  bool Fail(const std::string& why) {
    std::fprintf(stderr, "fake peer: %s\n", why.c_str());
    return false;
  }
  std::unique_ptr<braid::Bootstrap> bs_;
  braid::Fd listener_;
  std::vector<braid::Fd> lanes_;
};

// ---------------------------------------------------------------- scenarios

// (1, 2) Rank 1 never arrives: rank 0's init waits at the rendezvous root.
class MissingRank : public ::testing::TestWithParam<Release> {};

TEST_P(MissingRank, ReleaseReturnsWithinTwoSeconds) {
  const Release how = GetParam();
  Root root;
  ASSERT_GT(root.pid, 0);
  int code = RunChild(20, kBaseEnv, [&] {
    int threads = Threads();
    braidComm_t comm = nullptr;
    if (!StartPendingInit(&comm, root.id, 0, 2)) return 1;
    if (!WaitUntilInitWaitsAtRoot(threads)) return 2;
    // Still pending, and not usable for anything else meanwhile.
    braidResult_t async = braidSuccess;
    int n = 0;
    if (braidCommGetAsyncError(comm, &async) != braidSuccess || async != braidInProgress ||
        braidCommCount(comm, &n) == braidSuccess) {
      std::fprintf(stderr, "a pending init answered async=%d or gave a count\n", async);
      return 3;
    }
    if (!TimedRelease(comm, how)) return 4;
    return HandleIsDead(comm) ? 0 : 5;
  });
  EXPECT_EQ(code, 0);
}

INSTANTIATE_TEST_SUITE_P(AbortInit, MissingRank,
                         ::testing::Values(Release::kAbort, Release::kDestroy),
                         [](const auto& info) { return std::string(Name(info.param)); });

// The root is gone: the init retries its connection until the deadline, unless aborted.
TEST(AbortInit, AbortWhileTheRootIsUnreachable) {
  braidUniqueId id;
  {
    Root root;
    ASSERT_GT(root.pid, 0);
    id = root.id;
  }
  int code = RunChild(20, kBaseEnv, [&] {
    braidComm_t comm = nullptr;
    if (!StartPendingInit(&comm, id, 0, 2) || !WaitUntilBlocked()) return 1;
    if (!TimedRelease(comm, Release::kAbort)) return 2;
    return HandleIsDead(comm) ? 0 : 3;
  });
  EXPECT_EQ(code, 0);
}

// (3) The peer completed the rendezvous but stalls in the tcp connect or before the barrier
// (connections made at init: BRAID_LAZY_CONNECT=0; lazily, there is no connect at init).
class StalledPeer : public ::testing::TestWithParam<std::tuple<Stall, Release>> {};

TEST_P(StalledPeer, ReleaseReturnsWithinTwoSeconds) {
  auto [stall, how] = GetParam();
  Root root;
  ASSERT_GT(root.pid, 0);
  Env env = kBaseEnv;
  env.emplace_back("BRAID_TRANSPORTS", "tcp");
  env.emplace_back("BRAID_LAZY_CONNECT", "0");  // the stalls are those of connecting at init
  int code = RunChild(30, env, [&, stall = stall, how = how] {
    const int fake = stall == Stall::kNeverAccepts ? 1 : 0;
    braidComm_t comm = nullptr;
    if (!StartPendingInit(&comm, root.id, 1 - fake, 2)) return 1;
    FakePeer peer;
    if (!peer.Join(root.id, fake, stall) || !WaitUntilBlocked()) return 2;
    braidResult_t async = braidSuccess;
    if (braidCommGetAsyncError(comm, &async) != braidSuccess || async != braidInProgress) {
      std::fprintf(stderr, "the init is no longer pending: %d\n", async);
      return 3;
    }
    if (!TimedRelease(comm, how)) return 4;
    return HandleIsDead(comm) ? 0 : 5;
  });
  EXPECT_EQ(code, 0);
}

INSTANTIATE_TEST_SUITE_P(AbortInit, StalledPeer,
                         ::testing::Combine(::testing::Values(Stall::kNeverAccepts,
                                                              Stall::kNeverConnects,
                                                              Stall::kBeforeBarrier),
                                            ::testing::Values(Release::kAbort, Release::kDestroy)),
                         [](const auto& info) {
                           return std::string(Name(std::get<0>(info.param))) + "_" +
                                  Name(std::get<1>(info.param));
                         });

// (4) Eight communicators, each in a pending init, aborted from eight threads at once.
TEST(AbortInit, EightPendingInitsAbortedFromEightThreads) {
  constexpr int kComms = 8;
  std::vector<std::unique_ptr<Root>> roots;
  for (int i = 0; i < kComms; ++i) {
    roots.push_back(std::make_unique<Root>());
    ASSERT_GT(roots.back()->pid, 0);
  }
  int code = RunChild(30, kBaseEnv, [&] {
    int threads = Threads();
    std::vector<braidComm_t> comms(kComms, nullptr);
    for (int i = 0; i < kComms; ++i)
      if (!StartPendingInit(&comms[i], roots[i]->id, 0, 2)) return 1;
    // Every init waits at its root (an init thread and a control listener each).
    if (!WaitFor([&] { return Threads() >= threads + 2 * kComms; }) || !WaitUntilBlocked())
      return 2;
    std::atomic<bool> go{false};
    std::atomic<int> failed{0};
    std::vector<std::thread> aborters;
    for (int i = 0; i < kComms; ++i)
      aborters.emplace_back([&, i] {
        while (!go.load()) std::this_thread::yield();
        if (!TimedRelease(comms[i], Release::kAbort)) failed.fetch_add(1);
      });
    auto t0 = Clock::now();
    go.store(true);
    for (auto& t : aborters) t.join();
    double all = SecondsSince(t0);
    if (failed.load() || all > kBoundS) {
      std::fprintf(stderr, "%d aborts failed; all returned after %.2f s\n", failed.load(), all);
      return 3;
    }
    return 0;
  });
  EXPECT_EQ(code, 0);
}

// Runs a checked all-reduce on a fresh one-rank communicator; blocking or not.
bool FreshCommunicatorWorks(bool blocking) {
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) return false;
  braidConfig_t cfg = BRAID_CONFIG_INITIALIZER;
  cfg.blocking = blocking ? 1 : 0;
  braidComm_t comm = nullptr;
  braidResult_t rc = braidCommInitRankConfig(&comm, 1, id, 0, &cfg);
  if (rc == braidInProgress) {
    braidResult_t async = braidInProgress;
    WaitFor([&] {
      return braidCommGetAsyncError(comm, &async) != braidSuccess || async != braidInProgress;
    });
    rc = async;
  }
  if (rc != braidSuccess) {
    std::fprintf(stderr, "fresh communicator: init rc=%d: %s\n", rc, braidGetLastError(comm));
    return false;
  }
  std::vector<float> v(1000, 3.0f);
  rc = braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, braidSum, comm);
  bool ok = rc == braidSuccess && v == std::vector<float>(1000, 3.0f);
  if (!ok) std::fprintf(stderr, "fresh communicator: all-reduce rc=%d\n", rc);
  return braidCommDestroy(comm) == braidSuccess && ok;
}

// (5) After an abort, new communicators in the same process work.
TEST(AbortInit, NewCommunicatorWorksAfterAbort) {
  Root root;
  ASSERT_GT(root.pid, 0);
  int code = RunChild(30, kBaseEnv, [&] {
    int threads = Threads();
    braidComm_t comm = nullptr;
    if (!StartPendingInit(&comm, root.id, 0, 2)) return 1;
    if (!WaitUntilInitWaitsAtRoot(threads)) return 2;
    if (!TimedRelease(comm, Release::kAbort)) return 3;
    if (!FreshCommunicatorWorks(true)) return 4;
    if (!FreshCommunicatorWorks(false)) return 5;
    return 0;
  });
  EXPECT_EQ(code, 0);
}

// (6) Threads, fds and /dev/shm segments are back to their baseline once abort or destroy
// returned: after an init that waited at the root, and after one that had created its shm
// segment and tcp listener and waited in the tcp connect.
TEST(AbortInit, NothingLeaksAfterAbortOrDestroy) {
  constexpr int kRounds = 3;
  std::vector<std::unique_ptr<Root>> roots;
  for (int i = 0; i < 2 * kRounds + 2; ++i) {
    roots.push_back(std::make_unique<Root>());
    ASSERT_GT(roots.back()->pid, 0);
  }
  Env env = kBaseEnv;
  env.emplace_back("BRAID_LAZY_CONNECT", "0");  // a tcp connect at init that waits
  int code = RunChild(60, env, [&] {
    auto missing_rank = [&](const braidUniqueId& id) {
      int threads = Threads();
      braidComm_t comm = nullptr;
      return StartPendingInit(&comm, id, 0, 2) && WaitUntilInitWaitsAtRoot(threads) &&
             TimedRelease(comm, Release::kAbort);
    };
    // Shm and tcp both enabled: the init creates its segment, then waits in the tcp connect for
    // a peer that only offers tcp.
    auto stalled_connect = [&](const braidUniqueId& id) {
      braidComm_t comm = nullptr;
      if (!StartPendingInit(&comm, id, 1, 2)) return false;
      FakePeer peer;
      return peer.Join(id, 0, Stall::kNeverConnects) && WaitUntilBlocked() &&
             TimedRelease(comm, Release::kDestroy);
    };
    // Warm-up: whatever the library sets up once per process is part of the baseline (e.g. the
    // socket that rings other ranks' doorbells, made at the first doorbell's bind).
    if (!missing_rank(roots[0]->id)) return 1;
    if (!stalled_connect(roots[2 * kRounds + 1]->id)) return 1;
    const int fds = Fds(), threads = Threads(), shm = ShmSegmentsOfThisProcess();
    for (int i = 0; i < kRounds; ++i) {
      if (!missing_rank(roots[1 + 2 * i]->id)) return 2;
      if (Fds() != fds || Threads() != threads || ShmSegmentsOfThisProcess() != shm) {
        std::fprintf(stderr, "after abort: fds %d -> %d, threads %d -> %d, shm %d -> %d\n", fds,
                     Fds(), threads, Threads(), shm, ShmSegmentsOfThisProcess());
        return 3;
      }
      if (!stalled_connect(roots[2 + 2 * i]->id)) return 4;
      if (Fds() != fds || Threads() != threads || ShmSegmentsOfThisProcess() != shm) {
        std::fprintf(stderr, "after destroy: fds %d -> %d, threads %d -> %d, shm %d -> %d\n", fds,
                     Fds(), threads, Threads(), shm, ShmSegmentsOfThisProcess());
        return 5;
      }
    }
    return 0;
  });
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace braid_test
