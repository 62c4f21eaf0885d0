// A rank that leaves the communicator with every call of its own complete, by braidCommDestroy
// or by exiting without one, is named for what it did by every rank still calling (issue 42):
// "exited without destroying the communicator" or "destroyed the communicator", never "died"
// (a crash) or a timeout. Two moments: the others already wait on it when it leaves (it sees
// their call: braidComm::leave announces), or they call only after it has gone (they read its
// goodbye on a stream, or its departure word on the shm board). Order comes from pipes and
// pidfds, never from sleeps; the harness's wall-clock guard bounds every job.
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/runtime/comm_registry.h"
#include "multirank/harness.h"
#include "multirank/pid_pipe.h"
#include "multirank/shared_state.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Who(int rank, pid_t pid) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return "rank " + std::to_string(rank) + " (host " + host + ", pid " + std::to_string(pid) + ")";
}

// Blocks until process `pid` has exited (a pidfd turns readable), at most `seconds`.
bool AwaitExit(pid_t pid, int seconds) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // gone already (and reaped)
  pollfd p{fd, POLLIN, 0};
  const int n = poll(&p, 1, seconds * 1000);
  close(fd);
  return n == 1;
}

enum class How { kExit, kDestroy };

const char* WhatItDid(How how) {
  return how == How::kExit ? " exited without destroying the communicator"
                           : " destroyed the communicator";
}

// Every survivor's call fails as a remote error within 1 s, naming the victim and what it did.
int ExpectNamed(braidComm_t comm, int rank, int victim, pid_t vpid, How how,
                std::vector<float>& buf) {
  const auto t0 = Clock::now();
  braidResult_t rc =
      braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
  const double dt = SecondsSince(t0);
  const std::string msg = braidGetLastError(comm);
  const std::string want = Who(victim, vpid) + WhatItDid(how);
  if (rc != braidErrRemote || dt > 1.0 || msg.find(want) == std::string::npos ||
      msg.find(" died") != std::string::npos) {
    std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s)\n", rank, rc, dt,
                 msg.c_str(), want.c_str());
    return 1;
  }
  return 0;
}

std::string Name(int n, const std::string& transport, size_t count) {
  // Appended piece by piece: GCC 12 warns (falsely) about a chain of operator+ here.
  std::string name = "n";
  name += std::to_string(n);
  name += "_";
  name += transport;
  name += "_";
  name += std::to_string(count);
  name += "floats";
  return name;
}

// A rank returns from its program (exit) without destroying the communicator while the others
// wait on it in a collective it never makes: every survivor names the exit within 1 s. A small
// call (on shm: the board) and a large one (the engine's streams).
using ExitParam = std::tuple<int, std::string, size_t>;
class ExitMidCall : public ::testing::TestWithParam<ExitParam> {};

INSTANTIATE_TEST_SUITE_P(Fault, ExitMidCall,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("shm", "tcp"),
                                            ::testing::Values(size_t{16}, size_t{1} << 18)),
                         [](const auto& info) {
                           return Name(std::get<0>(info.param), std::get<1>(info.param),
                                       std::get<2>(info.param));
                         });

#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, ExitMidCall,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("ucx"),
                                            ::testing::Values(size_t{16}, size_t{1} << 18)),
                         [](const auto& info) {
                           return Name(std::get<0>(info.param), std::get<1>(info.param),
                                       std::get<2>(info.param));
                         });
#endif

TEST_P(ExitMidCall, EverySurvivorNamesTheExitWithinOneSecond) {
  auto [n, transport, count] = GetParam();
  PidPipe victim_pid;
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
  const int victim = n / 2;
  // The survivors count themselves (in shared memory) once call #0 is done. UCX takes a peer's
  // bytes off the wire only when this rank's engine progresses, so an idle rank cannot see that a
  // peer waits on it (awaitedByAPeer stays false over ucx): there the victim exits once every
  // survivor is about to call, and the survivors, in their call or about to be, read its goodbye.
  const bool sees_waiters = transport != "ucx";
  Shared<std::atomic<int>> calling;
  ASSERT_TRUE(calling.ok());
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    pid_t vpid = -1;
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
    } else if ((vpid = victim_pid.take()) <= 0) {
      return 6;
    }
    std::vector<float> buf(count, 1.0f);
    // Call #0 together (connections made), then the victim leaves once the others' call #1
    // has reached it.
    if (braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm) !=
        braidSuccess) {
      std::fprintf(stderr, "[rank %d] call #0: %s\n", rank, braidGetLastError(comm));
      return 7;
    }
    if (rank == victim) {
      braid::CommRef ref = braid::LookupComm(comm);
      const auto t0 = Clock::now();
      // Every survivor has finished call #0 (one still in it would fail there on the victim's
      // notice), and (where it can tell) a survivor's call #1 has reached the victim.
      while (calling->load() < nranks - 1 || (sees_waiters && !ref->awaitedByAPeer())) {
        if (SecondsSince(t0) > 30) return 8;
        sched_yield();
      }
      ref.reset();
      std::exit(0);  // the exit hook, as a program returning from main
    }
    calling->fetch_add(1);
    return ExpectNamed(comm, rank, victim, vpid, How::kExit, buf);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

// A rank leaves (exits, or destroys the communicator and then exits) while nobody waits on it;
// the others make their next call only once its process is gone. They read its goodbye (a
// stream) or its departure (the shm board) and name what it did, not a death: before, the exit
// read as "died", and so did a destroy across hosts (its process gone, a closed socket).
using LateParam = std::tuple<int, std::string, size_t, How>;
class LateCall : public ::testing::TestWithParam<LateParam> {};

INSTANTIATE_TEST_SUITE_P(Fault, LateCall,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("shm", "tcp"),
                                            ::testing::Values(size_t{16}, size_t{1} << 18),
                                            ::testing::Values(How::kExit, How::kDestroy)),
                         [](const auto& info) {
                           return Name(std::get<0>(info.param), std::get<1>(info.param),
                                       std::get<2>(info.param)) +
                                  (std::get<3>(info.param) == How::kExit ? "_exit" : "_destroy");
                         });

#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, LateCall,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("ucx"),
                                            ::testing::Values(size_t{16}, size_t{1} << 18),
                                            ::testing::Values(How::kExit, How::kDestroy)),
                         [](const auto& info) {
                           return Name(std::get<0>(info.param), std::get<1>(info.param),
                                       std::get<2>(info.param)) +
                                  (std::get<3>(info.param) == How::kExit ? "_exit" : "_destroy");
                         });
#endif

TEST_P(LateCall, NamesWhatTheGoneRankDid) {
  auto [n, transport, count, how] = GetParam();
  PidPipe victim_pid;
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
  const int victim = n - 1;
  // A survivor that fails its call #1 tells every rank; one still in call #0 (making a lazy
  // connection, say) would fail there too. So the survivors start call #1 only once all of them
  // have finished call #0: a counter in memory the forked ranks share.
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
    if (braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm) !=
        braidSuccess) {
      std::fprintf(stderr, "[rank %d] call #0: %s\n", rank, braidGetLastError(comm));
      return 7;
    }
    // Bit-exact: the last call every rank made together is whole.
    for (float v : buf)
      if (v != static_cast<float>(nranks)) return 10;
    if (rank == victim) {
      if (how == How::kExit) std::exit(0);
      if (braidCommDestroy(comm) != braidSuccess) return 9;
      _exit(0);  // gone too: only its goodbye can say it destroyed the communicator
    }
    finished->fetch_add(1);
    while (finished->load() < nranks - 1) sched_yield();  // (the harness's guard bounds it)
    if (!AwaitExit(vpid, 60)) return 11;
    return ExpectNamed(comm, rank, victim, vpid, how, buf);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
}

// Every rank destroys the communicator at the end, in whatever order the ranks get there (the
// common case): nobody is told anything and every destroy succeeds. A goodbye a rank finds from a
// peer that left first is no call waiting on it: taken for one, it would make the rank announce
// its destroy to ranks still finishing their last call, failing it.
TEST(Leave, EveryRankDestroysQuietly) {
  for (const char* transport : {"shm", "tcp"}) {
    for (int job = 0; job < 5; ++job) {
      JobOptions opt;
      opt.nranks = 8;
      opt.timeout_s = 90;
      opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
      auto out = RunJob(opt, [&](braidComm_t comm, int, int nranks, const braidUniqueId&) {
        for (size_t count : {size_t{16}, size_t{1} << 16}) {
          std::vector<float> buf(count, 1.0f);
          for (int i = 0; i < 3; ++i)
            if (braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm) !=
                braidSuccess)
              return 3;
          const float want = static_cast<float>(nranks) * nranks * nranks;
          for (float v : buf)
            if (v != want) return 4;
        }
        return 0;  // the harness destroys the communicator and checks that it succeeds
      });
      for (int r = 0; r < 8; ++r)
        EXPECT_EQ(out[r].exit_code, 0) << transport << " job " << job << DescribeOutcomes(out);
    }
  }
}

// A rank stopped (SIGSTOP) while the others finish and exit normally, resumed after they have
// gone, makes its next call: it is told that they exited (or destroyed the communicator), not
// that they died (issue 42, item 6). Rank 1 stops itself after call #0; ranks 2 and 3 exit once
// it is stopped; rank 0 resumes it once they are gone and then returns (the harness destroys).
TEST(Leave, ResumedRankHearsThatThePeersExited) {
  for (const char* transport : {"shm", "tcp"}) {
    struct State {
      std::atomic<int> pid[4];
      std::atomic<int> ready;
    };
    Shared<State> sh;
    ASSERT_TRUE(sh.ok());
    JobOptions opt;
    opt.nranks = 4;
    opt.timeout_s = 90;
    opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
    auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
      sh->pid[rank].store(getpid());
      sh->ready.fetch_add(1);
      while (sh->ready.load() < nranks) sched_yield();
      std::vector<float> buf(1 << 10, 1.0f);
      if (braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm) !=
          braidSuccess)
        return 7;
      const pid_t stopped = sh->pid[1].load();
      if (rank == 1) {
        raise(SIGSTOP);
        const auto t0 = Clock::now();
        braidResult_t rc =
            braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm);
        const std::string msg = braidGetLastError(comm);
        if (rc != braidErrRemote || SecondsSince(t0) > 1.0 ||
            msg.find(" died") != std::string::npos ||
            (msg.find("exited without destroying the communicator") == std::string::npos &&
             msg.find("destroyed the communicator") == std::string::npos)) {
          std::fprintf(stderr, "[rank 1] rc=%d: %s\n", rc, msg.c_str());
          return 1;
        }
        return 0;
      }
      // Until rank 1 is stopped: its state in /proc is 'T'.
      for (;;) {
        char path[64], stat[512] = {};
        std::snprintf(path, sizeof(path), "/proc/%d/stat", stopped);
        FILE* f = std::fopen(path, "r");
        if (!f) return 8;
        const size_t k = std::fread(stat, 1, sizeof(stat) - 1, f);
        std::fclose(f);
        const char* close_paren = std::strrchr(stat, ')');
        if (k > 0 && close_paren && close_paren[1] == ' ' && close_paren[2] == 'T') break;
        sched_yield();
      }
      if (rank != 0) std::exit(0);
      if (!AwaitExit(sh->pid[2].load(), 60) || !AwaitExit(sh->pid[3].load(), 60)) return 11;
      kill(stopped, SIGCONT);
      return 0;
    });
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(out[r].exit_code, 0) << transport << DescribeOutcomes(out);
  }
}

}  // namespace
}  // namespace braid_test
