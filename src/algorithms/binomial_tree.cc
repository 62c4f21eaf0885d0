// Binomial-tree broadcast and reduce for small messages: ceil(log2 N) levels instead of the
// ring's N-1 hops.
//
// With v = (rank - root) mod N, the parent of v > 0 is v - 2^floor(log2 v) and the children are
// v + 2^k for every k above floor(log2 v) (every k for the root) with v + 2^k < N; the child with
// the larger k roots the smaller subtree. Large messages are cut into slices and pipelined down
// (or up) the tree one slice per step.
#include <algorithm>
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

struct TreeNode {
  int parent = -1;            // real rank, -1 for the root
  std::vector<int> children;  // real ranks, largest subtree first
};

TreeNode NodeOf(int n, int root, int r) {
  TreeNode t;
  const int v = Mod(r - root, n);
  int first_k = 0;
  if (v > 0) {
    const int top = FloorLog2(v);
    t.parent = Mod(v - (1 << top) + root, n);
    first_k = top + 1;
  }
  for (int k = first_k; k < 31 && v + (int64_t{1} << k) < n; ++k)
    t.children.push_back(Mod(v + (1 << k) + root, n));
  return t;
}

RankSchedule Broadcast(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  const TreeNode node = NodeOf(n, a.root, r);
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    Channel& ch = s.channels[c];
    auto slice = [&](uint16_t buf, uint64_t t) {
      const ElemRange sl = EvenPart(rc.len, ns, t);
      return MakeSlice(buf, rc.off + sl.off, sl.len);
    };
    if (node.parent < 0) {
      // The root has everything: one step, slice-major so every subtree starts early.
      Step st;
      const uint16_t src = a.in_place ? kRecvBuf : kSendBuf;
      for (uint64_t t = 0; t < ns; ++t)
        for (int child : node.children)
          st.ops.push_back(StepOp{StepOpKind::kSend, child, slice(src, t), {}});
      if (!a.in_place) AppendCopy(st, kSendBuf, rc.off, kRecvBuf, rc.off, rc.len);
      AddStep(ch, std::move(st));
      continue;
    }
    if (node.children.empty()) {
      Step st;
      AppendRecvs(st, node.parent, kRecvBuf, rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
      continue;
    }
    // Step t receives slice t and forwards slice t-1 to every child.
    for (uint64_t t = 0; t <= ns; ++t) {
      Step st;
      if (t < ns) st.ops.push_back(StepOp{StepOpKind::kRecv, node.parent, {}, slice(kRecvBuf, t)});
      if (t > 0)
        for (int child : node.children)
          st.ops.push_back(StepOp{StepOpKind::kSend, child, slice(kRecvBuf, t - 1), {}});
      AddStep(ch, std::move(st));
    }
  }
  return s;
}

// Children are folded in one per step (two reductions into the same slice may not share a
// step), staggered: at step s child j contributes slice s-j, so the children of one node work on
// different slices at once and slice t leaves for the parent at step t + #children. A non-root
// node keeps partial sums in a ring of #children+1 scratch slots (it may not write recvbuf).
RankSchedule Reduce(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  TreeNode node = NodeOf(n, a.root, r);
  std::reverse(node.children.begin(), node.children.end());  // smallest subtree finishes first
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  const uint64_t nc = node.children.size();
  const bool is_root = node.parent < 0;
  RankSchedule s;
  s.channels.resize(nch);
  uint64_t scratch_base = 0;
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    Channel& ch = s.channels[c];
    if (nc == 0) {
      Step st;
      AppendSends(st, node.parent, in, rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
      continue;
    }
    const uint64_t slot = EvenPart(rc.len, ns, 0).len;
    const uint64_t nslots = std::min<uint64_t>(ns, nc + 1);
    // Accumulator of slice t: recvbuf on the root, a scratch slot elsewhere.
    auto acc = [&](uint64_t t) {
      const ElemRange sl = EvenPart(rc.len, ns, t);
      if (is_root) return MakeSlice(kRecvBuf, rc.off + sl.off, sl.len);
      return MakeSlice(kScratchBuf, scratch_base + (t % nslots) * slot, sl.len);
    };
    const uint64_t last_step = ns - 1 + nc - (is_root ? 1 : 0);
    for (uint64_t step = 0; step <= last_step; ++step) {
      Step st;
      for (uint64_t j = 0; j < nc; ++j) {
        if (step < j || step - j >= ns) continue;
        const uint64_t t = step - j;
        const ElemRange sl = EvenPart(rc.len, ns, t);
        const Slice src = j == 0 ? MakeSlice(in, rc.off + sl.off, sl.len) : acc(t);
        st.ops.push_back(StepOp{StepOpKind::kRecvReduce, node.children[j], src, acc(t)});
      }
      if (!is_root && step >= nc && step - nc < ns)
        st.ops.push_back(StepOp{StepOpKind::kSend, node.parent, acc(step - nc), {}});
      AddStep(ch, std::move(st));
    }
    if (!is_root) scratch_base += nslots * slot;
  }
  s.scratch_count = scratch_base;
  return s;
}

class BinomialTree final : public Algorithm {
 public:
  const char* name() const override { return "tree"; }

  bool supports(const CollArgs& a) const override {
    return (a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce) && a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return a.kind == CollKind::kBroadcast ? Broadcast(a, rank) : Reduce(a, rank);
  }

  // The root's port carries every slice once per child: ns * depth slice times (for one slice
  // this is the classic depth * (alpha + S/beta)).
  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    if (a.nranks <= 1) return 0;
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
    const uint64_t chunk = std::max<uint64_t>(a.chunk_bytes, 1);
    const uint64_t ns = std::max<uint64_t>((bytes + chunk - 1) / chunk, 1);
    const double slice = static_cast<double>(bytes) / static_cast<double>(ns);
    // Level d's transfers go from the d ranks that hold the data to those d further on: inside
    // a node while d is short, else through the NICs, shared by the level's crossings (counted
    // for root 0; the pipelined slices keep every level busy at once).
    double level_sum = 0;
    for (int64_t d = 1; d < a.nranks; d *= 2) {
      const LinkParams l = PartnerLink(a, m, TreePartner, d);
      level_sum += l.alpha_s + slice / l.beta_bytes_s;
    }
    return static_cast<double>(ns) * level_sum;
  }
};

}  // namespace

const Algorithm& BinomialTreeAlgorithm() {
  static const BinomialTree tree;
  return tree;
}

}  // namespace braid
