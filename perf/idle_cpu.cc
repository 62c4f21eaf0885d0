// idle_cpu_perf: what an idle communicator costs in CPU (issue 11 asks for < 1% of a core).
//
//   braidrun -n N build/perf/idle_cpu_perf [-s SECONDS] [-l PERCENT]
//
// Each rank initialises, runs an all-reduce and a barrier (every connection, thread and board is
// up and has been used), then holds the communicator for SECONDS (default 2) without calling it,
// and measures its process's CPU time over that span with getrusage (every thread: the progress
// thread, the transports' helpers). Rank 0 prints each rank's share of one core. The exit code is
// 1 when a rank used more than PERCENT (default 1) of a core: an idle communicator must sleep,
// not poll.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "braid/braid.h"

namespace {

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Check(braidResult_t rc, braidComm_t comm, const char* what) {
  if (rc == braidSuccess) return 0;
  std::fprintf(stderr, "idle_cpu_perf: %s: %s\n", what, braidGetLastError(comm));
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0, limit_percent = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-s")) {
      seconds = std::atof(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "-l")) {
      limit_percent = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: idle_cpu_perf [-s SECONDS] [-l PERCENT]\n");
      return 2;
    }
  }
  if (!(seconds > 0) || !(limit_percent > 0) || (argc % 2) == 0) {
    std::fprintf(stderr, "usage: idle_cpu_perf [-s SECONDS > 0] [-l PERCENT > 0]\n");
    return 2;
  }
  braidComm_t comm;
  if (braidInitFromEnv(&comm) != braidSuccess) {
    std::fprintf(stderr, "idle_cpu_perf: init: %s\n", braidGetLastError(nullptr));
    return 2;
  }
  int rank = 0, n = 1;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  // Use it once, small and large, so that nothing is still being set up lazily.
  std::vector<float> buf(1 << 18, 1.0f);
  Check(braidAllReduce(buf.data(), buf.data(), 1, braidFloat32, braidSum, comm), comm,
        "all-reduce");
  Check(braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm), comm,
        "all-reduce");
  Check(braidBarrier(comm), comm, "barrier");

  const double cpu0 = CpuSeconds(), wall0 = WallSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double cpu = CpuSeconds() - cpu0, wall = WallSeconds() - wall0;
  double share = 100.0 * cpu / wall;

  std::vector<double> shares(n);
  Check(braidAllGather(&share, shares.data(), 1, braidFloat64, comm), comm, "all-gather");
  const double worst = *std::max_element(shares.begin(), shares.end());
  if (rank == 0) {
    std::printf(
        "# idle_cpu_perf: %d ranks, communicator idle for %.1f s; CPU of each process "
        "(all threads) as %% of one core\n",
        n, seconds);
    for (int r = 0; r < n; ++r) std::printf("rank %d  %.3f%%\n", r, shares[r]);
    std::printf("max %.3f%% (limit %.3g%%): %s\n", worst, limit_percent,
                worst <= limit_percent ? "ok" : "OVER");
  }
  braidCommDestroy(comm);
  return worst <= limit_percent ? 0 : 1;
}
