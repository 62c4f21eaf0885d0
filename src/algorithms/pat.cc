// PAT, "Parallel Aggregated Trees" (NCCL 2.23+, arXiv 2506.20252): all-gather and reduce-scatter
// for any N in about log2 N messages per rank at latency-bound sizes, with scratch bounded by
// kPatScratchBytes whatever N and the count. Written from the paper's description and NCCL's
// PatAGAlgorithm / PatRSAlgorithm (src/include/collectives.h), for braid's IR.
//
// Offsets. Rank x needs, for each offset o in [1, N), one block to travel between x and x + o:
// the all-gather brings rank x - o's block to x, the reduce-scatter takes x's contribution to
// block x + o there. A block at offset o travels the binary digits of o as hops of 2^i, each
// hop always towards x + 2^i (sends) and from x - 2^i (receives), so every rank does the same
// thing at the same time and each (peer, direction) stream sees the same order on both sides.
// Blocks whose digits are still to travel share a hop: aggregated, they are one message.
//
// Classes. With A = agg blocks per message at most (a power of two) and D = 2^L / A classes
// (L = ceil(log2 N)), offset o belongs to class o mod D. Classes 1 .. D-1 each take one step, in
// which all of the class's blocks (o = c, c + D, ..., at most A of them) hop 2^lowbit(c) together;
// class 0 (the multiples of D) takes ceil(log2 ceil(N / D)) tail rounds at distances D, 2D, ...
// - Reduce-scatter: class steps c = D-1 down to 1, then the tail. In step c rank x sends its
//   partial sums for offsets of class c to x + 2^lowbit(c), and folds what x - 2^lowbit(c) sends
//   (its class c) into its own class c - 2^lowbit(c), which later steps send on (the low digits
//   of an offset travel first, near neighbours carry most of the data, as in PAT). The tail then
//   halves class 0's remaining ceil(N / D) partials over distances from the farthest down (round k
//   sends partials 2^k .. 2^(k+1)-1 to x + 2^k D, folded into 0 .. 2^k-1), the last round folding
//   into recvbuf.
// - All-gather: the same schedule transposed, run backwards: the tail first (Bruck over class 0:
//   round k sends the 2^k blocks gathered so far to x + 2^k D), then class steps c = 1 .. D-1,
//   step c forwarding class c - 2^lowbit(c) to x + 2^lowbit(c) and receiving class c.
// NCCL runs the tail in the opposite order (the farthest hop first, one block) from buffers laid
// out bit-reversed; here both tails keep class 0 in offset order so that every round is one
// contiguous run for any N, one message, at the price of the tail's larger runs going farther.
// The classes, which carry all but A of the N - 1 blocks, keep PAT's order.
//
// Scratch, bounded. A class's blocks are strided in the user's buffers (every D-th block), so a
// class of more than one block lives packed in a scratch slot of A blocks while it is in flight:
// the reduce-scatter copies its own input for the class into the slot just before the first
// partial sum arrives and sends the slot; the all-gather receives a class into its slot and copies
// it out to recvbuf in the next step. Class c is in flight from about step c + 2^(lowbit(c)-1) to
// step c, so one slot per value of lowbit(c) suffices, plus class 0's: (log2 D + 1) slots of
// ceil(N / D) blocks. A class of one block needs no slot (it travels from and to the user's
// buffers), so at A = 1 the all-gather uses no scratch. PlanPat picks the A, and the pieces each
// block's elements run in (the whole schedule once per piece), with the fewest messages whose
// slots fit in kPatScratchBytes (1 MiB), so the scratch never exceeds the cap whatever N and
// the count. At 16384 ranks with 512-byte blocks that is A = 256, D = 64: 71 messages in 896 KiB
// (the ring: 16383 steps; Bruck: 14 rounds, the last sending 4 MiB to the farthest partner);
// at 1024 ranks the same blocks take full aggregation, 10 messages in 512 KiB.
//
// Reduction order (reduce-scatter): block q's result is fixed by N and A: each rank folds an
// arriving partial into its own (own op incoming), along the offsets' binary digits (a binomial
// tree over offsets, low digits first, then class 0's tail from the high digit down). It is not
// the rank order the tests' references add in; those references are bit-exact for any order
// because the tests' inputs make every partial result exact in its type (tests/multirank/
// reference.h), as for recursive halving and Rabenseifner. Deterministic mode
// (BRAID_DETERMINISTIC) runs "ordered" instead, as for every other algorithm.
//
// One channel: PAT serves latency-bound sizes, where more channels add messages and no
// bandwidth (bruck.cc).
#include "algorithms/pat.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

int LowBit(int v) {
  return __builtin_ctz(static_cast<unsigned>(v));
}

// Blocks of class c: offsets c, c + D, c + 2D, ... below N.
uint64_t ClassCount(int c, int delta, int n) {
  return c < n ? static_cast<uint64_t>((n - 1 - c) / delta) + 1 : 0;
}

// Blocks the tail's round k moves: 2^k .. min(2^(k+1), cnt0) - 1 of class 0.
uint64_t TailCount(int k, uint64_t cnt0) {
  const uint64_t lo = uint64_t{1} << k;
  return std::min(lo, cnt0 - lo);
}

// Scratch elements per element of a piece: the slots of the classes of more than one block.
uint64_t ScratchPerElement(CollKind kind, int levels, uint64_t cnt0) {
  // All-gather with single-block classes (cnt0 == 1): everything travels in the user's buffers.
  if (kind == CollKind::kAllGather && cnt0 == 1) return 0;
  return static_cast<uint64_t>(levels + 1) * cnt0;
}

// A place in a rank's buffers: (buffer, element offset).
using Loc = std::pair<uint16_t, uint64_t>;

// One pass of the schedule over elements `pr` of every block, among n members (the flat
// collective's ranks, or the ranks of one local position across nodes: hierarchical PAT), this
// rank at position x.
struct Pass {
  const PatShape& sh;
  int x, n;
  const std::vector<int>* members;  // position -> rank (nullptr: the identity)
  uint64_t cnt0;
  uint64_t base;  // where the slots start in scratch
  uint64_t slot;  // elements of a slot
  ElemRange pr;
  uint64_t chunk;
  // Where this pass's piece of member b's block lies: the all-gather's output, or the
  // reduce-scatter's input (this rank's contribution to it).
  std::function<Loc(int b, const ElemRange& pr)> block;
  Loc own;        // all-gather: this rank's own piece, as the caller left it
  bool copy_own;  // all-gather: copy it to block(x) too (out of place)
  Loc result;     // reduce-scatter: where the sum of this rank's piece goes

  int Top() const { return std::min(sh.delta, n); }  // class steps 1 .. Top()-1
  uint64_t Count(int c) const { return ClassCount(c, sh.delta, n); }
  int Peer(int64_t d) const {
    const int q = Mod(x + d, n);
    return members ? (*members)[static_cast<size_t>(q)] : q;
  }
  // Scratch offset of item m of class c (class 0 in the last slot, class c in slot lowbit(c)).
  uint64_t Item(int c, uint64_t m) const {
    const int level = c == 0 ? sh.levels : LowBit(c);
    return base + static_cast<uint64_t>(level) * slot + m * pr.len;
  }
  // Whether class c lives packed in scratch (else its single block travels in user buffers).
  bool Packed(int c) const { return Count(c) > 1; }
  Loc Output(int b) const { return block(b, pr); }
  Loc Input(int b) const { return block(b, pr); }
};

void AppendPack(Step& st, const Pass& p, int c) {
  for (uint64_t m = 0; m < p.Count(c); ++m) {
    const auto [buf, off] = p.Input(Mod(p.x + c + static_cast<int64_t>(m) * p.sh.delta, p.n));
    AppendCopy(st, buf, off, kScratchBuf, p.Item(c, m), p.pr.len);
  }
}

void ReduceScatterPass(Channel& ch, const Pass& p) {
  const int top = p.Top(), delta = p.sh.delta;
  std::vector<Step> steps(static_cast<size_t>(top));  // steps[c]: class c's step (c >= 1)
  Step prologue;
  // A packed class is filled just before its first partial sum arrives: in the step before
  // c + 2^(lowbit(c)-1) (steps run from D-1 down), or before its own send for an odd class.
  // That step touches other slots only (pat.cc header), so the copies run beside its transfers.
  if (p.Packed(0)) AppendPack(prologue, p, 0);
  for (int c = 1; c < top; ++c) {
    if (!p.Packed(c)) continue;
    const int b = LowBit(c);
    const int t = b == 0 ? c + 1 : c + (1 << (b - 1)) + 1;
    AppendPack(t < top ? steps[static_cast<size_t>(t)] : prologue, p, c);
  }
  // Unpacked classes (one block) take their first partial sum from the input itself.
  std::vector<bool> started(static_cast<size_t>(top), false);
  auto from = [&](int c) -> std::pair<uint16_t, uint64_t> {
    if (p.Packed(c) || started[static_cast<size_t>(c)]) return {kScratchBuf, p.Item(c, 0)};
    return p.Input(Mod(p.x + c, p.n));
  };
  for (int s = top - 1; s >= 1; --s) {
    Step& st = steps[static_cast<size_t>(s)];
    const int d = 1 << LowBit(s), c = s - d;
    const uint64_t len = p.Count(s) * p.pr.len;
    const auto [sbuf, soff] = from(s);
    AppendSends(st, p.Peer(d), sbuf, soff, len, p.chunk);
    // Class 0's last partial sum lands in recvbuf: at step 1 when there is no tail.
    const bool last = c == 0 && s == 1 && p.sh.tail_rounds == 0;
    const auto [ibuf, ioff] = from(c);
    AppendRecvReduces(st, p.Peer(-d), ibuf, ioff, last ? p.result.first : uint16_t{kScratchBuf},
                      last ? p.result.second : p.Item(c, 0), len, p.chunk);
    started[static_cast<size_t>(c)] = true;
  }
  AddStep(ch, std::move(prologue));
  for (int s = top - 1; s >= 1; --s) AddStep(ch, std::move(steps[static_cast<size_t>(s)]));
  for (int k = p.sh.tail_rounds - 1; k >= 0; --k) {
    const uint64_t lo = uint64_t{1} << k, len = TailCount(k, p.cnt0) * p.pr.len;
    const int64_t d = static_cast<int64_t>(lo) * delta;
    Step st;
    AppendSends(st, p.Peer(d), kScratchBuf, p.Item(0, lo), len, p.chunk);
    AppendRecvReduces(st, p.Peer(-d), kScratchBuf, p.Item(0, 0),
                      k == 0 ? p.result.first : uint16_t{kScratchBuf},
                      k == 0 ? p.result.second : p.Item(0, 0), len, p.chunk);
    AddStep(ch, std::move(st));
  }
}

void AppendUnpack(Step& st, const Pass& p, int c) {
  if (!p.Packed(c)) return;
  for (uint64_t m = c == 0 ? 1 : 0; m < p.Count(c); ++m) {
    const auto [buf, off] = p.Output(Mod(p.x - c - static_cast<int64_t>(m) * p.sh.delta, p.n));
    AppendCopy(st, kScratchBuf, p.Item(c, m), buf, off, p.pr.len);
  }
}

void AllGatherPass(Channel& ch, const Pass& p) {
  const int top = p.Top(), delta = p.sh.delta;
  // Not a structured binding: the lambdas below capture them, which clang before 16 refuses.
  const uint16_t own_buf = p.own.first;
  const uint64_t own_off = p.own.second;
  // Where class c's first block lies: its slot, or the user's buffers for a single block.
  auto at = [&](int c) -> std::pair<uint16_t, uint64_t> {
    if (p.Packed(c)) return {kScratchBuf, p.Item(c, 0)};
    if (c == 0) return {own_buf, own_off};
    return p.Output(Mod(p.x - c, p.n));
  };
  // The first step sends the own block straight from the input; beside it the block is copied
  // into place (out of place) and into class 0's slot (when class 0 is packed).
  auto first = [&](Step& st) {
    if (p.copy_own) {
      const auto [buf, off] = p.Output(p.x);
      AppendCopy(st, own_buf, own_off, buf, off, p.pr.len);
    }
    if (p.Packed(0)) AppendCopy(st, own_buf, own_off, kScratchBuf, p.Item(0, 0), p.pr.len);
  };
  for (int k = 0; k < p.sh.tail_rounds; ++k) {
    const uint64_t lo = uint64_t{1} << k, len = TailCount(k, p.cnt0) * p.pr.len;
    const int64_t d = static_cast<int64_t>(lo) * delta;
    Step st;
    if (k == 0) {
      first(st);
      AppendSends(st, p.Peer(d), own_buf, own_off, len, p.chunk);
    } else {
      AppendSends(st, p.Peer(d), kScratchBuf, p.Item(0, 0), len, p.chunk);
    }
    AppendRecvs(st, p.Peer(-d), kScratchBuf, p.Item(0, lo), len, p.chunk);
    AddStep(ch, std::move(st));
  }
  for (int s = 1; s < top; ++s) {
    const int d = 1 << LowBit(s), c = s - d;
    const uint64_t len = p.Count(s) * p.pr.len;
    Step st;
    if (s == 1 && p.sh.tail_rounds == 0) {
      first(st);
      AppendSends(st, p.Peer(d), own_buf, own_off, len, p.chunk);
    } else {
      const auto [buf, off] = at(c);
      AppendSends(st, p.Peer(d), buf, off, len, p.chunk);
    }
    const auto [rbuf, roff] = at(s);
    AppendRecvs(st, p.Peer(-d), rbuf, roff, len, p.chunk);
    // The class received in the step before goes to its places now (its slot is another one).
    AppendUnpack(st, p, s - 1);
    AddStep(ch, std::move(st));
  }
  Step last;
  AppendUnpack(last, p, top - 1);
  AddStep(ch, std::move(last));
}

}  // namespace

Result<PatShape> PlanPat(const CollArgs& a, uint64_t cap_bytes) {
  const int n = a.nranks;
  if (n < 2 || a.count == 0) return InvalidArgument("pat: plans need N >= 2 and count > 0");
  const int lg = CeilLog2(n);
  const uint64_t es = DataTypeSize(a.dtype);
  bool found = false;
  PatShape best;
  for (int levels = 1; levels <= lg; ++levels) {
    PatShape sh;
    sh.levels = levels;
    sh.delta = 1 << levels;
    sh.agg = 1 << (lg - levels);
    const uint64_t cnt0 = ClassCount(0, sh.delta, n);
    sh.tail_rounds = CeilLog2(static_cast<int>(cnt0));
    const uint64_t per_elem = ScratchPerElement(a.kind, levels, cnt0);
    const uint64_t most = per_elem == 0 ? a.count : cap_bytes / (per_elem * es);
    if (most == 0) continue;
    sh.pieces = (a.count + most - 1) / most;
    sh.piece = (a.count + sh.pieces - 1) / sh.pieces;
    sh.scratch_count = per_elem * sh.piece;
    sh.messages = sh.pieces * static_cast<uint64_t>(std::min(sh.delta, n) - 1 + sh.tail_rounds);
    if (!found || sh.messages < best.messages ||
        (sh.messages == best.messages && sh.scratch_count < best.scratch_count)) {
      best = sh;
      found = true;
    }
  }
  if (!found)
    return InvalidArgument("pat: a scratch cap of " + std::to_string(cap_bytes) +
                           " bytes holds no piece of a block (" + std::to_string(lg + 1) +
                           " elements of " + std::to_string(es) + " bytes needed)");
  return best;
}

Result<RankSchedule> BuildPatSchedule(const CollArgs& a, int rank, uint64_t cap_bytes) {
  if (a.kind != CollKind::kAllGather && a.kind != CollKind::kReduceScatter)
    return InvalidArgument("pat: all-gather and reduce-scatter only");
  if (a.count == 0) return RankSchedule{};
  if (a.nranks == 1) return LocalCopySchedule(a.count, a.in_place);
  BRAID_ASSIGN_OR_RETURN(const PatShape sh, PlanPat(a, cap_bytes));
  RankSchedule s;
  s.channels.resize(1);
  s.scratch_count = sh.scratch_count;
  const uint64_t cnt0 = ClassCount(0, sh.delta, a.nranks);
  // The flat collective's blocks: rank b's at b x count (in place, the rank's own input is
  // recvbuf for a reduce-scatter, its block of recvbuf for an all-gather).
  const bool ag = a.kind == CollKind::kAllGather;
  auto block = [&a, rank, ag](int b, const ElemRange& pr) -> Loc {
    if (!ag && a.in_place && b == rank) return {kRecvBuf, pr.off};
    return {ag ? kRecvBuf : kSendBuf, static_cast<uint64_t>(b) * a.count + pr.off};
  };
  for (uint64_t i = 0; i < sh.pieces; ++i) {
    const ElemRange pr = EvenPart(a.count, sh.pieces, i);
    const Pass p{sh,
                 rank,
                 a.nranks,
                 nullptr,
                 cnt0,
                 0,
                 cnt0 * sh.piece,
                 pr,
                 ChunkElems(a),
                 block,
                 a.in_place ? block(rank, pr) : Loc{kSendBuf, pr.off},
                 !a.in_place,
                 Loc{kRecvBuf, pr.off}};
    if (ag)
      AllGatherPass(s.channels[0], p);
    else
      ReduceScatterPass(s.channels[0], p);
  }
  return s;
}

double PatEstimateSeconds(const CollArgs& a, const LinkModel& m, uint64_t cap_bytes) {
  const int n = a.nranks;
  if (n <= 1 || a.count == 0) return 0;
  auto planned = PlanPat(a, cap_bytes);
  if (!planned.ok()) return 0;
  const PatShape* sh = &*planned;
  const uint64_t es = DataTypeSize(a.dtype), cnt0 = ClassCount(0, sh->delta, n);
  // Every hop is r -> r + 2^i for all r at once: one link per distance (L of them).
  std::vector<LinkParams> link(static_cast<size_t>(CeilLog2(n)));
  for (size_t i = 0; i < link.size(); ++i)
    link[i] = PartnerLink(a, m, ShiftPartner, int64_t{1} << i);
  // One pass over blocks of `w` elements: a transfer per class step and per tail round.
  auto pass = [&](uint64_t w) {
    double t = 0;
    for (int s = 1; s < std::min(sh->delta, n); ++s)
      t += TransferSeconds(ClassCount(s, sh->delta, n) * w * es, a.chunk_bytes,
                           link[static_cast<size_t>(LowBit(s))]);
    for (int k = 0; k < sh->tail_rounds; ++k)
      t += TransferSeconds(TailCount(k, cnt0) * w * es, a.chunk_bytes,
                           link[static_cast<size_t>(k + sh->levels)]);
    return t;
  };
  // EvenPart: count % pieces passes are one element longer.
  const uint64_t longer = a.count % sh->pieces, w = a.count / sh->pieces;
  return static_cast<double>(longer) * pass(w + 1) +
         static_cast<double>(sh->pieces - longer) * (w > 0 ? pass(w) : 0);
}

namespace {

class Pat final : public Algorithm {
 public:
  const char* name() const override { return "pat"; }

  bool supports(const CollArgs& a) const override {
    return (a.kind == CollKind::kAllGather || a.kind == CollKind::kReduceScatter) && a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return BuildPatSchedule(a, rank, kPatScratchBytes);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    return PatEstimateSeconds(a, m, kPatScratchBytes);
  }

  // Latency-bound calls only: blocks no larger than what the flat link moves in one alpha.
  // Above, the copies into and out of the slots (as many bytes as go on the wire, free in the
  // model) would eat the rounds PAT saves, and the ring and HO-Ring keep those sizes. On one
  // node its all-gather ties Bruck's in the model and measured slower (6 ranks, 64-256 KiB:
  // 1.0-2.1x Bruck's time, docs/algorithms.md): Bruck and the butterfly keep it there.
  bool rankedFor(const CollArgs& a, const LinkModel& m) const override {
    if (a.kind == CollKind::kAllGather && OnOneNode(a)) return false;
    const LinkParams l = FlatLink(a, m);
    const double block = static_cast<double>(a.count) * static_cast<double>(DataTypeSize(a.dtype));
    return block <= l.alpha_s * l.beta_bytes_s;
  }
};

}  // namespace

const Algorithm& PatAlgorithm() {
  static const Pat pat;
  return pat;
}

// ------------------------------------------------------------------ hierarchical PAT

namespace {

// Hierarchical PAT ("hpat"): H-Ring (hier_ring.cc) with PAT in place of its inter-node ring.
// All-gather: PAT across the nodes among the ranks of this rank's local position (g members,
// each gathering the g blocks of its position straight into recvbuf), then the intra-node ring
// of super-blocks (GroupAllGatherSteps: local rank x's item is the g blocks of position x).
// Reduce-scatter: the mirror, the intra-node reduce-scatter of super-blocks first
// (GroupReduceScatterSteps) into this rank's node partials of its position's g blocks, then PAT
// across the nodes from those partials into recvbuf. The phases run one after the other on one
// channel (PAT serves latency-bound sizes; HO-Ring's overlap is for bandwidth).
//
// Scratch, bounded like PAT's: the reduce-scatter's intra phase holds super-blocks of g blocks
// (GroupReduceScatterSlots(grid) slots and the partials), so the count runs in pieces whose
// intra scratch fits half of kPatScratchBytes, PAT's own under the rest; the all-gather's intra
// phase needs none (PAT's cap is all of it).
struct HierPlan {
  uint64_t pieces = 1;   // outer pieces of the count (reduce-scatter)
  uint64_t piece = 0;    // their longest
  uint64_t intra = 0;    // intra-phase scratch elements
  PatShape pat;          // PAT among the g members over a piece (g >= 2)
  uint64_t scratch = 0;  // total
};

Result<HierPlan> PlanHierPat(const CollArgs& a, const GroupGrid& grid, uint64_t cap) {
  HierPlan hp;
  const uint64_t es = DataTypeSize(a.dtype), g = static_cast<uint64_t>(grid.g);
  const bool rs = a.kind == CollKind::kReduceScatter && grid.m > 1;
  // Super-blocks of g pieces: GroupReduceScatterSlots slots and the partials.
  const uint64_t per_elem = rs ? (static_cast<uint64_t>(GroupReduceScatterSlots(grid)) + 1) * g : 0;
  uint64_t intra_cap = grid.g > 1 ? cap / 2 : cap;
  if (per_elem > 0) {
    const uint64_t most = intra_cap / (per_elem * es);
    if (most == 0)
      return InvalidArgument("hpat: a scratch cap of " + std::to_string(cap) +
                             " bytes holds no piece of a super-block");
    hp.pieces = (a.count + most - 1) / most;
  }
  hp.piece = (a.count + hp.pieces - 1) / hp.pieces;
  hp.intra = per_elem * hp.piece;
  if (grid.g > 1) {
    CollArgs sub = a;
    sub.nranks = grid.g;
    sub.count = hp.piece;
    sub.layout = nullptr;
    BRAID_ASSIGN_OR_RETURN(hp.pat, PlanPat(sub, cap - hp.intra * es));
  }
  hp.scratch = hp.intra + hp.pat.scratch_count;
  return hp;
}

// PAT among `members` (this rank at position x) over elements [0, len) of every block, where
// block(b, pr) says where piece pr of member b's block lies.
void MemberPasses(Channel& ch, CollKind kind, const PatShape& sh, const std::vector<int>& members,
                  int x, uint64_t len, uint64_t base, uint64_t chunk,
                  const std::function<Loc(int, const ElemRange&)>& block, bool copy_own,
                  const std::function<Loc(const ElemRange&)>& own,
                  const std::function<Loc(const ElemRange&)>& result) {
  const int n = static_cast<int>(members.size());
  const uint64_t cnt0 = ClassCount(0, sh.delta, n);
  for (uint64_t i = 0; i < sh.pieces; ++i) {
    const ElemRange pr = EvenPart(len, sh.pieces, i);
    if (pr.len == 0) continue;
    const Pass p{sh, x,     n,     &members, cnt0,     base,      cnt0 * sh.piece,
                 pr, chunk, block, own(pr),  copy_own, result(pr)};
    if (kind == CollKind::kAllGather)
      AllGatherPass(ch, p);
    else
      ReduceScatterPass(ch, p);
  }
}

Result<RankSchedule> BuildHierPat(const CollArgs& a, const GroupGrid& grid, int r, uint64_t cap) {
  if (a.count == 0) return RankSchedule{};
  if (a.nranks == 1) return LocalCopySchedule(a.count, a.in_place);
  BRAID_ASSIGN_OR_RETURN(const HierPlan hp, PlanHierPat(a, grid, cap));
  const int g = grid.g, m = grid.m, i = grid.group_of[r], j = grid.pos_of[r];
  const uint64_t count = a.count, chunk = ChunkElems(a);
  std::vector<int> members(static_cast<size_t>(g));
  for (int k = 0; k < g; ++k) members[static_cast<size_t>(k)] = grid.at(k, j);
  RankSchedule s;
  s.channels.resize(1);
  s.scratch_count = hp.scratch;
  LaneWriter w(s, 0);
  auto user = [&](int rank, uint64_t off, uint64_t len) -> Piece {
    if (a.kind == CollKind::kAllGather) return {kRecvBuf, rank * count + off, len};
    if (a.in_place && rank == r) return {kRecvBuf, off, len};
    return {kSendBuf, rank * count + off, len};
  };
  if (a.kind == CollKind::kAllGather) {
    const Loc own_at = a.in_place ? Loc{kRecvBuf, r * count} : Loc{kSendBuf, 0};
    std::vector<StepOp> first;
    if (g > 1) {
      MemberPasses(
          s.channels[0], a.kind, hp.pat, members, i, count, 0, chunk,
          [&](int b, const ElemRange& pr) -> Loc {
            return {kRecvBuf,
                    static_cast<uint64_t>(members[static_cast<size_t>(b)]) * count + pr.off};
          },
          !a.in_place,
          [&](const ElemRange& pr) {
            return Loc{own_at.first, own_at.second + pr.off};
          },
          [](const ElemRange&) { return Loc{}; });
    } else if (!a.in_place) {
      Step tmp;
      AppendCopy(tmp, kSendBuf, 0, kRecvBuf, r * count, count);
      first = tmp.ops;
    }
    if (m > 1) {
      GroupAllGatherSteps(
          w, grid, i, j,
          [&](int x, bool sending) {
            // One node, out of place: the own block leaves from the input while it is copied.
            if (g == 1 && sending && x == j && !a.in_place) return Unit{Piece{kSendBuf, 0, count}};
            Unit u;
            for (int k = 0; k < g; ++k) u.push_back(user(grid.at(k, x), 0, count));
            return u;
          },
          chunk, std::move(first));
    }
    return s;
  }
  // Reduce-scatter, in outer pieces q of every block.
  const uint64_t q_slot = hp.piece * static_cast<uint64_t>(g);  // a super-block in scratch
  const uint64_t partials = hp.intra - q_slot;                  // after the slots
  for (uint64_t o = 0; o < hp.pieces; ++o) {
    const ElemRange q = EvenPart(count, hp.pieces, o);
    if (m > 1) {
      GroupReduceScatterSteps(
          w, grid, i, j,
          [&](int x) {
            Unit u;
            for (int k = 0; k < g; ++k) u.push_back(user(grid.at(k, x), q.off, q.len));
            return u;
          },
          [&](int k, int) {
            Unit u;
            for (int b = 0; b < g; ++b)
              u.push_back(Piece{kScratchBuf, k * q_slot + b * q.len, q.len});
            return u;
          },
          [&] {
            if (g == 1) return Unit{Piece{kRecvBuf, q.off, q.len}};
            Unit u;
            for (int b = 0; b < g; ++b)
              u.push_back(Piece{kScratchBuf, partials + b * q.len, q.len});
            return u;
          }(),
          chunk);
    }
    if (g > 1) {
      MemberPasses(
          s.channels[0], a.kind, hp.pat, members, i, q.len, hp.intra, chunk,
          [&](int b, const ElemRange& pr) -> Loc {
            if (m > 1) return {kScratchBuf, partials + b * q.len + pr.off};
            const Piece u = user(members[static_cast<size_t>(b)], q.off + pr.off, pr.len);
            return {u.buf, u.off};
          },
          false, [](const ElemRange&) { return Loc{}; },
          [&](const ElemRange& pr) {
            return Loc{kRecvBuf, q.off + pr.off};
          });
    }
  }
  return s;
}

class HierPat final : public Algorithm {
 public:
  const char* name() const override { return "hpat"; }

  bool supports(const CollArgs& a) const override {
    return (a.kind == CollKind::kAllGather || a.kind == CollKind::kReduceScatter) &&
           GroupGridFor(a).has_value();
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return BuildHierPat(a, *GroupGridFor(a), rank, kPatScratchBytes);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const auto grid = GroupGridFor(a);
    if (!grid || a.nranks <= 1 || a.count == 0) return 0;
    return HierPatSeconds(a, *grid, m);
  }

  // By name only (BRAID_ALGO=...:hpat): not measured against H-Ring and HO-Ring anywhere yet.
  bool rankedOn(const LinkModel&) const override { return false; }

 private:
  // The schedule's phases one after the other on one channel: the intra-node ring of
  // super-blocks (g blocks a step, as H-Ring's), and PAT among the g members of each local
  // position, whose M groups cross at once through each node's NICs (NodeLink(m, M)): the
  // sub-problem of g ranks priced by PatEstimateSeconds on a model whose links are that shared
  // NIC. The reduce-scatter runs both per outer piece of the count.
  static double HierPatSeconds(const CollArgs& a, const GroupGrid& grid, const LinkModel& m) {
    auto planned = PlanHierPat(a, grid, kPatScratchBytes);
    if (!planned.ok()) return 0;
    const HierPlan& hp = *planned;
    const uint64_t es = DataTypeSize(a.dtype);
    const bool rs = a.kind == CollKind::kReduceScatter;
    const uint64_t len = rs ? hp.piece : a.count;
    const double passes = rs ? static_cast<double>(hp.pieces) : 1.0;
    const double intra = GroupPhaseSeconds(grid, grid.g, len * es, 1, a.chunk_bytes, m);
    double inter = 0;
    if (grid.g > 1) {
      CollArgs sub = a;
      sub.nranks = grid.g;
      sub.count = len;
      sub.layout = nullptr;  // PartnerLink then prices every hop on sub_model.intra
      LinkModel shared = m;
      shared.intra = NodeLink(m, grid.m);
      inter = PatEstimateSeconds(sub, shared, kPatScratchBytes - hp.intra * es);
    }
    return passes * (intra + inter);
  }
};

}  // namespace

Result<RankSchedule> BuildHierPatSchedule(const CollArgs& args, int rank, uint64_t cap_bytes) {
  const auto grid = GroupGridFor(args);
  if (!grid) return InvalidArgument("hpat: the layout is no grid of equal groups");
  return BuildHierPat(args, *grid, rank, cap_bytes);
}

const Algorithm& HierPatAlgorithm() {
  static const HierPat hpat;
  return hpat;
}

}  // namespace braid
