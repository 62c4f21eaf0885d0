// overlap_perf: head-of-line blocking between operations in flight on one communicator.
//
//   braidrun -n 2 build/perf/overlap_perf [-b BYTES_OF_THE_ALL_GATHER] [-r REPS]
//
// Each repetition starts a non-blocking all-gather of BYTES (total receive size, default 64 MiB),
// then at once a blocking 8-byte all-reduce (a gradient-norm scalar), then waits for the
// all-gather. Rank 0 prints the median time of each and their ratio. With operations run one at
// a time the small call waits for the whole all-gather (ratio ~1); with the engine's express
// lane it does not (issue 8 asks for < 0.10).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include <chrono>

#include "braid/braid.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Check(braidResult_t rc, braidComm_t comm, const char* what) {
  if (rc == braidSuccess) return 0;
  std::fprintf(stderr, "overlap_perf: %s: %s\n", what, braidGetLastError(comm));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{64} << 20;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-b"))
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "-r"))
      reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: overlap_perf [-b BYTES] [-r REPS]\n");
      return 2;
    }
  }
  braidComm_t comm;
  if (braidInitFromEnv(&comm) != braidSuccess) {
    std::fprintf(stderr, "overlap_perf: init: %s\n", braidGetLastError(nullptr));
    return 1;
  }
  int rank = 0, n = 1;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  const size_t per_rank = bytes / n / sizeof(float);
  std::vector<float> in(per_rank, 1.0f), out(per_rank * n);
  std::vector<double> t_small, t_big;
  for (int r = 0; r < reps + 1; ++r) {
    Check(braidBarrier(comm), comm, "barrier");
    double t0 = Now();
    braidRequest_t req;
    Check(braidIallGather(in.data(), out.data(), per_rank, braidFloat32, comm, &req), comm,
          "all-gather");
    double x = rank, y = 0;
    double t1 = Now();
    Check(braidAllReduce(&x, &y, 1, braidFloat64, braidSum, comm), comm, "all-reduce");
    double t2 = Now();
    Check(braidWait(&req, -1), comm, "wait");
    double t3 = Now();
    if (r == 0) continue;  // warm-up
    t_small.push_back(t2 - t1);
    t_big.push_back(t3 - t0);
  }
  if (rank == 0) {
    double s = Median(t_small), b = Median(t_big);
    std::printf(
        "# overlap_perf: %d ranks, all-gather of %zu bytes in flight, 8-byte all-reduce "
        "issued after it; medians of %d\n",
        n, per_rank * n * sizeof(float), reps);
    std::printf("all-gather %.3f ms   small all-reduce %.3f ms   ratio %.4f\n", b * 1e3, s * 1e3,
                s / b);
  }
  braidCommDestroy(comm);
  return 0;
}
