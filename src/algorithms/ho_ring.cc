// HO-Ring, the hierarchical overlapping ring (PaRO; spec/algorithms.md section 2): the intra-group
// ring and the inter-group ring run at the same time on two channels, ordered only by dependency
// edges, so each rank sends through both links at once.
//
// All-gather, rank (i, j), channel I (inter) and channel X (intra) of a pair:
//   I: g-1 steps; step t sends the block it received at step t-1 (its own at t = 1) to (i+1, j)
//      and receives block (i-t, j) from (i-1, j).
//   X: g rounds; round k is an (M-1)-step ring all-gather inside group i of the blocks of group
//      q = i-k. Round 0 (the own group) starts at once; round k waits for inter step k.
// Reduce-scatter is the mirror:
//   X: g rounds of (M-1)-step ring reduce-scatters, round k over the blocks of destination group
//      q = i-1-k (own group last), leaving the group's sum of block (q, j) in scratch.
//   I: step t sends the partial sum of block (i-t, j) (at t = 1 the group's sum of it) and
//      receives the partial of block (i-t-1, j); a local step then adds the group's sum of that
//      block (waiting for round t) before step t+1 forwards it. The last one completes (i, j).
//      So inter step t waits for round t-1 only and the first round is the one not overlapped.
// All-reduce: reduce-scatter then all-gather over the even blocks of the buffer; all-gather's
// first intra round waits for the reduce-scatter's last inter step.
//
// Rounds and inter steps are cut into c chunks (up to kMaxRoundChunks, none smaller than a
// chunk_bytes message): round k's chunk h waits only for inter step k's chunk h, so the round
// that cannot be hidden (the last all-gather round, the first reduce-scatter round) costs 1/c of
// a round. A pair of channels serves one element range; with 2P channels P pairs split the buffer.
// g = 1 or M = 1 leave one ring: the schedule is H-Ring's (hier_ring.cc).
#include <algorithm>
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"

namespace braid {
namespace {

constexpr uint64_t kMaxRoundChunks = 8;

// One pair of channels of one rank.
struct Pair {
  const GroupGrid* grid;
  int r, i, j;
  std::vector<ElemRange> blocks;  // by rank
  uint64_t c;                     // chunks per block
  uint64_t chunk;                 // elements per message
  int at(int64_t gi, int64_t pj) const { return grid->at(gi, pj); }
  // Chunk h of a whole-block piece.
  Piece Chunk(const Piece& whole, uint64_t h) const {
    const ElemRange x = EvenPart(whole.len, c, h);
    return {whole.buf, whole.off + x.off, x.len};
  }
};

uint64_t RoundChunks(uint64_t max_block, uint64_t chunk_elems) {
  return std::clamp<uint64_t>(SliceCount(max_block, chunk_elems), 1, kMaxRoundChunks);
}

Pair MakePair(const GroupGrid& grid, int r, BlockLayout layout, uint64_t count, const ElemRange& rc,
              uint64_t chunk) {
  Pair p{&grid, r, grid.group_of[r], grid.pos_of[r], BlockTable(layout, grid, count, rc), 1, chunk};
  p.c = RoundChunks(MaxLen(p.blocks), chunk);
  return p;
}

using Marks = std::vector<std::optional<StepRef>>;  // per chunk

// `own` is the whole own block as sent (the send buffer out of place); `first_ops` join the first
// intra step; `after` (per chunk) gates the first round (all-reduce: the reduce-scatter's end).
void HoAllGather(LaneWriter& wi, LaneWriter& wx, const Pair& p, const Piece& own,
                 std::vector<StepOp> first_ops, const Marks* after) {
  const int g = p.grid->g;
  auto piece = [&](int rank, uint64_t h, bool sending) {
    if (sending && rank == p.r) return p.Chunk(own, h);
    return p.Chunk(Piece{kRecvBuf, p.blocks[rank].off, p.blocks[rank].len}, h);
  };
  // arrived[t][h]: inter step t has delivered chunk h of block (i-t, j).
  std::vector<Marks> arrived(static_cast<size_t>(g), Marks(p.c));
  for (int t = 1; t < g; ++t)
    for (uint64_t h = 0; h < p.c; ++h) {
      Step st;
      SendUnit(st, p.at(p.i + 1, p.j), {piece(p.at(p.i - t + 1, p.j), h, true)}, p.chunk);
      RecvUnit(st, p.at(p.i - 1, p.j), {piece(p.at(p.i - t, p.j), h, false)}, p.chunk);
      wi.Add(std::move(st));
      arrived[t][h] = wi.Mark();
    }
  for (int k = 0; k < g; ++k) {
    const int q = Mod(p.i - k, g);
    for (uint64_t h = 0; h < p.c; ++h) {
      // The only block of the round that the inter ring wrote is (q, j), read by the round's
      // first step; the round writes blocks (q, x != j), which the inter ring never touches.
      if (k == 0 && after) wx.Wait((*after)[h]);
      if (k > 0) wx.Wait(arrived[k][h]);
      GroupAllGatherSteps(
          wx, *p.grid, p.i, p.j,
          [&](int x, bool sending) { return Unit{piece(p.at(q, x), h, sending)}; }, p.chunk,
          k == 0 && h == 0 ? std::move(first_ops) : std::vector<StepOp>{});
    }
  }
}

// input(rank): this rank's whole contribution to rank's block; `final` its own result. Scratch
// from `base`; returns the elements used and sets `done` (per chunk: the last inter step).
uint64_t HoReduceScatter(LaneWriter& wi, LaneWriter& wx, const Pair& p,
                         const std::function<Piece(int)>& input, const Piece& final, uint64_t base,
                         Marks* done) {
  const int g = p.grid->g;
  const uint64_t L = MaxLen(p.blocks);
  // Scratch: the group sums of blocks (q, j) for the g-1 other groups (the intra channel may run
  // rounds ahead of the inter channel, so each keeps its own slot; the own group's sum goes
  // straight to `final`), the intra rounds' partial sums (GroupReduceScatterSlots: two
  // alternating slots for one ring of M > 2) and two alternating slots for the inter ring's.
  uint64_t used = 0;
  const uint64_t sums = base;
  used += static_cast<uint64_t>(g - 1) * L;
  const uint64_t xalt = base + used;
  used += static_cast<uint64_t>(GroupReduceScatterSlots(*p.grid)) * L;
  const uint64_t ialt = base + used;
  used += 2 * L;

  auto block_chunk = [&](uint64_t slot, int rank, uint64_t h) {
    return p.Chunk(Piece{kScratchBuf, slot, p.blocks[rank].len}, h);
  };
  // The group's sum of block (q, j), chunk h.
  auto sum = [&](int q, uint64_t h) -> Piece {
    if (q == p.i) return p.Chunk(final, h);
    const uint64_t slot = static_cast<uint64_t>(Mod(q - p.i, g) - 1);
    return block_chunk(sums + slot * L, p.at(q, p.j), h);
  };
  // reduced[k][h]: intra round k has left chunk h of the group's sum of block (i-1-k, j).
  std::vector<Marks> reduced(static_cast<size_t>(g), Marks(p.c));
  for (int k = 0; k < g; ++k) {
    const int q = Mod(p.i - 1 - k, g);
    for (uint64_t h = 0; h < p.c; ++h) {
      GroupReduceScatterSteps(
          wx, *p.grid, p.i, p.j, [&](int x) { return Unit{p.Chunk(input(p.at(q, x)), h)}; },
          [&](int k2, int x) -> Unit {
            return {block_chunk(xalt + static_cast<uint64_t>(k2) * L, p.at(q, x), h)};
          },
          Unit{sum(q, h)}, p.chunk);
      reduced[k][h] = wx.Mark();
    }
  }
  // The inter channel receives a partial sum into a scratch slot and folds the group's sum into
  // it in a local step of its own, placed just before the transfer that forwards it: so a
  // transfer waits only for the round whose sum it sends (round t-1), not for the one it folds
  // in, and the first round is the only one the inter ring cannot overlap.
  //   T(t, h): send the partial of block (i-t, j) chunk h (t = 1: the group's sum), receive the
  //            partial of block (i-t-1, j) into tmp[(t+1) % 2].
  //   R(t, h): tmp[(t+1) % 2] += the group's sum of block (i-t-1, j) (waits for round t); for
  //            t = g-1: final (the group's sum of the own block, left there by round g-1) += tmp.
  // Order: T(1, *), then R(t-1, h) before T(t, h), then R(g-1, *).
  auto tmp = [&](int t, int q, uint64_t h) {
    return block_chunk(ialt + static_cast<uint64_t>((t + 1) % 2) * L, p.at(q, p.j), h);
  };
  auto fold = [&](int t, uint64_t h) {
    const int rq = Mod(p.i - t - 1, g);
    wi.Wait(reduced[t][h]);
    Step st;
    const Piece in = tmp(t, rq, h);
    const Piece dst = t == g - 1 ? p.Chunk(final, h) : in;
    const Piece src = t == g - 1 ? in : sum(rq, h);
    st.ops.push_back(StepOp{StepOpKind::kReduce, -1, MakeSlice(src.buf, src.off, src.len),
                            MakeSlice(dst.buf, dst.off, dst.len)});
    if (src.len) wi.Add(std::move(st));
    if (t == g - 1 && done) (*done)[h] = wi.Mark();
  };
  for (int t = 1; t < g; ++t)
    for (uint64_t h = 0; h < p.c; ++h) {
      if (t == 1) wi.Wait(reduced[0][h]);  // the group's sum of block (i-1, j)
      if (t > 1) fold(t - 1, h);
      const int sq = Mod(p.i - t, g), rq = Mod(p.i - t - 1, g);
      Step st;
      SendUnit(st, p.at(p.i + 1, p.j), {t == 1 ? sum(sq, h) : tmp(t - 1, sq, h)}, p.chunk);
      RecvUnit(st, p.at(p.i - 1, p.j), {tmp(t, rq, h)}, p.chunk);
      wi.Add(std::move(st));
    }
  for (uint64_t h = 0; h < p.c; ++h) fold(g - 1, h);
  return used;
}

// Pairs of channels worth using: as ChannelsFor would give channels, from nchannels / 2.
int PairsFor(const CollArgs& a, uint64_t elems, uint64_t bytes) {
  CollArgs half = a;
  half.nchannels = std::max(a.nchannels / 2, 1);
  return ChannelsFor(half, elems, bytes);
}

RankSchedule Build(const CollArgs& a, const GroupGrid& grid, int r) {
  const int n = a.nranks;
  const uint64_t esize = DataTypeSize(a.dtype);
  const bool per_rank = a.kind != CollKind::kAllReduce;
  const uint64_t bytes = a.count * esize * (per_rank ? static_cast<uint64_t>(n) : 1);
  const int np = PairsFor(a, a.count, bytes);
  const uint64_t chunk = ChunkElems(a);
  RankSchedule s;
  s.channels.resize(2 * static_cast<size_t>(np));
  uint64_t base = 0;
  for (int pi = 0; pi < np; ++pi) {
    const ElemRange rc = EvenPart(a.count, np, pi);
    LaneWriter wi(s, static_cast<uint16_t>(2 * pi)), wx(s, static_cast<uint16_t>(2 * pi + 1));
    if (a.kind == CollKind::kAllGather) {
      const Pair p = MakePair(grid, r, BlockLayout::kPerRank, a.count, rc, chunk);
      Piece own{kRecvBuf, p.blocks[r].off, rc.len};
      std::vector<StepOp> first;
      if (!a.in_place) {
        own = {kSendBuf, rc.off, rc.len};
        Step tmp;
        AppendCopy(tmp, kSendBuf, rc.off, kRecvBuf, p.blocks[r].off, rc.len);
        first = tmp.ops;
      }
      HoAllGather(wi, wx, p, own, std::move(first), nullptr);
    } else if (a.kind == CollKind::kReduceScatter) {
      const Pair p = MakePair(grid, r, BlockLayout::kPerRank, a.count, rc, chunk);
      auto input = [&](int rank) -> Piece {
        if (a.in_place && rank == r) return {kRecvBuf, rc.off, rc.len};
        return {kSendBuf, p.blocks[rank].off, rc.len};
      };
      base += HoReduceScatter(wi, wx, p, input, Piece{kRecvBuf, rc.off, rc.len}, base, nullptr);
    } else {
      const Pair p = MakePair(grid, r, BlockLayout::kEvenByRank, a.count, rc, chunk);
      const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
      const Piece mine{kRecvBuf, p.blocks[r].off, p.blocks[r].len};
      Marks done(p.c);
      base += HoReduceScatter(
          wi, wx, p,
          [&](int rank) {
            return Piece{in, p.blocks[rank].off, p.blocks[rank].len};
          },
          mine, base, &done);
      HoAllGather(wi, wx, p, mine, {}, &done);
    }
  }
  s.scratch_count = base;
  return s;
}

// HO-Ring, and with `three_level` "ho_ring3": every intra round runs per level of a layout with
// device groups (GroupAllGatherSteps), so the round that hides behind the inter ring is shorter.
class HoRing final : public Algorithm {
 public:
  explicit HoRing(bool three_level) : three_level_(three_level) {}
  const char* name() const override { return three_level_ ? "ho_ring3" : "ho_ring"; }

  bool supports(const CollArgs& a) const override {
    switch (a.kind) {
      case CollKind::kAllReduce:
      case CollKind::kReduceScatter:
      case CollKind::kAllGather:
        // The two rings need a channel each.
        return a.nchannels >= 2 && GroupGridFor(a, three_level_).has_value();
      default:
        return false;
    }
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const GroupGrid grid = *GroupGridFor(a, three_level_);
    const bool empty = a.count == 0 || a.nranks == 1;
    // One ring left (or nothing to move): H-Ring's schedule is that ring (per level).
    if (grid.g == 1 || grid.m == 1 || empty) return OneRing().build(a, rank);
    return Build(a, grid, rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& model) const override {
    auto grid = GroupGridFor(a, three_level_);
    if (!grid || a.nranks <= 1) return 0;
    const int g = grid->g, M = grid->m, n = a.nranks;
    if (g == 1 || M == 1) return HierRingSeconds(a, *grid, model, false);
    const uint64_t esize = DataTypeSize(a.dtype);
    const uint64_t elems = a.kind == CollKind::kAllReduce ? (a.count + n - 1) / n : a.count;
    const uint64_t c = RoundChunks(elems, ChunkElems(a));
    const uint64_t sc = (elems + c - 1) / c * esize;  // one chunk of a block
    // One chunk-round inside the group: (M-1) intra transfers of a chunk, or per level.
    const double x = GroupPhaseSeconds(*grid, 1, sc, 1, a.chunk_bytes, model);
    // The node's M inter channels send through its one NIC (simulator.h): M chunks share it.
    const double y = TransferSeconds(sc, a.chunk_bytes, NodeLink(model, M));
    // spec: max(g(M-1)(a1 + s/B1), (g-1)(a2 + s/B2) + (M-1)(a1 + s/B1)), with chunked rounds
    // and B2 the node link shared by M ranks:
    // the intra channel's g c chunk-rounds, or the inter channel's (g-1)c chunk steps plus
    // the one chunk-round that cannot overlap them.
    const double intra = static_cast<double>(g) * c * x;
    const double inter = static_cast<double>(g - 1) * c * y + x;
    const double one = std::max(intra, inter);
    return a.kind == CollKind::kAllReduce ? 2 * one : one;
  }

 private:
  // H-Ring of the same levels: the schedule when one ring is left.
  const Algorithm& OneRing() const {
    return three_level_ ? HierRing3Algorithm() : HierRingAlgorithm();
  }
  bool three_level_;
};

}  // namespace

const Algorithm& HoRingAlgorithm() {
  static const HoRing algo(false);
  return algo;
}

const Algorithm& HoRing3Algorithm() {
  static const HoRing algo(true);
  return algo;
}

}  // namespace braid
