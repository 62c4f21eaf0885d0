// Communicators made and destroyed over and over on UCX (BRAID_TRANSPORTS=ucx) leave nothing
// behind (issue 40): after the first cycles, no descriptor, thread or memory growth. Each cycle
// is a whole communicator's life: rendezvous, UCX context, worker and endpoints, a checked
// all-reduce small enough for eager messages and one large enough for rendezvous, destroy. Two
// ranks; rank 0 makes each cycle's unique id and hands it to rank 1 through a pipe.
// 1000 cycles in the ucx tier (ctest -L ucx), 40 in the default one.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/proc_state.h"
#include "multirank/harness.h"
#include "../common/sanitizers.h"

namespace braid_test {
namespace {

using braid_test_common::CountEntries;
using braid_test_common::RssKiB;

int CheckedAllReduce(braidComm_t comm, int rank, int nranks, size_t count, int cycle) {
  std::vector<int32_t> in(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(rank * 7 + i % 1013 + cycle);
  CHECK_OR_FAIL(
      braidAllReduce(in.data(), out.data(), count, braidInt32, braidSum, comm) == braidSuccess,
      "cycle %d: all-reduce of %zu: %s", cycle, count, braidGetLastError(comm));
  for (size_t i = 0; i < count; ++i) {
    int32_t want = 0;
    for (int r = 0; r < nranks; ++r) want += static_cast<int32_t>(r * 7 + i % 1013 + cycle);
    CHECK_OR_FAIL(out[i] == want, "cycle %d: element %zu is %d, want %d", cycle, i, out[i], want);
  }
  return 0;
}

class UcxCycles : public ::testing::TestWithParam<int> {};

TEST_P(UcxCycles, InitDestroyLeavesNoDescriptorThreadOrMemory) {
  const int cycles = GetParam();
  // Growth measured from this cycle on (the first ones fill caches: UCX's modules, the
  // allocator's arenas).
  const int warm = 8;
  int ids[2];
  ASSERT_EQ(pipe(ids), 0);
  JobOptions opt;
  opt.nranks = 2;
  opt.init = false;
  opt.timeout_s = 60 + cycles / 2;
  opt.env = {{"BRAID_TRANSPORTS", "ucx"}, {"BRAID_TIMEOUT", "30"}, {"BRAID_LINK_CALIBRATION", "0"}};
  auto out = RunJob(opt, [&](braidComm_t, int rank, int n, const braidUniqueId&) {
    int fds = 0, threads = 0;
    long rss = 0;
    for (int cycle = 0; cycle < cycles; ++cycle) {
      if (cycle == warm) {
        fds = CountEntries("/proc/self/fd");
        threads = CountEntries("/proc/self/task");
        rss = RssKiB();
      }
      braidUniqueId id;
      if (rank == 0) {
        CHECK_OR_FAIL(braidGetUniqueId(&id) == braidSuccess, "unique id");
        CHECK_OR_FAIL(write(ids[1], &id, sizeof(id)) == sizeof(id), "pipe write");
      } else {
        CHECK_OR_FAIL(read(ids[0], &id, sizeof(id)) == sizeof(id), "pipe read");
      }
      braidComm_t comm = nullptr;
      CHECK_OR_FAIL(braidCommInitRank(&comm, n, id, rank) == braidSuccess, "cycle %d: init: %s",
                    cycle, braidGetLastError(nullptr));
      if (CheckedAllReduce(comm, rank, n, 1000, cycle) ||
          CheckedAllReduce(comm, rank, n, 300000, cycle))
        return 1;
      CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "cycle %d: destroy", cycle);
    }
    const int fds_after = CountEntries("/proc/self/fd");
    const int threads_after = CountEntries("/proc/self/task");
    const long rss_after = RssKiB();
    std::fprintf(stderr,
                 "[rank %d] cycles %d..%d: descriptors %d -> %d, threads %d -> %d, resident "
                 "%ld -> %ld KiB\n",
                 rank, warm, cycles, fds, fds_after, threads, threads_after, rss, rss_after);
    CHECK_OR_FAIL(fds_after == fds, "descriptors grew by %d", fds_after - fds);
    CHECK_OR_FAIL(threads_after == threads, "threads grew by %d", threads_after - threads);
    // A leak of even 2 KiB per cycle shows after 1000 cycles; the allocator's own slack stays
    // far below. Not under AddressSanitizer: its quarantine keeps freed memory resident (145 MB
    // over 32 cycles), and LeakSanitizer checks for leaks there instead.
#if !BRAID_TEST_UNDER_ASAN
    CHECK_OR_FAIL(rss_after - rss <= 2048, "resident memory grew by %ld KiB", rss_after - rss);
#endif
    return 0;
  });
  close(ids[0]);
  close(ids[1]);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(UcxQuick, UcxCycles, ::testing::Values(40));
INSTANTIATE_TEST_SUITE_P(Ucx, UcxCycles, ::testing::Values(1000));
#endif

}  // namespace
}  // namespace braid_test
