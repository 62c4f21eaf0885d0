#include "algorithms/cost_model.h"
#include "algorithms/device_staging.h"
#include "algorithms/lowering.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace braid {

LinkClass LinkClassBetween(const GroupLayout* layout, int a, int b) {
  if (!layout) return LinkClass::kIntraNode;
  const int n = static_cast<int>(layout->node_of.size());
  if (layout->nnodes <= 1 && static_cast<int>(layout->dgroup_of.size()) != n)
    return LinkClass::kIntraNode;
  if (a < 0 || b < 0 || a >= n || b >= n) return LinkClass::kInterNode;
  if (layout->node_of[a] != layout->node_of[b]) return LinkClass::kInterNode;
  const auto& dg = layout->dgroup_of;
  const bool grouped = static_cast<int>(dg.size()) == n && dg[a] >= 0 && dg[a] == dg[b];
  return grouped ? LinkClass::kDeviceGroup : LinkClass::kIntraNode;
}

const LinkParams& LinkBetween(const CollArgs& args, const LinkModel& model, int a, int b) {
  return model.of(LinkClassBetween(args.layout, a, b));
}

LinkParams SharedLink(const LinkParams& link, int k) {
  if (k <= 1) return link;
  return {link.alpha_s * k, link.beta_bytes_s / k};
}

LinkParams NodeLink(const LinkModel& model, int k) {
  const int nics = std::max(model.nics_per_node, 1);
  return SharedLink(model.nic(), (std::max(k, 1) + nics - 1) / nics);
}

namespace {

// Whether args.layout places every rank on one of several nodes.
bool PlacesOnNodes(const CollArgs& args) {
  const GroupLayout* l = args.layout;
  return l && l->nnodes > 1 && static_cast<int>(l->node_of.size()) >= args.nranks;
}

}  // namespace

int RanksPerNic(const CollArgs& args) {
  if (!PlacesOnNodes(args)) return 1;
  std::vector<int> count(static_cast<size_t>(args.layout->nnodes), 0);
  int most = 1;
  for (int r = 0; r < args.nranks; ++r) {
    const int node = args.layout->node_of[r];
    if (node >= 0 && node < args.layout->nnodes) most = std::max(most, ++count[node]);
  }
  return most;
}

int RingNicLoad(const CollArgs& args) {
  if (!PlacesOnNodes(args)) return 0;
  const auto& node_of = args.layout->node_of;
  std::vector<int> out(static_cast<size_t>(args.layout->nnodes), 0), in(out);
  int most = 0;
  for (int r = 0; r < args.nranks; ++r) {
    const int a = node_of[r], b = node_of[(r + 1) % args.nranks];
    if (a == b || a < 0 || b < 0 || a >= args.layout->nnodes || b >= args.layout->nnodes) continue;
    most = std::max({most, ++out[a], ++in[b]});
  }
  return most;
}

LinkParams PartnerLink(const CollArgs& args, const LinkModel& model,
                       int64_t (*partner)(int64_t r, int64_t d, int64_t n), int64_t d) {
  if (!PlacesOnNodes(args)) return model.intra;
  const auto& node_of = args.layout->node_of;
  const int nodes = args.layout->nnodes, n = args.nranks;
  std::vector<int> out(static_cast<size_t>(nodes), 0), in(out);
  int most = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t p = partner(r, d, n);
    if (p < 0 || p >= n) continue;  // no partner in this step (XOR beyond N)
    const int a = node_of[r], b = node_of[static_cast<size_t>(p)];
    if (a == b || a < 0 || b < 0 || a >= nodes || b >= nodes) continue;
    most = std::max({most, ++out[a], ++in[b]});
  }
  return most > 0 ? NodeLink(model, most) : model.intra;
}

LinkParams FlatLink(const CollArgs& args, const LinkModel& model) {
  if (OnOneNode(args)) return model.intra;
  const GroupLayout* l = args.layout;
  for (size_t i = 1; i < l->node_of.size(); ++i)
    if (l->node_of[i] != l->node_of[0]) return NodeLink(model, RanksPerNic(args));
  return model.intra;
}

LinkParams FlatRingLink(const CollArgs& args, const LinkModel& model) {
  const int load = RingNicLoad(args);
  if (load > 0) return NodeLink(model, load);
  return FlatLink(args, model);
}

double TransferSeconds(uint64_t bytes, uint64_t chunk_bytes, const LinkParams& link) {
  const uint64_t chunk = std::max<uint64_t>(chunk_bytes, 1);
  const uint64_t msgs = std::max<uint64_t>((bytes + chunk - 1) / chunk, 1);
  return static_cast<double>(msgs) * link.alpha_s + static_cast<double>(bytes) / link.beta_bytes_s;
}

double TransferSeconds(uint64_t bytes, uint64_t chunk_bytes, const LinkParams& link, int nch) {
  if (nch <= 1) return TransferSeconds(bytes, chunk_bytes, link);
  const uint64_t chunk = std::max<uint64_t>(chunk_bytes, 1);
  const uint64_t k = static_cast<uint64_t>(nch);
  // EvenPart: bytes % k channels get one byte more than the others.
  const uint64_t small = bytes / k, big = small + 1, nbig = bytes % k;
  auto msgs = [&](uint64_t part) { return (part + chunk - 1) / chunk; };
  const uint64_t total = std::max<uint64_t>(nbig * msgs(big) + (k - nbig) * msgs(small), 1);
  return static_cast<double>(total) * link.alpha_s + static_cast<double>(bytes) / link.beta_bytes_s;
}

int CeilLog2(int n) {
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return k;
}

int FloorLog2(int n) {
  int k = 0;
  while ((int64_t{2} << k) <= n) ++k;
  return k;
}

bool IsOneSidedSchedule(const RankSchedule& s) {
  for (const BufferDesc& b : s.buffers)
    if (b.role == BufferRole::kWindow) return true;
  for (const Channel& ch : s.channels)
    for (const Step& st : ch.steps)
      for (const StepOp& op : st.ops)
        if (IsOneSidedKind(op.kind)) return true;
  return false;
}

double OneSidedOpSeconds(const RankSchedule& s, const StepOp& op, const LinkModel& model) {
  if (IsTransferKind(op.kind) || op.kind == StepOpKind::kSignal || op.kind == StepOpKind::kWait ||
      op.kind == StepOpKind::kExpose)
    return 0;
  const Slice& sized = WritesDstKind(op.kind) ? op.dst : op.src;
  const auto bytes = static_cast<double>(sized.count * DataTypeSize(s.buffers[sized.buffer].dtype));
  // A device kernel's op: its bytes through the GPU (one kernel: no alpha of its own).
  if (s.device_kernels) return bytes / model.device_peer.beta_bytes_s;
  // A peer's exposed buffer (not a window) is read across processes.
  const auto across = [&](const Slice& sl) {
    return sl.remote() && s.buffers[sl.buffer].role != BufferRole::kWindow;
  };
  const bool pulled =
      (ReadsSrcKind(op.kind) && across(op.src)) || (ReadsSrc2Kind(op.kind) && across(op.src2));
  if (pulled) return model.cross_memory.alpha_s + bytes / model.cross_memory.beta_bytes_s;
  return bytes / model.board.beta_bytes_s;
}

double StagingCopySeconds(const RankSchedule& s, const StepOp& op, const LinkModel& model) {
  if (!IsStagingCopy(s, op)) return 0;
  const auto bytes =
      static_cast<double>(op.src.count * DataTypeSize(s.buffers[op.src.buffer].dtype));
  return model.staging.alpha_s + bytes / model.staging.beta_bytes_s;
}

// Rank 0's one-sided schedule walked in order: its data ops at their cost, a wait for a peer's
// post at the time this rank made the same post (the ranks run alike) plus the board's alpha.
double EstimateOneSided(const RankSchedule& s, const LinkModel& model) {
  double t = 0;
  std::vector<std::pair<int32_t, double>> posted;  // (value, when this rank signalled it)
  for (const Step& st : s.channels[0].steps) {
    double work = 0, ready = t;
    for (const StepOp& op : st.ops) {
      work += OneSidedOpSeconds(s, op, model);
      if (op.kind == StepOpKind::kSignal && op.counter == Counter::kPosted)
        posted.push_back({op.value, t});
      if (op.kind == StepOpKind::kWait && op.counter == Counter::kPosted && op.value >= 0)
        for (const auto& [v, when] : posted)
          if (v == op.value)
            ready = std::max(
                ready, when + (s.device_kernels ? model.device_peer.alpha_s : model.board.alpha_s));
    }
    t = std::max(t + work, ready);
  }
  return t;
}

double EstimateFromRankSchedule(const Algorithm& algo, const CollArgs& args,
                                const LinkModel& model) {
  auto sched = BuildSchedule(algo, args, 0);
  if (!sched.ok()) return std::numeric_limits<double>::infinity();
  if (IsOneSidedSchedule(*sched)) return EstimateOneSided(*sched, model);
  // Busy time per port over the whole schedule: [class][0] send, [class][1] receive.
  double port_total[kNumLinkClasses][2] = {};
  const int nic_share = RanksPerNic(args);
  double longest_channel = 0;
  for (const Channel& ch : sched->channels) {
    double t = 0;
    for (const Step& st : ch.steps) {
      double port[kNumLinkClasses][2] = {};
      for (const StepOp& op : st.ops) {
        const bool send = op.kind == StepOpKind::kSend;
        if (!send && op.kind != StepOpKind::kRecv && op.kind != StepOpKind::kRecvReduce) continue;
        const LinkClass c = LinkClassBetween(args.layout, 0, op.peer);
        const LinkParams l = c == LinkClass::kInterNode ? NodeLink(model, nic_share) : model.of(c);
        const Slice& sl = send ? op.src : op.dst;
        const uint64_t bytes = sl.count * DataTypeSize(sched->buffers[sl.buffer].dtype);
        port[static_cast<int>(c)][send ? 0 : 1] +=
            l.alpha_s + static_cast<double>(bytes) / l.beta_bytes_s;
      }
      double step = 0;
      for (int c = 0; c < kNumLinkClasses; ++c)
        for (int d = 0; d < 2; ++d) {
          step = std::max(step, port[c][d]);
          port_total[c][d] += port[c][d];
        }
      t += step;
    }
    longest_channel = std::max(longest_channel, t);
  }
  // Channels run concurrently but share the rank's ports of each class.
  double busiest_port = 0;
  for (const auto& p : port_total) busiest_port = std::max({busiest_port, p[0], p[1]});
  return std::max(longest_channel, busiest_port);
}

double Algorithm::estimate_seconds(const CollArgs& args, const LinkModel& model) const {
  return EstimateFromRankSchedule(*this, args, model);
}

}  // namespace braid
