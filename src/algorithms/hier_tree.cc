// Hierarchical broadcast and reduce (`hier_tree`, spec/algorithms.md section 2, issue 10): a
// pipelined tree of two levels rooted at the root (i0, j0). The root's local rank j0 is every
// node's leader; the leaders form a chain across the nodes, (i0, j0) -> (i0+1, j0) -> ... ->
// (i0+g-1, j0), and each leader heads a chain through its node, (i, j0) -> (i, j0+1) -> ... ->
// (i, j0+M-1). Every transfer is cut into slices of chunk_bytes and pipelined: a rank forwards
// slice t-1 while slice t arrives, so the inter-node chain and the intra-node chains run at the
// same time. Only one rank per node (its leader) uses the node's NIC, once each way: the minimum
// inter-node volume for broadcast and reduce, where the flat ring crosses once per node too but
// carries the whole buffer through every hop of a longer chain.
//
// Broadcast: step t receives slice t from the parent and sends slice t-1 to each child (both at
// once: they are on different link classes at a leader). The root streams every slice to its
// children in one step.
// Reduce (the mirror, children -> parent): a rank folds its children's slices into its input
// and sends the partial sums up, software-pipelined so that every step's folds and send touch
// different slices (two folds of one slice cannot share a step). Partial sums wait in scratch
// slots (non-root ranks may write neither user buffer); the root folds into recvbuf.
#include <algorithm>
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"

namespace braid {
namespace {

// A rank's place in the tree.
struct TreePos {
  int parent = -1;       // -1: the root
  int intra_child = -1;  // next rank of its node's chain
  int inter_child = -1;  // next leader (leaders only)
};

TreePos PosOf(const CollArgs& a, const GroupGrid& grid, int r) {
  const int i0 = grid.group_of[a.root], j0 = grid.pos_of[a.root];
  const int i = grid.group_of[r], j = grid.pos_of[r];
  const int p = Mod(j - j0, grid.m), q = Mod(i - i0, grid.g);  // depth in node chain, leader chain
  TreePos t;
  if (p > 0)
    t.parent = grid.at(i, j - 1);
  else if (q > 0)
    t.parent = grid.at(i - 1, j0);
  if (p < grid.m - 1) t.intra_child = grid.at(i, j + 1);
  if (p == 0 && q < grid.g - 1) t.inter_child = grid.at(i + 1, j0);
  return t;
}

RankSchedule Broadcast(const CollArgs& a, const GroupGrid& grid, int r) {
  if (a.count == 0) return RankSchedule{};
  if (a.nranks == 1) return LocalCopySchedule(a.count, a.in_place);
  const TreePos pos = PosOf(a, grid, r);
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  std::vector<int> children;
  for (int c : {pos.inter_child, pos.intra_child})
    if (c >= 0) children.push_back(c);
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    LaneWriter w(s, static_cast<uint16_t>(c));
    if (pos.parent < 0) {
      // The root streams every slice to each child; the engine sends them in order.
      Step st;
      const uint16_t src = a.in_place ? kRecvBuf : kSendBuf;
      for (int child : children) AppendSends(st, child, src, rc.off, rc.len, chunk);
      if (!a.in_place) AppendCopy(st, kSendBuf, rc.off, kRecvBuf, rc.off, rc.len);
      w.Add(std::move(st));
    } else if (children.empty()) {
      Step st;
      AppendRecvs(st, pos.parent, kRecvBuf, rc.off, rc.len, chunk);
      w.Add(std::move(st));
    } else {
      for (uint64_t t = 0; t <= ns; ++t) {
        Step st;
        if (t < ns) {
          const ElemRange x = EvenPart(rc.len, ns, t);
          st.ops.push_back(StepOp{
              StepOpKind::kRecv, pos.parent, {}, MakeSlice(kRecvBuf, rc.off + x.off, x.len)});
        }
        if (t > 0) {
          const ElemRange x = EvenPart(rc.len, ns, t - 1);
          for (int child : children)
            st.ops.push_back(
                StepOp{StepOpKind::kSend, child, MakeSlice(kRecvBuf, rc.off + x.off, x.len), {}});
        }
        w.Add(std::move(st));
      }
    }
  }
  return s;
}

RankSchedule Reduce(const CollArgs& a, const GroupGrid& grid, int r) {
  if (a.count == 0) return RankSchedule{};
  if (a.nranks == 1) return LocalCopySchedule(a.count, a.in_place);
  const TreePos pos = PosOf(a, grid, r);
  const bool root = pos.parent < 0;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  // Children folded in this order, each in a step of its own per slice.
  std::vector<int> children;
  for (int c : {pos.intra_child, pos.inter_child})
    if (c >= 0) children.push_back(c);
  RankSchedule s;
  s.channels.resize(nch);
  uint64_t scratch_base = 0;
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    LaneWriter w(s, static_cast<uint16_t>(c));
    if (children.empty()) {  // a leaf: its input goes up whole
      Step st;
      AppendSends(st, pos.parent, in, rc.off, rc.len, chunk);
      w.Add(std::move(st));
      continue;
    }
    // A software pipeline over K children: in step u child k folds slice u-k (the first child
    // adds this rank's input, the next ones the partial so far) and the parent gets slice u-K,
    // so the folds of one step touch different slices and ports and a leader's intra fold, inter
    // fold and send up all run at once. Slice t's partial lives in recvbuf on the root, else in
    // scratch slot t % (K+1): written from step t, sent in step t+K, reused from step t+K+1.
    const int K = static_cast<int>(children.size());
    const uint64_t slot = EvenPart(rc.len, ns, 0).len;  // the first slice is the longest
    const uint64_t nslots = root ? 0 : std::min<uint64_t>(ns, K + 1);
    auto acc = [&](uint64_t t, const ElemRange& x) {
      return root ? MakeSlice(kRecvBuf, rc.off + x.off, x.len)
                  : MakeSlice(kScratchBuf, scratch_base + (t % nslots) * slot, x.len);
    };
    const uint64_t last_step = ns - 1 + (root ? K - 1 : K);
    for (uint64_t u = 0; u <= last_step; ++u) {
      Step st;
      for (int k = 0; k < K; ++k) {
        if (u < static_cast<uint64_t>(k) || u - k >= ns) continue;
        const uint64_t t = u - k;
        const ElemRange x = EvenPart(rc.len, ns, t);
        const Slice local = k == 0 ? MakeSlice(in, rc.off + x.off, x.len) : acc(t, x);
        st.ops.push_back(StepOp{StepOpKind::kRecvReduce, children[k], local, acc(t, x)});
      }
      if (!root && u >= static_cast<uint64_t>(K)) {
        const uint64_t t = u - K;
        st.ops.push_back(
            StepOp{StepOpKind::kSend, pos.parent, acc(t, EvenPart(rc.len, ns, t)), {}});
      }
      w.Add(std::move(st));
    }
    scratch_base += nslots * slot;
  }
  s.scratch_count = scratch_base;
  return s;
}

class HierTree final : public Algorithm {
 public:
  const char* name() const override { return "hier_tree"; }

  bool supports(const CollArgs& a) const override {
    return (a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce) &&
           GroupGridFor(a).has_value();
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const GroupGrid grid = *GroupGridFor(a);
    return a.kind == CollKind::kBroadcast ? Broadcast(a, grid, rank) : Reduce(a, grid, rank);
  }

  // A pipeline: the first slice crosses every hop of the deepest path ((g-1) inter, (M-1)
  // intra), the others follow at the pace of the slowest link (a leader's inter and intra
  // transfers of a step run at once). Only leaders cross nodes, one transfer per NIC and
  // direction.
  double estimate_seconds(const CollArgs& a, const LinkModel& model) const override {
    auto grid = GroupGridFor(a);
    if (!grid || a.nranks <= 1 || a.count == 0) return 0;
    const int g = grid->g, M = grid->m;
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
    const uint64_t chunk = std::max<uint64_t>(a.chunk_bytes, 1);
    const uint64_t ns = std::max<uint64_t>((bytes + chunk - 1) / chunk, 1);
    const double slice = static_cast<double>(bytes) / static_cast<double>(ns);
    const double x = M > 1 ? model.intra.alpha_s + slice / model.intra.beta_bytes_s : 0;
    const LinkParams nic = NodeLink(model, 1);  // one leader per node crosses
    const double y = g > 1 ? nic.alpha_s + slice / nic.beta_bytes_s : 0;
    return static_cast<double>(ns - 1) * std::max(x, y) + (g - 1) * y + (M - 1) * x;
  }
};

}  // namespace

const Algorithm& HierTreeAlgorithm() {
  static const HierTree algo;
  return algo;
}

}  // namespace braid
