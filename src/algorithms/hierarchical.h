// Building blocks of the hierarchical algorithms (spec/algorithms.md section 2): the group grid
// a layout defines, where each rank's block of a collective lives, a channel writer that keeps
// dependency edges valid when empty steps are dropped, and ring phases (all-gather and
// reduce-scatter over any list of members) that the builders compose.
//
// Groups come from CollArgs::layout: node = group i, local_rank = position j, so rank (i, j) is
// the rank with node_of = i and local_rank = j. g groups of M ranks each; the builders index
// ranks through the grid, so a layout whose nodes interleave (node_of = 0, 1, 0, 1) is served as
// well as a contiguous one. Groups of different sizes are not a grid: supports() is false and the
// tuner falls back to a flat algorithm.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/schedule_builder.h"
#include "algorithms/tuner.h"

namespace braid {

struct GroupGrid {
  int g = 1;                  // groups (nodes)
  int m = 1;                  // ranks per group
  std::vector<int> rank_of;   // [i * m + j] -> rank
  std::vector<int> group_of;  // per rank: i
  std::vector<int> pos_of;    // per rank: j
  // A third level (GroupGridFor with device_groups): the m ranks of every group as p device
  // groups of d ranks each, local rank j at (pp_of[j], dd_of[j]) and local_at[pp * d + dd] = j,
  // the same in every group. Without it p = 1 and the tables are empty.
  int p = 1, d = 1;
  std::vector<int> local_at, pp_of, dd_of;
  int at(int64_t i, int64_t j) const { return rank_of[Mod(i, g) * m + Mod(j, m)]; }
  bool three_level() const { return p > 1 && d > 1; }
  // The local rank at (pp, dd) of a group (mod p and d).
  int local(int64_t pp, int64_t dd) const { return local_at[Mod(pp, p) * d + Mod(dd, d)]; }
};

// The grid of args.layout, or nullopt when the layout does not describe nranks ranks in groups
// of equal size (uneven groups, a malformed or partial layout). No layout: one group. With
// `device_groups`, also the third level from layout->dgroup_of: nullopt unless every group holds
// p > 1 device groups of d > 1 ranks each, local ranks placed alike in every group (the 3-level
// algorithms serve exactly those; everything else takes a 2-level one).
std::optional<GroupGrid> GroupGridFor(const CollArgs& args, bool device_groups = false);

// A run of elements of one buffer.
struct Piece {
  uint16_t buf = kRecvBuf;
  uint64_t off = 0;
  uint64_t len = 0;
};
// What one ring step moves for one item: a list of pieces, sent and received piece by piece.
// The sender's and the receiver's units of an item have the same piece lengths in the same order,
// and each piece is cut into messages by (len, chunk) alone, so the k-th send meets the k-th
// receive with an equal count (schedule_builder.h's matching rule).
//
// Builders make millions of these at 1024 ranks (perf/sim_at_scale), nearly all of one or two
// pieces (HO-Ring's chunks, a 3-level item): those live inline, with no allocation; longer ones
// (H-Ring's super-blocks of g pieces) spill to the heap.
class Unit {
 public:
  Unit() = default;
  Unit(std::initializer_list<Piece> pieces) {
    for (const Piece& p : pieces) push_back(p);
  }
  void push_back(const Piece& p) {
    if (n_ < kInline) {
      inline_[n_] = p;
    } else {
      if (n_ == kInline) spill_.assign(inline_, inline_ + kInline);
      spill_.push_back(p);
    }
    ++n_;
  }
  void append(const Unit& other) {
    for (const Piece& p : other) push_back(p);
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const Piece* begin() const { return n_ <= kInline ? inline_ : spill_.data(); }
  const Piece* end() const { return begin() + n_; }
  const Piece& operator[](size_t i) const { return begin()[i]; }

 private:
  static constexpr size_t kInline = 2;
  size_t n_ = 0;
  Piece inline_[kInline];
  std::vector<Piece> spill_;  // every piece, once there are more than kInline
};

// Appends steps to one channel of a schedule. Empty steps are dropped (AddStep), and a dropped
// step's edges move to the next step added, so an edge never names a step that does not exist
// and nothing that a dropped step would have ordered is left unordered.
class LaneWriter {
 public:
  LaneWriter(RankSchedule& s, uint16_t channel) : s_(&s), ch_(channel) {}
  // The next step added waits for `r` (nothing when r is empty).
  void Wait(const std::optional<StepRef>& r) {
    if (r) pending_.push_back(*r);
  }
  void Add(Step&& step);
  // An edge that is satisfied once every step added so far has completed (empty: none added).
  std::optional<StepRef> Mark() const;

 private:
  RankSchedule* s_;
  uint16_t ch_;
  std::vector<StepRef> pending_;
};

void SendUnit(Step& st, int peer, const Unit& u, uint64_t chunk);
void RecvUnit(Step& st, int peer, const Unit& u, uint64_t chunk);
// dst = local + incoming, piece by piece (`local` and `dst` have equal piece lengths).
void RecvReduceUnit(Step& st, int peer, const Unit& local, const Unit& dst, uint64_t chunk);
void CopyUnit(Step& st, const Unit& src, const Unit& dst);

// A ring all-gather over K members, this rank at position p: step u (0..K-2) sends item p-u to
// `next` and receives item p-u-1 from `prev`. where(x, sending) is the unit of item x (sending:
// the source of a send, which may differ for this rank's own item, e.g. the send buffer).
// `first_ops` join the first step (the own block's copy overlaps the first transfer).
void RingAllGatherSteps(LaneWriter& w, int K, int p, int next, int prev,
                        const std::function<Unit(int x, bool sending)>& where, uint64_t chunk,
                        std::vector<StepOp> first_ops = {});

// A ring reduce-scatter over K members, this rank at position p (ring.cc's order): step u
// (0..K-2) sends the partial sum of item p-u-1 (at u = 0 its own input) and folds item p-u-2
// with its own input, into partial(u, item); the last step (u = K-2) completes item p.
void RingReduceScatterSteps(LaneWriter& w, int K, int p, int next, int prev,
                            const std::function<Unit(int x)>& input,
                            const std::function<Unit(int u, int x)>& partial, uint64_t chunk);

// The collective inside group i among its m ranks, this rank at local rank j, over m items (item
// x belongs to local rank x). Without a third level it is one ring over the group (m-1 steps of
// one item). With one, the ring runs per level, the slow node level on few items and the fast
// device-group level on many: all-gather is a ring over the p device groups among the ranks of
// this rank's position (p-1 steps of one item) and then a ring inside its device group (d-1
// steps of p items); reduce-scatter is the mirror (device group first). Both levels move every
// byte once, as the one ring does, but the node link carries (p-1)/(m-1) of the steps.
//
// All-gather: where(x, sending) as RingAllGatherSteps'; `first_ops` join the first step.
void GroupAllGatherSteps(LaneWriter& w, const GroupGrid& grid, int i, int j,
                         const std::function<Unit(int x, bool sending)>& where, uint64_t chunk,
                         std::vector<StepOp> first_ops = {});
// Reduce-scatter: input(x) this rank's contribution to item x, `out` where item j's sum goes,
// slot(k, x) item x's place in scratch slot k (k < GroupReduceScatterSlots(grid); a slot holds
// one item at a time, units with input(x)'s piece lengths).
int GroupReduceScatterSlots(const GroupGrid& grid);
void GroupReduceScatterSteps(LaneWriter& w, const GroupGrid& grid, int i, int j,
                             const std::function<Unit(int x)>& input,
                             const std::function<Unit(int k, int x)>& slot, const Unit& out,
                             uint64_t chunk);

// Where every rank's block lives in one channel's element range `rc`, for the block layouts of
// the builders: per-rank blocks (all-gather, reduce-scatter: rank b's block is [b*count + rc.off,
// + rc.len)), the channel's range cut evenly by rank (all-reduce), or by columns (the 2D torus:
// column j is the j-th of M even parts of the range, rank (i, j)'s block the i-th of g parts of
// column j, so a column is contiguous).
enum class BlockLayout { kPerRank, kEvenByRank, kColumns };
std::vector<ElemRange> BlockTable(BlockLayout layout, const GroupGrid& grid, uint64_t count,
                                  const ElemRange& rc);
uint64_t MaxLen(const std::vector<ElemRange>& blocks);

// Chunk `ch` of `c` of a block.
inline ElemRange ChunkOf(const ElemRange& b, uint64_t c, uint64_t ch) {
  ElemRange x = EvenPart(b.len, c, ch);
  x.off += b.off;
  return x;
}

// Closed-form pieces for the estimates: a ring phase of `steps` steps, each moving `pieces`
// messages-worth transfers of `bytes` each on `link` (TransferSeconds per piece).
double RingPhaseSeconds(int steps, int pieces, uint64_t bytes, int nch, uint64_t chunk_bytes,
                        const LinkParams& link);

// H-Ring all-reduce (reduce-scatter then all-gather) over the blocks of `layout`: kEvenByRank is
// hring's, kColumns the 2D torus's (hier_ring.cc).
RankSchedule BuildHierAllReduce(const CollArgs& args, const GroupGrid& grid, int rank,
                                BlockLayout layout);
// Its closed form, and H-Ring's all-gather and reduce-scatter: (g-1) inter steps of one block and
// (M-1) intra steps of g blocks (one contiguous column when `columns`), twice for all-reduce.
double HierRingSeconds(const CollArgs& args, const GroupGrid& grid, const LinkModel& model,
                       bool columns);
// The closed form of GroupAllGatherSteps (and of the reduce-scatter, the same transfers) when
// each item is `pieces` messages-worth transfers of `bytes` each.
double GroupPhaseSeconds(const GroupGrid& grid, int pieces, uint64_t bytes, int nch,
                         uint64_t chunk_bytes, const LinkModel& model);

}  // namespace braid
