// H-Ring, the hierarchical ring (spec/algorithms.md section 2): all-gather is an inter-group
// ring among the ranks of equal local rank (M rings of g ranks side by side) and then an
// intra-group ring that moves, per step, the g blocks of one local rank; reduce-scatter is the
// mirror (intra ring over "super-blocks" of g blocks first, then the inter ring); all-reduce is
// the two back to back. Each rank sends (g-1) blocks across groups, the minimum; the intra links
// idle during the inter phase and vice versa (HO-Ring, ho_ring.cc, overlaps them).
//
// With device groups (hring3: the two GCDs of an MI250X inside a Frontier node) the intra phase
// runs per level (GroupAllGatherSteps): the node's slower links carry fewer steps.
//
// Channels take disjoint element ranges of every block, as in ring.cc, and run the two phases one
// after the other each. The 2D-torus all-reduce (torus2d.cc) is the same schedule with the
// blocks laid out by column, so that a super-block is one contiguous message.
#include <algorithm>
#include <string>
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"

namespace braid {
namespace {

// One channel of one rank: the grid, this rank's place in it and where the blocks live.
struct Plan {
  const GroupGrid* grid;
  int r, i, j;
  std::vector<ElemRange> blocks;  // by rank
  bool columns;                   // super-blocks are contiguous columns (torus2d)
  uint64_t chunk;
  uint64_t max_len = 0;  // MaxLen(blocks), computed once: every piece's offset needs it, and
                         // recomputing it per piece made a 1024-rank build quadratic

  int at(int64_t gi, int64_t pj) const { return grid->at(gi, pj); }
  int g() const { return grid->g; }
  int m() const { return grid->m; }
  // Column x: the blocks of local rank x of every group, contiguous when `columns`.
  ElemRange Column(int x) const {
    const ElemRange& first = blocks[at(0, x)];
    const ElemRange& last = blocks[at(g() - 1, x)];
    return {first.off, last.off + last.len - first.off};
  }
  uint64_t L() const { return max_len; }
  // Elements one super-block slot of scratch takes.
  uint64_t SuperSlot() const {
    if (!columns) return static_cast<uint64_t>(g()) * L();
    uint64_t s = 0;
    for (int x = 0; x < m(); ++x) s = std::max(s, Column(x).len);
    return s;
  }
  // Where group gi's component of super-block x sits inside a super-block slot at `base`.
  uint64_t ComponentOffset(uint64_t base, int gi, int x) const {
    if (columns) return base + blocks[at(gi, x)].off - Column(x).off;
    return base + static_cast<uint64_t>(gi) * L();
  }
  // Super-block x (the blocks of local rank x of every group), in user memory: piece(rank) gives
  // each block's location.
  Unit SuperInUser(int x, const std::function<Piece(int rank)>& piece) const {
    if (columns) {
      const Piece first = piece(at(0, x));
      return {Piece{first.buf, first.off, Column(x).len}};
    }
    Unit u;
    for (int gi = 0; gi < g(); ++gi) u.push_back(piece(at(gi, x)));
    return u;
  }
  // Super-block x in a scratch slot at `base`.
  Unit SuperInScratch(uint64_t base, int x) const {
    if (columns) return {Piece{kScratchBuf, base, Column(x).len}};
    Unit u;
    for (int gi = 0; gi < g(); ++gi)
      u.push_back(Piece{kScratchBuf, ComponentOffset(base, gi, x), blocks[at(gi, x)].len});
    return u;
  }
};

Plan MakePlan(const GroupGrid& grid, int r, BlockLayout layout, uint64_t count, const ElemRange& rc,
              uint64_t chunk) {
  Plan p{&grid,
         r,
         grid.group_of[r],
         grid.pos_of[r],
         BlockTable(layout, grid, count, rc),
         layout == BlockLayout::kColumns,
         chunk};
  p.max_len = MaxLen(p.blocks);
  return p;
}

// All-gather into recvbuf (blocks at p.blocks). `own` is where this rank's block is read from
// when sent (the send buffer out of place); `first_ops` (its copy into recvbuf) join the first
// step.
void HierAllGather(LaneWriter& w, const Plan& p, const Piece& own, std::vector<StepOp> first_ops) {
  auto block = [&](int rank, bool sending) {
    if (sending && rank == p.r) return own;
    return Piece{kRecvBuf, p.blocks[rank].off, p.blocks[rank].len};
  };
  if (p.g() > 1) {
    // Ring j over the groups: after step t this rank holds the block of (i - t - 1, j).
    RingAllGatherSteps(
        w, p.g(), p.i, p.at(p.i + 1, p.j), p.at(p.i - 1, p.j),
        [&](int x, bool sending) { return Unit{block(p.at(x, p.j), sending)}; }, p.chunk,
        std::move(first_ops));
    first_ops.clear();
  }
  if (p.m() > 1) {
    // Ring over the group (per level with device groups), one super-block (local rank x of
    // every group) per item.
    GroupAllGatherSteps(
        w, *p.grid, p.i, p.j,
        [&](int x, bool sending) {
          return p.SuperInUser(x, [&](int rank) { return block(rank, sending); });
        },
        p.chunk, std::move(first_ops));
  }
}

// Reduce-scatter: input(rank) is this rank's contribution to rank's block, `final` where this
// rank's own result goes. Scratch from `base`; returns the elements used.
uint64_t HierReduceScatter(LaneWriter& w, const Plan& p, const std::function<Piece(int)>& input,
                           const Piece& final, uint64_t base) {
  const int g = p.g(), m = p.m();
  const uint64_t sslot = p.SuperSlot(), L = p.L();
  // Scratch: super-block slots for the intra phase's partial sums (GroupReduceScatterSlots:
  // two alternating ones for a ring of M > 2), the intra result P (a super-block, when the inter
  // ring follows), two alternating block slots for the inter ring's partial sums (g > 2).
  uint64_t used = 0;
  const uint64_t s1 = base + used;
  if (m > 1) used += static_cast<uint64_t>(GroupReduceScatterSlots(*p.grid)) * sslot;
  const uint64_t pslot = base + used;
  if (m > 1 && g > 1) used += sslot;
  const uint64_t s2 = base + used;
  if (g > 2) used += 2 * L;

  if (m > 1) {
    GroupReduceScatterSteps(
        w, *p.grid, p.i, p.j, [&](int x) { return p.SuperInUser(x, input); },
        [&](int k, int x) { return p.SuperInScratch(s1 + static_cast<uint64_t>(k) * sslot, x); },
        g == 1 ? Unit{final} : p.SuperInScratch(pslot, p.j), p.chunk);
  }
  if (g > 1) {
    // This rank's contribution to block (x, j): the intra-group sum, or its own input for M = 1.
    auto local = [&](int x) -> Unit {
      const int rank = p.at(x, p.j);
      if (m == 1) return {input(rank)};
      return {Piece{kScratchBuf, p.ComponentOffset(pslot, x, p.j), p.blocks[rank].len}};
    };
    RingReduceScatterSteps(
        w, g, p.i, p.at(p.i + 1, p.j), p.at(p.i - 1, p.j), local,
        [&](int u, int x) -> Unit {
          if (u == g - 2) return {final};
          return {Piece{kScratchBuf, s2 + static_cast<uint64_t>(u % 2) * L,
                        p.blocks[p.at(x, p.j)].len}};
        },
        p.chunk);
  }
  return used;
}

RankSchedule AllGather(const CollArgs& a, const GroupGrid& grid, int r) {
  const int n = a.nranks;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  const int nch = ChannelsFor(a, a.count, a.count * n * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const Plan p = MakePlan(grid, r, BlockLayout::kPerRank, a.count, rc, ChunkElems(a));
    LaneWriter w(s, static_cast<uint16_t>(c));
    // Out of place the own block is sent straight from the send buffer (never written, so any
    // step may read it) and copied into recvbuf beside the first transfer.
    Piece own{kRecvBuf, p.blocks[r].off, rc.len};
    std::vector<StepOp> first;
    if (!a.in_place) {
      own = {kSendBuf, rc.off, rc.len};
      Step tmp;
      AppendCopy(tmp, kSendBuf, rc.off, kRecvBuf, p.blocks[r].off, rc.len);
      first = tmp.ops;
    }
    HierAllGather(w, p, own, std::move(first));
  }
  return s;
}

RankSchedule ReduceScatter(const CollArgs& a, const GroupGrid& grid, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const int nch = ChannelsFor(a, a.count, a.count * n * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);
  uint64_t base = 0;
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const Plan p = MakePlan(grid, r, BlockLayout::kPerRank, a.count, rc, ChunkElems(a));
    LaneWriter w(s, static_cast<uint16_t>(c));
    // In place, this rank's own block of the input is recvbuf (the C API's aliasing).
    auto input = [&](int rank) -> Piece {
      if (a.in_place && rank == r) return {kRecvBuf, rc.off, rc.len};
      return {kSendBuf, p.blocks[rank].off, rc.len};
    };
    base += HierReduceScatter(w, p, input, Piece{kRecvBuf, rc.off, rc.len}, base);
  }
  s.scratch_count = base;
  return s;
}

}  // namespace

// All-reduce = reduce-scatter then all-gather over the blocks of `layout` (kEvenByRank: H-Ring,
// kColumns: the 2D torus), on every channel's range; the own block stays in recvbuf between the
// two.
RankSchedule BuildHierAllReduce(const CollArgs& a, const GroupGrid& grid, int r,
                                BlockLayout layout) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);
  uint64_t base = 0;
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const Plan p = MakePlan(grid, r, layout, a.count, rc, ChunkElems(a));
    LaneWriter w(s, static_cast<uint16_t>(c));
    const Piece mine{kRecvBuf, p.blocks[r].off, p.blocks[r].len};
    base += HierReduceScatter(
        w, p,
        [&](int rank) {
          return Piece{in, p.blocks[rank].off, p.blocks[rank].len};
        },
        mine, base);
    HierAllGather(w, p, mine, {});
  }
  s.scratch_count = base;
  return s;
}

namespace {

// H-Ring, and with `three_level` its 3-level variant "hring3" (the intra phase per level of a
// layout with device groups; GroupAllGatherSteps), which serves only such layouts.
class HRing final : public Algorithm {
 public:
  explicit HRing(bool three_level) : three_level_(three_level) {}
  const char* name() const override { return three_level_ ? "hring3" : "hring"; }

  bool supports(const CollArgs& a) const override {
    switch (a.kind) {
      case CollKind::kAllReduce:
      case CollKind::kReduceScatter:
      case CollKind::kAllGather:
        return GroupGridFor(a, three_level_).has_value();
      default:
        return false;
    }
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const GroupGrid grid = *GroupGridFor(a, three_level_);
    switch (a.kind) {
      case CollKind::kAllReduce:
        return BuildHierAllReduce(a, grid, rank, BlockLayout::kEvenByRank);
      case CollKind::kReduceScatter:
        return ReduceScatter(a, grid, rank);
      case CollKind::kAllGather:
        return AllGather(a, grid, rank);
      default:
        return InvalidArgument(std::string(name()) + ": unsupported collective");
    }
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    auto grid = GroupGridFor(a, three_level_);
    if (!grid || a.nranks <= 1) return 0;
    return HierRingSeconds(a, *grid, m, /*columns=*/false);
  }

 private:
  bool three_level_;
};

}  // namespace

double HierRingSeconds(const CollArgs& a, const GroupGrid& grid, const LinkModel& model,
                       bool columns) {
  const int g = grid.g, M = grid.m, n = a.nranks;
  const uint64_t esize = DataTypeSize(a.dtype);
  // s: one rank's block. Intra steps move g blocks (one message train per block, or one
  // contiguous column), inter steps one block.
  const uint64_t s =
      a.kind == CollKind::kAllReduce ? (a.count + n - 1) / n * esize : a.count * esize;
  // Channels as the builders take them; every transfer is split over them.
  const int nch = a.kind == CollKind::kAllReduce
                      ? ChannelsFor(a, a.count, a.count * esize)
                      : ChannelsFor(a, a.count, a.count * static_cast<uint64_t>(n) * esize);
  const double intra = columns ? GroupPhaseSeconds(grid, 1, s * g, nch, a.chunk_bytes, model)
                               : GroupPhaseSeconds(grid, g, s, nch, a.chunk_bytes, model);
  // The M inter rings run at once through each node's one NIC (simulator.h): M transfers share
  // it in every inter step.
  const double inter = RingPhaseSeconds(g - 1, 1, s, nch, a.chunk_bytes, NodeLink(model, M));
  const double one = intra + inter;
  return a.kind == CollKind::kAllReduce ? 2 * one : one;
}

const Algorithm& HierRingAlgorithm() {
  static const HRing algo(false);
  return algo;
}

const Algorithm& HierRing3Algorithm() {
  static const HRing algo(true);
  return algo;
}

}  // namespace braid
