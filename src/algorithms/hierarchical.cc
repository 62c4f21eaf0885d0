#include "algorithms/hierarchical.h"

#include <algorithm>
#include <utility>

#include "algorithms/cost_model.h"

namespace braid {

namespace {

// The third level of `grid` from the layout's device groups (GroupGridFor's contract).
bool AddDeviceGroups(const GroupLayout& l, GroupGrid* grid) {
  const int n = grid->g * grid->m, m = grid->m;
  if (static_cast<int>(l.dgroup_of.size()) != n) return false;
  std::vector<int> pp(static_cast<size_t>(m), -1), dd(static_cast<size_t>(m), -1);
  int p = 0;
  std::vector<int> fill;  // per device group: ranks placed so far
  for (int j = 0; j < m; ++j) {
    const int dg = l.dgroup_of[grid->rank_of[j]];
    if (dg < 0 || dg >= m) return false;
    if (dg >= p) {
      p = dg + 1;
      fill.resize(static_cast<size_t>(p), 0);
    }
    pp[j] = dg;
    dd[j] = fill[dg]++;
  }
  const int d = m / std::max(p, 1);
  if (p < 2 || d < 2 || p * d != m) return false;
  for (int c : fill)
    if (c != d) return false;
  for (int i = 1; i < grid->g; ++i)  // every group placed alike
    for (int j = 0; j < m; ++j)
      if (l.dgroup_of[grid->rank_of[static_cast<size_t>(i) * m + j]] != pp[j]) return false;
  grid->p = p;
  grid->d = d;
  grid->pp_of = std::move(pp);
  grid->dd_of = std::move(dd);
  grid->local_at.assign(static_cast<size_t>(m), -1);
  for (int j = 0; j < m; ++j) grid->local_at[grid->pp_of[j] * d + grid->dd_of[j]] = j;
  return true;
}

}  // namespace

std::optional<GroupGrid> GroupGridFor(const CollArgs& a, bool device_groups) {
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
  if (device_groups && !AddDeviceGroups(*l, &grid)) return std::nullopt;
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

void GroupAllGatherSteps(LaneWriter& w, const GroupGrid& grid, int i, int j,
                         const std::function<Unit(int x, bool sending)>& where, uint64_t chunk,
                         std::vector<StepOp> first_ops) {
  if (!grid.three_level()) {
    RingAllGatherSteps(w, grid.m, j, grid.at(i, j + 1), grid.at(i, j - 1), where, chunk,
                       std::move(first_ops));
    return;
  }
  const int pp = grid.pp_of[j], dd = grid.dd_of[j];
  auto rank = [&](int64_t a, int64_t b) { return grid.at(i, grid.local(a, b)); };
  // Across device groups, one item per step: item z is local rank (z, dd)'s.
  RingAllGatherSteps(
      w, grid.p, pp, rank(pp + 1, dd), rank(pp - 1, dd),
      [&](int z, bool sending) { return where(grid.local(z, dd), sending); }, chunk,
      std::move(first_ops));
  // Inside the device group, the p items of one position per step.
  RingAllGatherSteps(
      w, grid.d, dd, rank(pp, dd + 1), rank(pp, dd - 1),
      [&](int y, bool sending) {
        Unit u;
        for (int z = 0; z < grid.p; ++z) {
          u.append(where(grid.local(z, y), sending));
        }
        return u;
      },
      chunk);
}

int GroupReduceScatterSlots(const GroupGrid& grid) {
  if (!grid.three_level()) return grid.m > 2 ? 2 : 0;
  return (grid.d > 2 ? 2 * grid.p : 0) + grid.p + (grid.p > 2 ? 2 : 0);
}

void GroupReduceScatterSteps(LaneWriter& w, const GroupGrid& grid, int i, int j,
                             const std::function<Unit(int x)>& input,
                             const std::function<Unit(int k, int x)>& slot, const Unit& out,
                             uint64_t chunk) {
  if (!grid.three_level()) {
    const int m = grid.m;
    RingReduceScatterSteps(
        w, m, j, grid.at(i, j + 1), grid.at(i, j - 1), input,
        [&](int u, int x) { return u == m - 2 ? out : slot(u % 2, x); }, chunk);
    return;
  }
  const int p = grid.p, d = grid.d, pp = grid.pp_of[j], dd = grid.dd_of[j];
  auto rank = [&](int64_t a, int64_t b) { return grid.at(i, grid.local(a, b)); };
  // Slots: two alternating sets of p for the device-group ring's partial sums (d > 2), p for
  // its result (the device group's sums of items (z, dd)), two for the ring across groups.
  const int alt_a = 0, res = d > 2 ? 2 * p : 0, alt_b = res + p;
  auto concat = [&](int y, const std::function<Unit(int z, int x)>& part) {
    Unit u;
    for (int z = 0; z < p; ++z) {
      u.append(part(z, grid.local(z, y)));
    }
    return u;
  };
  // Inside the device group: item y is the p items of position y.
  RingReduceScatterSteps(
      w, d, dd, rank(pp, dd + 1), rank(pp, dd - 1),
      [&](int y) { return concat(y, [&](int, int x) { return input(x); }); },
      [&](int u, int y) {
        const int base = u == d - 2 ? res : alt_a + (u % 2) * p;
        return concat(y, [&](int z, int x) { return slot(base + z, x); });
      },
      chunk);
  // Across device groups, among the ranks of position dd.
  RingReduceScatterSteps(
      w, p, pp, rank(pp + 1, dd), rank(pp - 1, dd),
      [&](int z) { return slot(res + z, grid.local(z, dd)); },
      [&](int u, int z) { return u == p - 2 ? out : slot(alt_b + u % 2, grid.local(z, dd)); },
      chunk);
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

double GroupPhaseSeconds(const GroupGrid& grid, int pieces, uint64_t bytes, int nch,
                         uint64_t chunk_bytes, const LinkModel& model) {
  if (!grid.three_level())
    return RingPhaseSeconds(grid.m - 1, pieces, bytes, nch, chunk_bytes, model.intra);
  return RingPhaseSeconds(grid.p - 1, pieces, bytes, nch, chunk_bytes, model.intra) +
         RingPhaseSeconds(grid.d - 1, pieces * grid.p, bytes, nch, chunk_bytes,
                          model.of(LinkClass::kDeviceGroup));
}

double RingPhaseSeconds(int steps, int pieces, uint64_t bytes, int nch, uint64_t chunk_bytes,
                        const LinkParams& link) {
  if (steps <= 0 || pieces <= 0) return 0;
  return static_cast<double>(steps) * pieces * TransferSeconds(bytes, chunk_bytes, link, nch);
}

}  // namespace braid
