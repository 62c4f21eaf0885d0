// Hangs localise themselves (spec/reliability.md check 8, issue 7 item 8): while a collective
// waits for a rank that has not called it, braidCommDebugState on the waiting ranks names the
// last issued and completed collective numbers, the operation in flight with its algorithm and
// per-lane progress, and the rank it waits on; BRAID_DUMP_SIGNAL writes the same report to the
// log. The late rank is held back by a pipe, not a sleep: it joins once the others have looked.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

bool Has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

// The communicator's report once it holds both `want` and `also` (polled, read from this thread
// as BRAID_DUMP_SIGNAL's handler thread does), or the last one read after 20 s or when
// braidCommDebugState fails.
std::string ReportOnceItHas(braidComm_t comm, const std::string& want, const std::string& also) {
  std::string report;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    std::vector<char> buf(1 << 16);
    if (braidCommDebugState(comm, buf.data(), buf.size()) != braidSuccess) break;
    report = buf.data();
    if (Has(report, want) && Has(report, also)) break;
    std::this_thread::yield();
  }
  return report;
}

class HangReport : public ::testing::TestWithParam<std::string> {};

TEST_P(HangReport, WaitingRanksNameTheOperationAndTheLateRank) {
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  JobOptions opt;
  opt.nranks = 3;
  opt.timeout_s = 60;
  // The engine's report: every call on the engine (the small-message board has its own line,
  // tested below).
  opt.env = {
      {"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "30"}, {"BRAID_ONESHOT_BYTES", "0"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> a(1000, 1.0f), b(1000);
    // Collective #0 completes everywhere.
    if (braidAllReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm) != braidSuccess)
      return 1;
    const int late = n - 1;
    if (rank == late) {
      char c;
      for (int i = 0; i < n - 1; ++i)  // one byte from each waiting rank
        if (read(gate[0], &c, 1) != 1) return 2;
    } else {
      // Collective #1 waits for the late rank.
      braidRequest_t req;
      if (braidIallReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm, &req) !=
          braidSuccess)
        return 3;
      // The report names the late rank once the operation has reached it: poll the report until
      // it holds every line (the agreement may first wait on a peer that is itself waiting, and
      // "waiting on rank" can show before the agreement's "not yet called by" line), bounded.
      const auto complete = [&](const std::string& r) {
        return Has(r, "last completed #0") && Has(r, "issued 2 (last #1)") &&
               Has(r, "in flight (1)") && Has(r, "allreduce(count=1000") && Has(r, "#1 [") &&
               Has(r, "lane ") && Has(r, "waiting on rank " + std::to_string(late)) &&
               Has(r, "collective #1 not yet called by: rank " + std::to_string(late) + " (");
      };
      std::string report;
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (;;) {
        std::vector<char> buf(1 << 16);
        if (braidCommDebugState(comm, buf.data(), buf.size()) != braidSuccess) break;
        report = buf.data();
        if (complete(report)) break;
        if (std::chrono::steady_clock::now() > until) break;
        std::this_thread::yield();
      }
      // The gate opens on failure too: the late rank must not wait for it until the job's guard,
      // and the report that failed must reach the test's output.
      char c = 1;
      if (write(gate[1], &c, 1) != 1) return 6;
      if (!complete(report)) {
        std::fprintf(stderr, "[rank %d] report:\n%s\n", rank, report.c_str());
        (void)braidWait(&req, -1);
        return 5;
      }
      if (braidWait(&req, -1) != braidSuccess) return 7;
      // Idle again: nothing in flight, both collectives completed.
      std::vector<char> buf(1 << 16);
      if (braidCommDebugState(comm, buf.data(), buf.size()) != braidSuccess) return 8;
      report = buf.data();
      if (!Has(report, "nothing in flight") || !Has(report, "last completed #1")) {
        std::fprintf(stderr, "[rank %d] idle report:\n%s\n", rank, report.c_str());
        return 9;
      }
      return 0;
    }
    return braidAllReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm) ==
                   braidSuccess
               ? 0
               : 10;
  });
  close(gate[0]);
  close(gate[1]);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// BRAID_DUMP_SIGNAL=USR1: the signal writes the report to the log (here: a file per rank).
TEST_P(HangReport, SignalDumpsEveryCommunicatorToTheLog) {
  char dir[] = "/tmp/braid_hang_report.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/log.%r";
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", GetParam()},
             {"BRAID_DUMP_SIGNAL", "USR1"},
             {"BRAID_DEBUG_FILE", log},
             {"BRAID_ONESHOT_BYTES", "0"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int, const braidUniqueId&) {
    float x = 1, y;
    if (braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm) != braidSuccess) return 1;
    if (rank != 0) return 0;
    raise(SIGUSR1);
    const std::string path = std::string(dir) + "/log.0";
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream f(path);
      std::stringstream ss;
      ss << f.rdbuf();
      if (Has(ss.str(), "braid state of rank 0/2") && Has(ss.str(), "last completed #0")) return 0;
      std::this_thread::yield();
    }
    std::fprintf(stderr, "no report in %s\n", path.c_str());
    return 2;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
  std::string rm = std::string("rm -rf '") + dir + "'";
  EXPECT_EQ(std::system(rm.c_str()), 0);
}

// A blocking call on the board waits on the caller's thread (the engine's one-sided mode): the
// report (read from another thread here, as BRAID_DUMP_SIGNAL's handler thread does) names the
// call, its number in the communicator's one numbering, its board step and the rank it waits
// for, and counts it once done.
TEST(HangReportBoard, WaitingBoardCallNamesTheLateRank) {
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  JobOptions opt;
  opt.nranks = 3;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "30"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> a(100, 1.0f), b(100);
    if (braidAllReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm) != braidSuccess)
      return 1;
    const int late = n - 1;
    char c = 1;
    if (rank == late) {
      for (int i = 0; i < n - 1; ++i)
        if (read(gate[0], &c, 1) != 1) return 2;
      return braidAllReduce(a.data(), b.data(), 7, braidFloat32, braidSum, comm) == braidSuccess
                 ? 0
                 : 3;
    }
    int rc = -1;
    std::thread caller(
        [&] { rc = braidAllReduce(a.data(), b.data(), 7, braidFloat32, braidSum, comm); });
    const std::string want = "allreduce(count=7, float, sum) #1 [oneshot] on the board";
    const std::string waiting = "waiting on rank " + std::to_string(late);
    const std::string report = ReportOnceItHas(comm, want, waiting);
    const bool named = Has(report, want) && Has(report, waiting);
    if (write(gate[1], &c, 1) != 1) return 4;
    caller.join();
    if (!named) {
      std::fprintf(stderr, "[rank %d] report:\n%s\n(want: %s)\n", rank, report.c_str(),
                   want.c_str());
      return 5;
    }
    if (rc != braidSuccess) return 6;
    std::vector<char> buf(1 << 16);
    if (braidCommDebugState(comm, buf.data(), buf.size()) != braidSuccess) return 7;
    if (!Has(buf.data(), "last completed #1\n") || !Has(buf.data(), "nothing in flight")) {
      std::fprintf(stderr, "[rank %d] idle report:\n%s\n", rank, buf.data());
      return 8;
    }
    return 0;
  });
  close(gate[0]);
  close(gate[1]);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A small non-blocking call on an idle engine starts on the board on the caller's thread
// (Engine::eagerBoardCall); one whose peer has not posted goes on as an operation in the run it
// started. The report lists it once, as an operation on the board waiting for the late rank,
// and the counters balance once it is done (it was counted as an operation, not as a board
// call too).
TEST(HangReportBoard, WaitingNonBlockingBoardCallIsListedOnce) {
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "30"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> a(7), b(7);
    const auto call = [&](int k, braidRequest_t* req) {
      for (int i = 0; i < 7; ++i) a[i] = static_cast<float>(rank * 100 + k * 10 + i);
      return braidIallReduce(a.data(), b.data(), 7, braidFloat32, braidSum, comm, req);
    };
    const auto exact = [&](int k) {
      for (int i = 0; i < 7; ++i)  // rank 0's and rank 1's inputs
        if (b[i] != static_cast<float>(k * 10 + i + 100 + k * 10 + i)) return false;
      return true;
    };
    // Calls #0-#9 of one shape complete everywhere (the engine keeps a spare for the shape).
    for (int k = 0; k < 10; ++k) {
      braidRequest_t req;
      if (call(k, &req) != braidSuccess || braidWait(&req, -1) != braidSuccess || !exact(k))
        return 1;
    }
    const int late = n - 1;
    char c = 1;
    if (rank == late) {
      if (read(gate[0], &c, 1) != 1) return 2;
      braidRequest_t req;
      return call(10, &req) == braidSuccess && braidWait(&req, -1) == braidSuccess && exact(10) ? 0
                                                                                                : 3;
    }
    braidRequest_t req;
    if (call(10, &req) != braidSuccess) return 4;
    // A thread waits for it (and drives the loop, which answers the report); this one reads the
    // report, as BRAID_DUMP_SIGNAL's handler thread does.
    int rc = -1;
    std::thread waiter([&] { rc = braidWait(&req, -1); });
    const std::string want = "allreduce(count=7, float, sum) #10 [oneshot] on the board";
    const std::string waiting = "waiting for rank " + std::to_string(late) + " to post";
    std::string report = ReportOnceItHas(comm, want, waiting);
    const bool listed = Has(report, want) && Has(report, waiting) && Has(report, "in flight (1)");
    if (write(gate[1], &c, 1) != 1) return 5;
    waiter.join();
    if (!listed) {
      std::fprintf(stderr, "[rank %d] report:\n%s\n(want: %s)\n", rank, report.c_str(),
                   want.c_str());
      return 6;
    }
    if (rc != braidSuccess || !exact(10)) return 7;
    std::vector<char> buf(1 << 16);
    if (braidCommDebugState(comm, buf.data(), buf.size()) != braidSuccess) return 8;
    report = buf.data();
    // "operations: submitted N, completed N, queued 0"
    const size_t at = report.find("operations: submitted ");
    unsigned long submitted = 0, completed = 0;
    if (at == std::string::npos ||
        std::sscanf(report.c_str() + at, "operations: submitted %lu, completed %lu", &submitted,
                    &completed) != 2 ||
        submitted != completed || submitted < 11 || !Has(report, "last completed #10\n") ||
        !Has(report, "nothing in flight")) {
      std::fprintf(stderr, "[rank %d] idle report:\n%s\n", rank, report.c_str());
      return 9;
    }
    return 0;
  });
  close(gate[0]);
  close(gate[1]);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, HangReport, ::testing::Values("shm", "tcp"));
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, HangReport, ::testing::Values("ucx"));
#endif

// A dump signal the application handles itself stays the application's: its handler still runs
// after init, and the log says braid left the signal alone.
int g_app_handler_calls = 0;
void AppHandler(int) {
  ++g_app_handler_calls;
}

TEST(HangReportConfig, ASignalTheApplicationHandlesIsLeftAlone) {
  char dir[] = "/tmp/braid_hang_owned.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  JobOptions opt;
  opt.nranks = 1;
  opt.timeout_s = 30;
  opt.init = false;
  auto out = RunJob(opt, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    struct sigaction sa {};
    sa.sa_handler = AppHandler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, nullptr);
    setenv("BRAID_DUMP_SIGNAL", "USR2", 1);
    setenv("BRAID_DEBUG", "WARN", 1);
    const std::string log = std::string(dir) + "/log";
    setenv("BRAID_DEBUG_FILE", log.c_str(), 1);
    braidComm_t comm = nullptr;
    if (braidCommInitRank(&comm, n, id, rank) != braidSuccess) return 1;
    raise(SIGUSR2);
    raise(SIGUSR2);
    braidCommDestroy(comm);
    if (g_app_handler_calls != 2) {
      std::fprintf(stderr, "the application's handler ran %d times, not 2\n", g_app_handler_calls);
      return 2;
    }
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!Has(ss.str(), "BRAID_DUMP_SIGNAL=USR2: the application already handles")) {
      std::fprintf(stderr, "no warning in the log:\n%s\n", ss.str().c_str());
      return 3;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
  std::string rm = std::string("rm -rf '") + dir + "'";
  EXPECT_EQ(std::system(rm.c_str()), 0);
}

TEST(HangReportConfig, UnknownSignalIsRejectedAtInit) {
  JobOptions opt;
  opt.nranks = 1;
  opt.timeout_s = 30;
  opt.init = false;
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    setenv("BRAID_DUMP_SIGNAL", "KILL", 1);
    braidComm_t comm = nullptr;
    braidResult_t rc = braidCommInitRank(&comm, n, id, rank);
    if (rc != braidErrInvalidArgument || !Has(braidGetLastError(nullptr), "BRAID_DUMP_SIGNAL")) {
      std::fprintf(stderr, "rc=%d: %s\n", rc, braidGetLastError(nullptr));
      return 1;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
