// The CPU count the small-message board's threshold and waiting strategy use (core/base/cpus.h):
// the union of the ranks' affinity masks as they travel in the init message, and their parsing
// (a mask comes from another rank: anything malformed is refused, never trusted).
#include <gtest/gtest.h>

#include <sched.h>

#include "core/base/cpus.h"

namespace braid {
namespace {

TEST(Cpus, OwnMaskCountsTheCpusThisProcessMayUse) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(CpusInUnion({AffinityMaskHex()}), CPU_COUNT(&set));
}

TEST(Cpus, RanksPinnedToOneCoreEachCountTheirUnion) {
  // Four ranks bound to CPUs 0, 1, 2 and 3 (mpirun --bind-to core): 4 CPUs, not 1.
  EXPECT_EQ(CpusInUnion({"1", "2", "4", "8"}), 4);
  // Digit k holds CPUs 4k..4k+3: CPU 4 and CPU 9.
  EXPECT_EQ(CpusInUnion({"01", "002"}), 2);
  EXPECT_EQ(CpusInUnion({"f", "f", "ff"}), 8);
  // No CPU at all still counts as one (a rank runs somewhere).
  EXPECT_EQ(CpusInUnion({"0"}), 1);
}

TEST(Cpus, MalformedMasksAreRefused) {
  EXPECT_EQ(CpusInUnion({""}), -1);
  EXPECT_EQ(CpusInUnion({"3", "x"}), -1);
  EXPECT_EQ(CpusInUnion({"F"}), -1);  // the format is lowercase
  EXPECT_EQ(CpusInUnion({std::string(CPU_SETSIZE / 4 + 1, '1')}), -1);
  EXPECT_EQ(CpusInUnion({std::string(CPU_SETSIZE / 4, 'f')}), CPU_SETSIZE);
}

}  // namespace
}  // namespace braid
