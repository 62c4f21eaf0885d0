// Failures name their cause everywhere (issue 8): when a rank dies or stops, every survivor's
// error names that rank (host, pid) and the operation it failed in ("allreduce #3"), however far
// it is from the failed rank, not the neighbour that shut a stream down after it; with two
// independent failures each survivor names one of the two. Order comes from pipes, never from
// sleeps; the harness's wall-clock guard bounds every job.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "../common/proc_state.h"
#include "core/runtime/comm_registry.h"
#include "multirank/harness.h"
#include "multirank/pid_pipe.h"
#include "multirank/shared_state.h"
#include "../common/sanitizers.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// "rank 2 (host h, pid 42) died during allreduce #3": the cause as every survivor must name it.
// "rank 2 (host h, pid 42)": how a cause names a rank.
std::string Who(int rank, pid_t pid) {
  return "rank " + std::to_string(rank) + " (host " + Hostname() + ", pid " + std::to_string(pid) +
         ")";
}

std::string Cause(int rank, pid_t pid, const std::string& what, int seq) {
  return Who(rank, pid) + " " + what + " during allreduce #" + std::to_string(seq);
}

using Param = std::tuple<int, std::string>;
class RootCause : public ::testing::TestWithParam<Param> {};

INSTANTIATE_TEST_SUITE_P(Fault, RootCause,
                         ::testing::Combine(::testing::Values(4, 8),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) { return RanksTransportName(info); });
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, RootCause,
                         ::testing::Combine(::testing::Values(4, 8), ::testing::Values("ucx")),
                         [](const auto& info) { return RanksTransportName(info); });
INSTANTIATE_TEST_SUITE_P(UcxQuick, RootCause,
                         ::testing::Combine(::testing::Values(4), ::testing::Values("ucx")),
                         [](const auto& info) { return RanksTransportName(info); });
#endif

// A rank in the middle SIGKILLs itself before all-reduce #3: every survivor (neighbour or not)
// fails within 1 s naming it, its pid and "allreduce #3", and so does its next call.
TEST_P(RootCause, KilledRankIsNamedByEverySurvivor) {
  auto [n, transport] = GetParam();
  PidPipe victim_pid;
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "20"}};
  const int victim = n / 2;
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t vpid = -1;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
    } else if ((vpid = victim_pid.take()) <= 0) {
      return 6;
    }
    std::vector<float> buf(1 << 18, 1.0f);
    for (int it = 0; it < 100; ++it) {
      if (rank == victim && it == 3) raise(SIGKILL);
      const auto t0 = Clock::now();
      braidResult_t rc =
          braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
      if (rc == braidSuccess) continue;
      const double dt = SecondsSince(t0);
      const std::string msg = braidGetLastError(comm);
      const std::string want = Cause(victim, vpid, "died", 3);
      if (it != 3 || rc != braidErrRemote || dt > 1.0 || msg.find(want) == std::string::npos) {
        std::fprintf(stderr, "[rank %d] call %d: rc=%d after %.2fs: %s\n  (want: %s)\n", rank, it,
                     rc, dt, msg.c_str(), want.c_str());
        return 1;
      }
      const auto t1 = Clock::now();
      rc = braidAllReduce(buf.data(), buf.data(), 16, braidFloat32, braidSum, comm);
      const std::string next = braidGetLastError(comm);
      if (rc == braidSuccess || SecondsSince(t1) > 1.0 || next.find(want) == std::string::npos) {
        std::fprintf(stderr, "[rank %d] the next call: rc=%d: %s\n", rank, rc, next.c_str());
        return 2;
      }
      return 0;
    }
    std::fprintf(stderr, "[rank %d] never saw the failure\n", rank);
    return 3;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(out[r].exit_code, r == victim ? 128 + SIGKILL : 0) << DescribeOutcomes(out);
}

// A rank in the middle stops (SIGSTOP) before all-reduce #1: every survivor times out within
// BRAID_TIMEOUT + 1 s naming it as stopped, not the live neighbour it was itself waiting on.
TEST_P(RootCause, StoppedRankIsNamedByEverySurvivor) {
  auto [n, transport] = GetParam();
  PidPipe victim_pid;
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  constexpr int kTimeoutS = 3;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", std::to_string(kTimeoutS)}};
  const int victim = n / 2;
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<float> buf(1 << 16, 1.0f);
    if (braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm) !=
        braidSuccess)
      return 4;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
      raise(SIGSTOP);
      return 0;
    }
    const pid_t vpid = victim_pid.take();
    if (vpid <= 0) return 6;
    // Taken before the victim stops (it may still be on its way to raise()): a later stop only
    // makes the bound easier.
    const auto t0 = Clock::now();
    braidResult_t rc =
        braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    const std::string want =
        Cause(victim, vpid, "stopped responding for " + std::to_string(kTimeoutS) + " s", 1);
    int code = 0;
    if (rc != braidErrTimeout || dt > kTimeoutS + 1.0 || msg.find(want) == std::string::npos) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s)\n", rank, rc, dt,
                   msg.c_str(), want.c_str());
      code = 1;
    }
    // The victim goes only once every survivor has its error (a death must not be what a slower
    // survivor reports).
    const int first = victim == 0 ? 1 : 0;
    char c = 1;
    if (rank != first) {
      if (write(done[1], &c, 1) != 1) return 7;
    } else {
      for (int k = 0; k < nranks - 2; ++k)
        if (read(done[0], &c, 1) != 1) return 8;
      kill(vpid, SIGKILL);
    }
    return code;
  });
  close(done[0]);
  close(done[1]);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(out[r].exit_code, r == victim ? 128 + SIGKILL : 0) << DescribeOutcomes(out);
}

// Two ranks die at once, independently: each survivor names one of them (with its pid and the
// operation), never a live rank and never an unnamed failure.
TEST_P(RootCause, TwoIndependentDeathsEachSurvivorNamesOne) {
  auto [n, transport] = GetParam();
  PidPipe pid_a, pid_b;
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "20"}};
  const int a = 1, b = n - 1;
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t apid = -1, bpid = -1;
    if (rank == a) {
      if (!pid_a.publish(nranks - 1)) return 5;
      if ((bpid = pid_b.take()) <= 0) return 6;
    } else if (rank == b) {
      if (!pid_b.publish(nranks - 1)) return 5;
      if ((apid = pid_a.take()) <= 0) return 6;
    } else if ((apid = pid_a.take()) <= 0 || (bpid = pid_b.take()) <= 0) {
      return 6;
    }
    std::vector<float> buf(1 << 18, 1.0f);
    for (int it = 0; it < 100; ++it) {
      if ((rank == a || rank == b) && it == 3) raise(SIGKILL);
      const auto t0 = Clock::now();
      braidResult_t rc =
          braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
      if (rc == braidSuccess) continue;
      const double dt = SecondsSince(t0);
      const std::string msg = braidGetLastError(comm);
      const bool names_a = msg.find(Cause(a, apid, "died", 3)) != std::string::npos;
      const bool names_b = msg.find(Cause(b, bpid, "died", 3)) != std::string::npos;
      if (it != 3 || rc != braidErrRemote || dt > 1.0 || !(names_a || names_b)) {
        std::fprintf(stderr, "[rank %d] call %d: rc=%d after %.2fs: %s\n", rank, it, rc, dt,
                     msg.c_str());
        return 1;
      }
      return 0;
    }
    return 3;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(out[r].exit_code, r == a || r == b ? 128 + SIGKILL : 0) << DescribeOutcomes(out);
}

// A rank destroys the communicator while the others wait on it in a collective it never makes
// (issue 42, item 1): the destroy used to return at once, unannounced, and the others waited
// BRAID_TIMEOUT over shm ("stopped responding") or named a death over tcp. Now every survivor fails
// within 1 s naming "rank V ... destroyed the communicator". The victim destroys once the others'
// call has reached it (awaitedByAPeer: their stream data or board posts are there), the case the
// destroy can see; a small call (on shm: the board) and a large one (the engine's streams).
using DestroyParam = std::tuple<int, std::string, size_t>;
class DestroyMidCall : public ::testing::TestWithParam<DestroyParam> {};

INSTANTIATE_TEST_SUITE_P(Fault, DestroyMidCall,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("shm", "tcp"),
                                            ::testing::Values(size_t{16}, size_t{1} << 18)),
                         [](const auto& info) {
                           std::string name = "n";
                           name += std::to_string(std::get<0>(info.param));
                           name += "_" + std::get<1>(info.param) + "_";
                           name += std::to_string(std::get<2>(info.param));
                           name += "floats";
                           return name;
                         });

TEST_P(DestroyMidCall, EverySurvivorNamesTheDestroyWithinOneSecond) {
  auto [n, transport, count] = GetParam();
  PidPipe victim_pid;
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
  const int victim = n / 2;
  // The survivors count themselves once call #0 is done: one still in it would fail there on the
  // victim's notice. A counter in memory the forked ranks share.
  Shared<std::atomic<int>> finished;
  ASSERT_TRUE(finished.ok());
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t vpid = -1;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
    } else if ((vpid = victim_pid.take()) <= 0) {
      return 6;
    }
    std::vector<float> buf(count, 1.0f);
    // Call #0 together (connections made), then the victim leaves.
    if (braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm) != braidSuccess)
      return 7;
    if (rank == victim) {
      braid::CommRef ref = braid::LookupComm(comm);
      const auto t0 = Clock::now();
      while (finished->load() < nranks - 1 || !ref->awaitedByAPeer()) {
        if (SecondsSince(t0) > 30) return 8;  // (the harness's guard would fire anyway)
        sched_yield();
      }
      ref.reset();
      if (braidCommDestroy(comm) != braidSuccess) return 9;
      _exit(0);  // (the harness would destroy it again)
    }
    finished->fetch_add(1);
    const auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    const std::string want = Who(victim, vpid) + " destroyed the communicator";
    if (rc != braidErrRemote || dt > 1.0 || msg.find(want) == std::string::npos) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s)\n", rank, rc, dt,
                   msg.c_str(), want.c_str());
      return 1;
    }
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

// One rank never makes the collective the others make (issue 42, item 2): it is alive and
// answers probes, so the rank each waiting rank waits on directly may be a live one waiting itself
// (4 ranks over tcp named the live rank 3, 3 runs in 3). Every waiting rank names the rank that
// never called, found by asking every rank how many collectives it issued; repeated, since the
// wrong answer depended on which rank timed out first.
using NotCallingParam = std::tuple<int, std::string, int>;  // ranks, transport, repetitions
class NotCalling : public ::testing::TestWithParam<NotCallingParam> {};

INSTANTIATE_TEST_SUITE_P(Fault, NotCalling,
                         // 6 repetitions at the counts CI runs (tools/ci-extended.txt leaves
                         // the other two to --full, with 20): each takes the 1 s deadline and
                         // about 2 s in all (the wrong answer came 3 runs in 3 when it was there).
                         ::testing::Values(NotCallingParam{4, "tcp", 6},
                                           NotCallingParam{8, "tcp", 20},
                                           NotCallingParam{4, "shm", 20},
                                           NotCallingParam{8, "shm", 6}),
                         [](const auto& info) {
                           std::string name = "n";
                           name += std::to_string(std::get<0>(info.param));
                           name += "_" + std::get<1>(info.param);
                           return name;
                         });

TEST_P(NotCalling, EveryWaitingRankNamesTheRankThatNeverCalled) {
  auto [n, transport, reps] = GetParam();
  constexpr int kTimeoutS = 1;
  const int absent = 2;
  for (int rep = 0; rep < reps; ++rep) {
    PidPipe absent_pid;
    int done[2];
    ASSERT_EQ(pipe(done), 0);
    JobOptions opt;
    opt.nranks = n;
    opt.timeout_s = 60;
    opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", std::to_string(kTimeoutS)}};
    auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
      // Engine-sized, so that the ranks wait on each other's streams in a chain.
      std::vector<float> buf(1 << 16, 1.0f);
      if (braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm) !=
          braidSuccess)
        return 4;
      if (rank == absent) {
        if (!absent_pid.publish(nranks - 1)) return 5;
        // Alive, answering probes, never calling: until every waiting rank has its error.
        char c;
        for (int k = 0; k < nranks - 1; ++k)
          if (read(done[0], &c, 1) != 1) return 8;
        return 0;
      }
      const pid_t apid = absent_pid.take();
      if (apid <= 0) return 6;
      const auto t0 = Clock::now();
      braidResult_t rc =
          braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
      const double dt = SecondsSince(t0);
      const std::string msg = braidGetLastError(comm);
      const std::string want = Who(absent, apid) + " has not called this operation";
      int code = 0;
      if (rc != braidErrTimeout || dt > kTimeoutS + 2.0 || msg.find(want) == std::string::npos) {
        std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s)\n", rank, rc, dt,
                     msg.c_str(), want.c_str());
        code = 1;
      }
      char c = 1;
      if (write(done[1], &c, 1) != 1) return 7;
      return code;
    });
    close(done[0]);
    close(done[1]);
    bool ok = true;
    for (int r = 0; r < n; ++r) ok = ok && out[r].exit_code == 0;
    ASSERT_TRUE(ok) << "repetition " << rep << ": " << DescribeOutcomes(out);
  }
}

// The destroy comes first and the others' call later (the destroy saw nobody waiting, so it
// announced nothing): a waiting rank finds the destroyed rank's control listener gone within
// about half a second of waiting (Engine::failIfPeerLeft, and the board's wait) and names it
// instead of waiting BRAID_TIMEOUT (30 s here).
TEST_P(DestroyMidCall, ACallAfterThePeersDestroyNamesItWithinOneSecond) {
  auto [n, transport, count] = GetParam();
  PidPipe victim_pid;
  int gone[2], done[2];
  ASSERT_EQ(pipe(gone), 0);
  ASSERT_EQ(pipe(done), 0);
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
  const int victim = n / 2;
  // The victim destroys once every rank has finished call #0: a survivor that fails call #1
  // tells every rank, and one still in call #0 (making a lazy connection, say) would fail there
  // too. A counter in memory the forked ranks share.
  Shared<std::atomic<int>> finished;
  ASSERT_TRUE(finished.ok());
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t vpid = -1;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
    } else if ((vpid = victim_pid.take()) <= 0) {
      return 6;
    }
    std::vector<float> buf(count, 1.0f);
    if (braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm) != braidSuccess)
      return 7;
    char c = 1;
    finished->fetch_add(1);
    if (rank == victim) {
      while (finished->load() < nranks) sched_yield();  // (the harness's guard bounds it)
      if (braidCommDestroy(comm) != braidSuccess) return 9;
      // Destroyed: the others call now. The process stays until they have their errors.
      for (int k = 0; k < nranks - 1; ++k)
        if (write(gone[1], &c, 1) != 1) return 10;
      for (int k = 0; k < nranks - 1; ++k)
        if (read(done[0], &c, 1) != 1) return 11;
      _exit(0);  // (the harness would destroy it again)
    }
    if (read(gone[0], &c, 1) != 1) return 12;
    const auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    const std::string who = Who(victim, vpid) + " ";
    int code = 0;
    if (rc != braidErrRemote || dt > 1.0 ||
        (msg.find(who + "left the communicator") == std::string::npos &&
         msg.find(who + "destroyed the communicator") == std::string::npos)) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s left or destroyed)\n",
                   rank, rc, dt, msg.c_str(), who.c_str());
      code = 1;
    }
    if (write(done[1], &c, 1) != 1) return 13;
    return code;
  });
  for (int fd : {gone[0], gone[1], done[0], done[1]}) close(fd);
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

// A rank fails on its own (issue 42, item 3): it runs out of file descriptors when its next
// collective needs new connections (lazy, over tcp), and exits as a program would. Its peers used
// to wait the whole operation timeout and call it "stopped responding"; now every survivor fails
// within 1 s naming it and what it ran out of, whether it heard the rank's own notice (sent on
// descriptors held in reserve for it) or a refusal from its listener.
class FailsAlone : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Fault, FailsAlone, ::testing::Values(2, 4, 8), [](const auto& info) {
  std::string name = "n";
  name += std::to_string(info.param);
  return name;
});

TEST_P(FailsAlone, EverySurvivorNamesTheRankAndWhatItRanOutOf) {
  const int n = GetParam();
  PidPipe victim_pid;
  int exhausted[2], done[2], leave[2];
  ASSERT_EQ(pipe(exhausted), 0);
  ASSERT_EQ(pipe(done), 0);
  ASSERT_EQ(pipe(leave), 0);
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  // No call agreement rounds (their butterfly would connect every pair of 4 ranks) and no link
  // measurement at init (it may connect pairs too): the ring connects the neighbours only.
  opt.env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "30"},
             {"BRAID_LAZY_CONNECT", "1"}, {"BRAID_ALGO", "allreduce:ring"},
             {"BRAID_VERIFY_CALLS", "0"}, {"BRAID_LINK_CALIBRATION", "0"}};
  const int victim = n / 2;
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t vpid = -1;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
    } else if ((vpid = victim_pid.take()) <= 0) {
      return 6;
    }
    // A ring connects the neighbours only; the all-to-all then needs every other pair. On two
    // ranks there is one pair: the all-to-all makes the first connection.
    std::vector<float> buf(4096, 1.0f);
    if (nranks > 2 && braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum,
                                     comm) != braidSuccess)
      return 7;
    if (rank == victim) {
      rlimit rl{};
      getrlimit(RLIMIT_NOFILE, &rl);
      rl.rlim_cur = 256;
      setrlimit(RLIMIT_NOFILE, &rl);
      while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
      }
      // Only now may the others connect to it (its listener would have accepted them).
      char c = 1;
      for (int k = 0; k < nranks - 1; ++k)
        if (write(exhausted[1], &c, 1) != 1) return 3;
    } else {
      char c;
      if (read(exhausted[0], &c, 1) != 1) return 4;
    }
    std::vector<int32_t> in(static_cast<size_t>(nranks) * 64, rank), got(in.size());
    const auto t0 = Clock::now();
    braidResult_t rc = braidAllToAll(in.data(), got.data(), 64, braidInt32, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    if (rank == victim) {
      if (rc == braidSuccess || dt > 1.0 ||
          (msg.find("EMFILE") == std::string::npos &&
           msg.find("file descriptors") == std::string::npos)) {
        std::fprintf(stderr, "[victim %d] rc=%d: %s\n", rank, rc, msg.c_str());
        return 2;
      }
      braidCommDestroy(comm);
      _exit(0);  // as a program that failed would (the harness would destroy it again)
    }
    const std::string who = Who(victim, vpid) + " failed";
    int code = 0;
    if (rc == braidSuccess || dt > 1.0 || msg.find(who) == std::string::npos ||
        (msg.find("EMFILE") == std::string::npos &&
         msg.find("file descriptors") == std::string::npos)) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s ... EMFILE)\n", rank, rc,
                   dt, msg.c_str(), who.c_str());
      code = 1;
    }
    // The survivors leave once all have their errors (one that exits first would be named by a
    // slower one as having died).
    char c = 1;
    const int first = victim == 0 ? 1 : 0;
    if (rank != first) {
      if (write(done[1], &c, 1) != 1 || read(leave[0], &c, 1) != 1) return 9;
    } else {
      for (int k = 0; k < nranks - 2; ++k)
        if (read(done[0], &c, 1) != 1) return 10;
      for (int k = 0; k < nranks - 2; ++k)
        if (write(leave[1], &c, 1) != 1) return 11;
    }
    return code;
  });
  close(exhausted[0]);
  close(exhausted[1]);
  close(done[0]);
  close(done[1]);
  close(leave[0]);
  close(leave[1]);
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

// A rank fails on its own over any transport (issue 42, item 3, on shm and at 2 ranks too): its
// address space is capped just above what it uses, so the frames of a quantized all-gather cannot
// be had on it alone. It reports out of memory; every survivor fails soon after naming it and
// what it ran out of (its notice), instead of waiting the operation timeout (30 s here). Soon is
// counted from the victim's failure (steady_clock is the host's CLOCK_MONOTONIC, one clock for
// every process), not from the call's start: 8 ranks encoding 32 MiB each on 2 cores spend most
// of a second before the victim even allocates. And it is kNamedWithinS, not 1 s: the notice
// fills the survivors' cause boards at once but does not end their waiting operations; they fail
// when the victim's process goes, after its destroy, 1.0-1.2 s after its failure in about one
// 8-rank run in six (docs/reliability.md; the build before this test's change did the same).
constexpr double kNamedWithinS = 3.0;
class OutOfMemoryAlone : public ::testing::TestWithParam<Param> {};
INSTANTIATE_TEST_SUITE_P(Fault, OutOfMemoryAlone,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           // (Appended piecewise: gcc 12 warns on a chain of operator+ here.)
                           std::string name = "n";
                           name += std::to_string(std::get<0>(info.param));
                           name += '_';
                           name += std::get<1>(info.param);
                           return name;
                         });

TEST_P(OutOfMemoryAlone, EverySurvivorNamesTheRankThatRanOutOfMemory) {
#if BRAID_TEST_UNDER_ASAN
  GTEST_SKIP() << "ASan reserves terabytes of shadow memory: RLIMIT_AS cannot be applied";
#endif
  const auto [n, transport] = GetParam();
  PidPipe victim_pid;
  int ready[2], done[2], leave[2], failed_at[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(failed_at), 0);
  ASSERT_EQ(pipe(done), 0);
  ASSERT_EQ(pipe(leave), 0);
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
  const int victim = n / 2;
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t vpid = -1;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
    } else if ((vpid = victim_pid.take()) <= 0) {
      return 6;
    }
    // 32 MiB per rank: the INT8 frames of the call need 8 MiB per rank and more on every rank.
    const size_t count = size_t{8} << 20;
    std::vector<float> in(count, static_cast<float>(rank)), got(count * nranks, -1.0f);
    braidQuantConfig_t quant{};
    quant.bits = 8;
    quant.blockSize = 2048;
    quant.symmetric = 1;
    // Everything else this rank will touch is in place before the cap (a first small call too).
    if (braidAllReduce(in.data(), got.data(), 1024, braidFloat32, braidSum, comm) != braidSuccess)
      return 7;
    // Every rank is out of that call before the victim fails: its failure shuts its streams
    // down, which would cut a peer still reading the first call's last message.
    char c = 1;
    if (rank != victim) {
      if (write(ready[1], &c, 1) != 1) return 3;
    } else {
      for (int k = 0; k < nranks - 1; ++k)
        if (read(ready[0], &c, 1) != 1) return 4;
    }
    if (rank == victim) {
      rlimit lim{};
      lim.rlim_cur = lim.rlim_max =
          static_cast<rlim_t>(braid_test_common::AddressSpaceBytes() + (8ll << 20));
      if (setrlimit(RLIMIT_AS, &lim) != 0) return 8;
    }
    const auto t0 = Clock::now();
    braidResult_t rc =
        braidAllGatherQuantized(in.data(), got.data(), count, braidFloat32, &quant, comm);
    const auto t1 = Clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    const std::string msg = braidGetLastError(comm);
    if (rank == victim) {
      // When it failed, for every survivor (written whatever happened: they wait for it).
      const int64_t at = t1.time_since_epoch().count();
      for (int k = 0; k < nranks - 1; ++k)
        if (write(failed_at[1], &at, sizeof(at)) != sizeof(at)) return 12;
      if (rc != braidErrSystem || msg.find("out of memory") == std::string::npos) {
        std::fprintf(stderr, "[victim %d] rc=%d after %.2fs: %s\n", rank, rc, dt, msg.c_str());
        return 2;
      }
      braidCommDestroy(comm);
      _exit(0);  // as a program that failed would (the harness would destroy it again)
    }
    int64_t victim_at = 0;
    if (read(failed_at[0], &victim_at, sizeof(victim_at)) != sizeof(victim_at)) return 13;
    // (Negative when the notice reached this rank before the victim's own call returned.)
    const double late =
        std::chrono::duration<double>(t1 - Clock::time_point(Clock::duration(victim_at))).count();
    const std::string who = Who(victim, vpid) + " failed";
    int code = 0;
    if (rc == braidSuccess || late > kNamedWithinS || msg.find(who) == std::string::npos ||
        msg.find("out of memory") == std::string::npos) {
      std::fprintf(stderr,
                   "[rank %d] rc=%d after %.2fs, %.2fs after the victim failed: %s\n  (want: %s "
                   "... out of memory)\n",
                   rank, rc, dt, late, msg.c_str(), who.c_str());
      code = 1;
    }
    // The survivors leave once all have their errors (one that exits first would be named by a
    // slower one as having left).
    const int first = victim == 0 ? 1 : 0;
    if (rank != first) {
      if (write(done[1], &c, 1) != 1 || read(leave[0], &c, 1) != 1) return 9;
    } else {
      for (int k = 0; k < nranks - 2; ++k)
        if (read(done[0], &c, 1) != 1) return 10;
      for (int k = 0; k < nranks - 2; ++k)
        if (write(leave[1], &c, 1) != 1) return 11;
    }
    return code;
  });
  for (int fd :
       {ready[0], ready[1], done[0], done[1], leave[0], leave[1], failed_at[0], failed_at[1]})
    close(fd);
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
