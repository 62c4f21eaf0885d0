// Leader-based hierarchical all-reduce (spec/algorithms.md section 2, the baseline the 2D torus
// is compared with, and the algorithm for nodes with one NIC): each group reduces to its leader
// (local rank 0) along a chain M-1 -> ... -> 0, the g leaders all-reduce with a ring, and each
// leader broadcasts the result along the chain 0 -> ... -> M-1. Chains are pipelined slice by
// slice (chunk_bytes), as ring.cc's reduce and broadcast; only the leaders use the inter-node
// link.
//
// Memory: a rank's running sum lives in recvbuf (it is this rank's output buffer and the
// broadcast overwrites it last), so no scratch is needed.
#include <algorithm>
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"

namespace braid {
namespace {

RankSchedule Build(const CollArgs& a, const GroupGrid& grid, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const int g = grid.g, m = grid.m, i = grid.group_of[r], j = grid.pos_of[r];
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    auto slice = [&](uint64_t t) {
      ElemRange x = EvenPart(rc.len, ns, t);
      x.off += rc.off;
      return x;
    };
    LaneWriter w(s, static_cast<uint16_t>(c));
    // 1. Reduce to the leader: local rank j folds what j+1 sends into its input and passes the
    //    partial sum to j-1, slice t arriving while slice t-1 leaves.
    uint16_t sum = in;  // where this rank's contribution (then the group's sum) lives
    if (m > 1) {
      if (j == m - 1) {
        Step st;
        AppendSends(st, grid.at(i, j - 1), in, rc.off, rc.len, chunk);
        w.Add(std::move(st));
      } else {
        for (uint64_t t = 0; t <= ns; ++t) {
          Step st;
          if (t < ns) {
            const ElemRange x = slice(t);
            st.ops.push_back(StepOp{StepOpKind::kRecvReduce, grid.at(i, j + 1),
                                    MakeSlice(in, x.off, x.len),
                                    MakeSlice(kRecvBuf, x.off, x.len)});
          }
          if (t > 0 && j > 0) {
            const ElemRange x = slice(t - 1);
            st.ops.push_back(StepOp{
                StepOpKind::kSend, grid.at(i, j - 1), MakeSlice(kRecvBuf, x.off, x.len), {}});
          }
          w.Add(std::move(st));
        }
        sum = kRecvBuf;
      }
    }
    // 2. The leaders' ring all-reduce (ring.cc's order) of the group sums, into recvbuf.
    if (j == 0 && g > 1) {
      const int next = grid.at(i + 1, 0), prev = grid.at(i - 1, 0);
      auto block = [&](int b) {
        ElemRange x = EvenPart(rc.len, g, Mod(b, g));
        x.off += rc.off;
        return x;
      };
      for (int k = 0; k < g - 1; ++k) {
        const ElemRange sb = block(i - k), rb = block(i - k - 1);
        Step st;
        AppendSends(st, next, k == 0 ? sum : uint16_t{kRecvBuf}, sb.off, sb.len, chunk);
        AppendRecvReduces(st, prev, sum, rb.off, kRecvBuf, rb.off, rb.len, chunk);
        w.Add(std::move(st));
      }
      for (int k = 0; k < g - 1; ++k) {
        const ElemRange sb = block(i + 1 - k), rb = block(i - k);
        Step st;
        AppendSends(st, next, kRecvBuf, sb.off, sb.len, chunk);
        AppendRecvs(st, prev, kRecvBuf, rb.off, rb.len, chunk);
        w.Add(std::move(st));
      }
    }
    // 3. Broadcast from the leader along 0 -> 1 -> ... -> M-1.
    if (m > 1) {
      if (j == 0) {
        Step st;
        AppendSends(st, grid.at(i, 1), kRecvBuf, rc.off, rc.len, chunk);
        w.Add(std::move(st));
      } else if (j == m - 1) {
        Step st;
        AppendRecvs(st, grid.at(i, j - 1), kRecvBuf, rc.off, rc.len, chunk);
        w.Add(std::move(st));
      } else {
        for (uint64_t t = 0; t <= ns; ++t) {
          Step st;
          if (t < ns) {
            const ElemRange x = slice(t);
            st.ops.push_back(StepOp{
                StepOpKind::kRecv, grid.at(i, j - 1), {}, MakeSlice(kRecvBuf, x.off, x.len)});
          }
          if (t > 0) {
            const ElemRange x = slice(t - 1);
            st.ops.push_back(StepOp{
                StepOpKind::kSend, grid.at(i, j + 1), MakeSlice(kRecvBuf, x.off, x.len), {}});
          }
          w.Add(std::move(st));
        }
      }
    }
  }
  return s;
}

class HierLeader final : public Algorithm {
 public:
  const char* name() const override { return "hier_leader"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllReduce && GroupGridFor(a).has_value();
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return Build(a, *GroupGridFor(a), rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& model) const override {
    auto grid = GroupGridFor(a);
    if (!grid || a.nranks <= 1) return 0;
    const int g = grid->g, M = grid->m;
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
    const uint64_t chunk = std::max<uint64_t>(a.chunk_bytes, 1);
    const uint64_t ns = std::max<uint64_t>((bytes + chunk - 1) / chunk, 1);
    const double slice = static_cast<double>(bytes) / static_cast<double>(ns);
    // Each chain: ns slices through M-1 links; the leaders' ring: 2(g-1) steps of S/g.
    const double chain = M > 1 ? static_cast<double>(ns + M - 2) *
                                     (model.intra.alpha_s + slice / model.intra.beta_bytes_s)
                               : 0;
    const int nch = ChannelsFor(a, a.count, bytes);
    const double ring =
        g > 1 ? 2.0 * (g - 1) *
                    TransferSeconds((bytes + g - 1) / g, a.chunk_bytes, NodeLink(model, 1), nch)
              : 0;
    return 2 * chain + ring;
  }
};

}  // namespace

const Algorithm& HierLeaderAlgorithm() {
  static const HierLeader algo;
  return algo;
}

}  // namespace braid
