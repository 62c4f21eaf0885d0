// 2D-torus all-reduce (Mikami et al.; spec/algorithms.md section 2): an intra-group
// reduce-scatter of M columns (M-1 steps of S/M), an inter-group all-reduce of each column among
// the ranks of equal local rank (all M of them at once: 2(g-1) steps of S/(gM)), and an
// intra-group all-gather of the columns. 2(M-1) + 2(g-1) steps instead of a flat ring's 2(gM-1),
// over all M NICs of a node rather than one leader's (hier_leader.cc).
//
// The schedule is H-Ring's all-reduce (hier_ring.cc) with the buffer cut by columns: column j is
// the j-th of M even parts of a channel's range and rank (i, j)'s block the i-th of g parts of it,
// so an intra step moves one contiguous column (one message train) where H-Ring's moves g blocks
// spread over the buffer.
#include "algorithms/builtin_algorithms.h"
#include "algorithms/hierarchical.h"

namespace braid {
namespace {

// With `three_level` "torus2d3": the intra reduce-scatter and all-gather of the columns run per
// level of a layout with device groups (GroupAllGatherSteps), as hring3's do.
class Torus2d final : public Algorithm {
 public:
  explicit Torus2d(bool three_level) : three_level_(three_level) {}
  const char* name() const override { return three_level_ ? "torus2d3" : "torus2d"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllReduce && GroupGridFor(a, three_level_).has_value();
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return BuildHierAllReduce(a, *GroupGridFor(a, three_level_), rank, BlockLayout::kColumns);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    auto grid = GroupGridFor(a, three_level_);
    if (!grid || a.nranks <= 1) return 0;
    return HierRingSeconds(a, *grid, m, /*columns=*/true);
  }

 private:
  bool three_level_;
};

}  // namespace

const Algorithm& Torus2dAlgorithm() {
  static const Torus2d algo(false);
  return algo;
}

const Algorithm& Torus2d3Algorithm() {
  static const Torus2d algo(true);
  return algo;
}

}  // namespace braid
