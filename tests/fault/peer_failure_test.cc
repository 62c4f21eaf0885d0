// Failures of other ranks and of the environment never hang a rank and never pass silently
// (spec/reliability.md items 1, 2, 4): a killed peer, a stopped peer, a rank that never arrives,
// and strangers on the bootstrap port. Mismatched calls (item 7): call_mismatch_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/net/unique_id.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Contains(const char* hay, const char* needle) {
  return std::strstr(hay, needle) != nullptr;
}

// Whether a survivor's failed call (`rc`, `msg`) after `victim` was killed at `t_kill` failed as
// it must: within 12 s, with a remote error or a timeout, naming the victim and its death
// (`death`: how the message says it). Prints why not.
bool NamesTheDeath(int rank, braidResult_t rc, const char* msg, int victim, const char* death,
                   Clock::time_point t_kill) {
  const double dt = SecondsSince(t_kill);
  const bool names =
      Contains(msg, ("rank " + std::to_string(victim) + " (host ").c_str()) && Contains(msg, death);
  if (dt <= 12 && (rc == braidErrRemote || rc == braidErrTimeout) && names) return true;
  std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, dt, msg);
  return false;
}

class Transports : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Fault, Transports, ::testing::Values("shm", "tcp"));
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, Transports, ::testing::Values("ucx"));
#endif

using KillParam = std::tuple<int, std::string>;
class PeerKilled : public ::testing::TestWithParam<KillParam> {};

// The last rank SIGKILLs itself in the middle of a loop of large all-reduces. Every survivor's
// call fails (never hangs) within BRAID_TIMEOUT plus slack, naming it.
TEST_P(PeerKilled, SurvivorsFailNamingIt) {
  auto [n, transport] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "10"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<float> buf(1 << 20, 1.0f);
    const int victim = nranks - 1;
    auto t_kill = Clock::now();
    for (int it = 0; it < 1000; ++it) {
      if (rank == victim && it == 3) raise(SIGKILL);
      if (it == 3) t_kill = Clock::now();
      braidResult_t rc =
          braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
      if (rc == braidSuccess) continue;
      // Whether this rank saw the death itself or a neighbour shut its streams down after it,
      // the victim is named as the cause (root_cause_test.cc checks the exact wording).
      if (!NamesTheDeath(rank, rc, braidGetLastError(comm), victim, ") died during allreduce #3",
                         t_kill))
        return 1;
      // The next call fails at once, too.
      auto t1 = Clock::now();
      if (braidAllReduce(buf.data(), buf.data(), 16, braidFloat32, braidSum, comm) ==
              braidSuccess ||
          SecondsSince(t1) > 1) {
        std::fprintf(stderr, "[rank %d] the call after the failure did not fail at once\n", rank);
        return 2;
      }
      return 0;
    }
    std::fprintf(stderr, "[rank %d] never saw the failure\n", rank);
    return 3;
  });
  for (int r = 0; r + 1 < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
  EXPECT_EQ(out[n - 1].exit_code, 128 + SIGKILL) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, PeerKilled,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) { return RanksTransportName(info); });
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, PeerKilled,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values("ucx")),
                         [](const auto& info) { return RanksTransportName(info); });
// In the default run (the ucx tier has the rest, collectives_test.cc says how they split).
INSTANTIATE_TEST_SUITE_P(UcxQuick, PeerKilled,
                         ::testing::Combine(::testing::Values(3), ::testing::Values("ucx")),
                         [](const auto& info) { return RanksTransportName(info); });
#endif

// The same with small non-blocking all-reduces, which run on the host's board inside the
// engine: a survivor's call waits for the dead rank's post, which never comes; the engine looks
// for the death when its loop idles (Engine::failBoardDeaths), so the wait fails, naming it,
// instead of waiting out BRAID_TIMEOUT (set to 60 s here: only the death can end it in time).
class BoardPeerKilled : public ::testing::TestWithParam<int> {};

TEST_P(BoardPeerKilled, NonBlockingCallsFailNamingIt) {
  const int n = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "60"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<float> in(8, 1.0f), res(8 * 4, 0.0f);
    const int victim = nranks - 1;
    auto t_kill = Clock::now();
    for (int it = 0; it < 1000; ++it) {
      if (rank == victim && it == 3) raise(SIGKILL);
      if (it == 3) t_kill = Clock::now();
      // Four in flight, as an overlapping trainer has them.
      braidRequest_t req[4] = {};
      braidResult_t rc = braidSuccess;
      int issued = 0;
      for (; issued < 4 && rc == braidSuccess; ++issued)
        rc = braidIallReduce(in.data(), res.data() + 8 * issued, 8, braidFloat32, braidSum, comm,
                             &req[issued]);
      if (rc != braidSuccess) --issued;
      for (int k = 0; k < issued; ++k) {
        const braidResult_t w = braidWait(&req[k], -1);
        if (rc == braidSuccess) rc = w;
      }
      if (rc == braidSuccess) {
        for (float v : res)
          if (v != static_cast<float>(nranks)) {
            std::fprintf(stderr, "[rank %d] wrong sum %g in call %d\n", rank, v, it);
            return 4;
          }
        continue;
      }
      if (!NamesTheDeath(rank, rc, braidGetLastError(comm), victim, "died", t_kill)) return 1;
      braidRequest_t after = nullptr;
      const auto t1 = Clock::now();
      if ((braidIallReduce(in.data(), res.data(), 8, braidFloat32, braidSum, comm, &after) ==
               braidSuccess &&
           braidWait(&after, -1) == braidSuccess) ||
          SecondsSince(t1) > 1) {
        std::fprintf(stderr, "[rank %d] the call after the failure did not fail at once\n", rank);
        return 2;
      }
      return 0;
    }
    std::fprintf(stderr, "[rank %d] never saw the failure\n", rank);
    return 3;
  });
  for (int r = 0; r + 1 < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
  EXPECT_EQ(out[n - 1].exit_code, 128 + SIGKILL) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, BoardPeerKilled, ::testing::Values(2, 4));

// Survivors recover (spec/reliability.md item 13): after a rank dies, the others shrink the
// communicator and complete a checked all-reduce without it.
TEST_P(Transports, SurvivorsShrinkAndContinue) {
  JobOptions opt;
  opt.nranks = 4;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "10"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    const int victim = 1;
    std::vector<int32_t> buf(1 << 18, 1);
    if (rank == victim) raise(SIGKILL);
    // Fails (naming the victim or timing out), never hangs.
    while (braidAllReduce(buf.data(), buf.data(), buf.size(), braidInt32, braidSum, comm) ==
           braidSuccess) {
    }
    braidComm_t small = nullptr;
    int excluded[] = {victim};
    if (braidCommShrink(comm, excluded, 1, &small, nullptr, 1) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] shrink: %s\n", rank, braidGetLastError(nullptr));
      return 1;
    }
    int n = 0, r = -1;
    braidCommCount(small, &n);
    braidCommUserRank(small, &r);
    if (n != nranks - 1 || r != (rank < victim ? rank : rank - 1)) return 2;
    std::vector<int32_t> v(1000, rank + 1), want(1000, 1 + 3 + 4);
    if (braidAllReduce(v.data(), v.data(), v.size(), braidInt32, braidSum, small) != braidSuccess ||
        v != want) {
      std::fprintf(stderr, "[rank %d] all-reduce after shrink: %s\n", rank,
                   braidGetLastError(small));
      return 3;
    }
    braidCommDestroy(small);
    return 0;
  });
  for (int r : {0, 2, 3}) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

// A stopped peer (SIGSTOP): the other rank times out within BRAID_TIMEOUT + 2 s.
TEST_P(Transports, StoppedPeerTimesOut) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "3"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int, const braidUniqueId&) {
    std::vector<float> buf(1 << 16, 1.0f);
    braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
    if (rank == 1) {
      pid_t me = getpid();
      if (write(fds[1], &me, sizeof(me)) != sizeof(me)) return 5;
      raise(SIGSTOP);
      return 0;
    }
    pid_t victim;
    if (read(fds[0], &victim, sizeof(victim)) != sizeof(victim)) return 6;
    auto t0 = Clock::now();
    braidResult_t rc =
        braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
    double dt = SecondsSince(t0);
    const char* msg = braidGetLastError(comm);
    kill(victim, SIGKILL);
    if (rc != braidErrTimeout || dt > 5 || !Contains(msg, "rank 1") ||
        !Contains(msg, "BRAID_TIMEOUT")) {
      std::fprintf(stderr, "[rank 0] rc=%d after %.1fs: %s\n", rc, dt, msg);
      return 1;
    }
    return 0;
  });
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(out[0].exit_code, 0) << DescribeOutcomes(out);
}

// Two of three ranks init; the third never arrives. Both fail with a timeout naming it.
TEST(Init, RankThatNeverArrivesTimesOut) {
  JobOptions opt;
  opt.nranks = 3;
  opt.init = false;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TIMEOUT", "3"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    if (rank == 2) return 0;  // never shows up
    braidComm_t comm = nullptr;
    auto t0 = Clock::now();
    braidResult_t rc = braidCommInitRank(&comm, nranks, id, rank);
    double dt = SecondsSince(t0);
    const char* msg = braidGetLastError(nullptr);
    // The message names this rank's host, which it knows before the rendezvous ("host ?" before).
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    if (rc == braidSuccess || comm != nullptr || dt > 6 || !Contains(msg, "2") ||
        !Contains(msg, (std::string("on host ") + host).c_str()) || Contains(msg, "host ?")) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, dt, msg);
      return 1;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Strangers connect to the rendezvous port (garbage, wrong-secret handshakes, idle
// connections) while the real ranks init and run a checked all-reduce: the job is unaffected.
TEST(Init, StrangersOnTheBootstrapPortAreRejected) {
  braidUniqueId id;
  pid_t root = StartRootProcess(&id);
  ASSERT_GT(root, 0);
  auto data = braid::DecodeUniqueId(id);
  ASSERT_TRUE(data.ok());
  const sockaddr_storage addr = data->root;
  std::vector<int> idle;
  auto connect_one = [&]() {
    int fd = socket(addr.ss_family, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  };
  for (int i = 0; i < 50; ++i) {
    int fd = connect_one();
    ASSERT_GE(fd, 0);
    if (i % 3 == 0) {
      char junk[300];
      std::memset(junk, 0xff, sizeof(junk));  // a huge "length prefix" and garbage
      (void)!write(fd, junk, sizeof(junk));
      close(fd);
    } else if (i % 3 == 1) {
      close(fd);  // immediate close
    } else {
      idle.push_back(fd);  // stays open and silent for the whole job
    }
  }
  // The ranks join with this id (the harness normally makes its own).
  const int n = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("BRAID_TIMEOUT", "20", 1);
      braidComm_t comm;
      if (braidCommInitRank(&comm, n, id, r) != braidSuccess) _exit(1);
      std::vector<int32_t> v(1000, r + 1);
      if (braidAllReduce(v.data(), v.data(), v.size(), braidInt32, braidSum, comm) != braidSuccess)
        _exit(2);
      for (int32_t x : v)
        if (x != n * (n + 1) / 2) _exit(3);
      braidCommDestroy(comm);
      _exit(0);
    }
    pids.push_back(pid);
  }
  auto t0 = Clock::now();
  for (pid_t p : pids) {
    int st = 0;
    while (waitpid(p, &st, WNOHANG) == 0) {
      if (SecondsSince(t0) > 40) {
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        break;
      }
      usleep(10000);
    }
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank status " << st;
  }
  for (int fd : idle) close(fd);
  StopRootProcess(root);
}

}  // namespace
}  // namespace braid_test
