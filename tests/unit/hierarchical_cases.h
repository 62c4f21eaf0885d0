// What the tests of the hierarchical builders share (algorithms_hierarchical_test.cc, the 2-level
// ones, and algorithms_three_level_test.cc): a (builder, collective) case and its test name, chunk
// sizes, HO-Ring-shaped arguments, a schedule source that mutates what a builder made (for the
// verifier's rejections), and the simulator's time for a builder by name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "algorithms/lowering.h"
#include "algorithms/simulator.h"
#include "algorithms/tuner.h"
#include "algorithms/verifier.h"

namespace braid::hierarchical_test {

struct Case {
  const char* algo;
  CollKind kind;
};

inline std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.algo) + "_" + CollKindName(info.param.kind);
}

inline constexpr uint64_t kSmallChunk = 16;  // bytes: a few elements per message, many slices
inline constexpr uint64_t kDefaultChunk = 512 * 1024;

// Two channels (an HO-Ring pair) and 64-byte chunks.
inline CollArgs HoArgs(CollKind kind, const GroupLayout& layout, uint64_t count) {
  CollArgs a;
  a.kind = kind;
  a.count = count;
  a.nranks = static_cast<int>(layout.node_of.size());
  a.nchannels = 2;
  a.chunk_bytes = 64;
  a.layout = &layout;
  return a;
}

// `algo`'s schedules for `args`, each changed by mutate(rank, schedule) before the verifier sees
// it.
inline ScheduleSource Mutated(const Algorithm& algo, const CollArgs& args,
                              std::function<void(int, RankSchedule&)> mutate) {
  return [&algo, args, mutate = std::move(mutate)](int r) -> Result<RankSchedule> {
    auto s = BuildSchedule(algo, args, r);
    if (s.ok() && mutate) mutate(r, *s);
    return s;
  };
}

// The simulator's seconds for the builder named `algo` (a failure fails the test).
inline double Simulate(const char* algo, const CollArgs& a, const LinkModel& m) {
  auto t = SimulateSeconds(*FindAlgorithm(algo), a, m);
  EXPECT_TRUE(t.ok()) << algo << ": " << t.status().message();
  return t.ok() ? *t : -1;
}

}  // namespace braid::hierarchical_test
