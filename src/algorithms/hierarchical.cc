#include "algorithms/hierarchical.h"

#include <algorithm>
#include <utility>

#include "algorithms/cost_model.h"

namespace braid {

std::optional<GroupGrid> GroupGridFor(const CollArgs& a) {
  const int n = a.nranks;
  if (n < 1) return std::nullopt;
  GroupGrid grid;
  const GroupLayout* l = a.layout;
  if (!l) {
    grid.g = 1;
    grid.m = n;
    for (int r = 0; r < n; ++r) {
      grid.rank_of.push_back(r);
      grid.group_of.push_back(0);
      grid.pos_of.push_back(r);
    }
    return grid;
  }
  if (l->nnodes < 1 || static_cast<int>(l->node_of.size()) != n ||
      static_cast<int>(l->local_rank.size()) != n || n % l->nnodes != 0)
    return std::nullopt;
  grid.g = l->nnodes;
  grid.m = n / l->nnodes;
  grid.rank_of.assign(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    const int i = l->node_of[r], j = l->local_rank[r];
    // A node with more than m ranks shows as a local rank >= m; one with fewer leaves a hole.
    if (i < 0 || i >= grid.g || j < 0 || j >= grid.m) return std::nullopt;
    int& slot = grid.rank_of[static_cast<size_t>(i) * grid.m + j];
    if (slot != -1) return std::nullopt;  // two ranks at one (node, local rank)
    slot = r;
  }
  grid.group_of = l->node_of;
  grid.pos_of = l->local_rank;
  return grid;
}

void LaneWriter::Add(Step&& step) {
  if (step.ops.empty()) return;  // its edges stay pending for the next step
  for (const StepRef& d : pending_)
    if (std::find(step.deps.begin(), step.deps.end(), d) == step.deps.end()) step.deps.push_back(d);
  pending_.clear();
  s_->channels[ch_].steps.push_back(std::move(step));
}

std::optional<StepRef> LaneWriter::Mark() const {
  const auto& steps = s_->channels[ch_].steps;
  if (steps.empty()) return std::nullopt;
  return StepRef{ch_, static_cast<uint32_t>(steps.size() - 1)};
}

void SendUnit(Step& st, int peer, const Unit& u, uint64_t chunk) {
  for (const Piece& p : u) AppendSends(st, peer, p.buf, p.off, p.len, chunk);
}

void RecvUnit(Step& st, int peer, const Unit& u, uint64_t chunk) {
  for (const Piece& p : u) AppendRecvs(st, peer, p.buf, p.off, p.len, chunk);
}

void RecvReduceUnit(Step& st, int peer, const Unit& local, const Unit& dst, uint64_t chunk) {
  for (size_t k = 0; k < dst.size(); ++k)
    AppendRecvReduces(st, peer, local[k].buf, local[k].off, dst[k].buf, dst[k].off, dst[k].len,
                      chunk);
}

void CopyUnit(Step& st, const Unit& src, const Unit& dst) {
  for (size_t k = 0; k < dst.size(); ++k)
    AppendCopy(st, src[k].buf, src[k].off, dst[k].buf, dst[k].off, dst[k].len);
}

void RingAllGatherSteps(LaneWriter& w, int K, int p, int next, int prev,
                        const std::function<Unit(int x, bool sending)>& where, uint64_t chunk,
                        std::vector<StepOp> first_ops) {
  for (int u = 0; u < K - 1; ++u) {
    Step st;
    SendUnit(st, next, where(Mod(p - u, K), true), chunk);
    if (u == 0)
      for (StepOp& op : first_ops) st.ops.push_back(op);
    RecvUnit(st, prev, where(Mod(p - u - 1, K), false), chunk);
    w.Add(std::move(st));
  }
}

void RingReduceScatterSteps(LaneWriter& w, int K, int p, int next, int prev,
                            const std::function<Unit(int x)>& input,
                            const std::function<Unit(int u, int x)>& partial, uint64_t chunk) {
  for (int u = 0; u < K - 1; ++u) {
    Step st;
    const int sx = Mod(p - u - 1, K), rx = Mod(p - u - 2, K);
    SendUnit(st, next, u == 0 ? input(sx) : partial(u - 1, sx), chunk);
    RecvReduceUnit(st, prev, input(rx), partial(u, rx), chunk);
    w.Add(std::move(st));
  }
}

std::vector<ElemRange> BlockTable(BlockLayout layout, const GroupGrid& grid, uint64_t count,
                                  const ElemRange& rc) {
  const int n = grid.g * grid.m;
  std::vector<ElemRange> b(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    switch (layout) {
      case BlockLayout::kPerRank:
        b[r] = {static_cast<uint64_t>(r) * count + rc.off, rc.len};
        break;
      case BlockLayout::kEvenByRank:
        b[r] = EvenPart(rc.len, static_cast<uint64_t>(n), static_cast<uint64_t>(r));
        b[r].off += rc.off;
        break;
      case BlockLayout::kColumns: {
        const ElemRange col = EvenPart(rc.len, grid.m, grid.pos_of[r]);
        b[r] = EvenPart(col.len, grid.g, grid.group_of[r]);
        b[r].off += rc.off + col.off;
        break;
      }
    }
  }
  return b;
}

uint64_t MaxLen(const std::vector<ElemRange>& blocks) {
  uint64_t m = 0;
  for (const ElemRange& b : blocks) m = std::max(m, b.len);
  return m;
}

double RingPhaseSeconds(int steps, int pieces, uint64_t bytes, int nch, uint64_t chunk_bytes,
                        const LinkParams& link) {
  if (steps <= 0 || pieces <= 0) return 0;
  return static_cast<double>(steps) * pieces * TransferSeconds(bytes, chunk_bytes, link, nch);
}

}  // namespace braid
