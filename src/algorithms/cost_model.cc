#include "algorithms/cost_model.h"

#include <algorithm>
#include <limits>

namespace braid {

const LinkParams& LinkBetween(const CollArgs& args, const LinkModel& model, int a, int b) {
  const GroupLayout* l = args.layout;
  if (!l || l->nnodes <= 1) return model.intra;
  const int n = static_cast<int>(l->node_of.size());
  if (a < 0 || b < 0 || a >= n || b >= n) return model.inter;
  return l->node_of[a] == l->node_of[b] ? model.intra : model.inter;
}

const LinkParams& FlatLink(const CollArgs& args, const LinkModel& model) {
  const GroupLayout* l = args.layout;
  if (!l || l->nnodes <= 1) return model.intra;
  for (size_t i = 1; i < l->node_of.size(); ++i)
    if (l->node_of[i] != l->node_of[0]) return model.inter;
  return model.intra;
}

double TransferSeconds(uint64_t bytes, uint64_t chunk_bytes, const LinkParams& link) {
  const uint64_t chunk = std::max<uint64_t>(chunk_bytes, 1);
  const uint64_t msgs = std::max<uint64_t>((bytes + chunk - 1) / chunk, 1);
  return static_cast<double>(msgs) * link.alpha_s + static_cast<double>(bytes) / link.beta_bytes_s;
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

double EstimateFromRankSchedule(const Algorithm& algo, const CollArgs& args,
                                const LinkModel& model) {
  auto sched = algo.build(args, 0);
  if (!sched.ok()) return std::numeric_limits<double>::infinity();
  const uint64_t esize = DataTypeSize(args.dtype);
  double longest_channel = 0, send_port = 0, recv_port = 0;
  for (const Channel& ch : sched->channels) {
    double t = 0;
    for (const Step& st : ch.steps) {
      double s = 0, r = 0;
      for (const StepOp& op : st.ops) {
        if (op.kind == StepOpKind::kSend) {
          const LinkParams& l = LinkBetween(args, model, 0, op.peer);
          s += l.alpha_s + static_cast<double>(op.src.count * esize) / l.beta_bytes_s;
        } else if (op.kind == StepOpKind::kRecv || op.kind == StepOpKind::kRecvReduce) {
          const LinkParams& l = LinkBetween(args, model, op.peer, 0);
          r += l.alpha_s + static_cast<double>(op.dst.count * esize) / l.beta_bytes_s;
        }
      }
      t += std::max(s, r);
      send_port += s;
      recv_port += r;
    }
    longest_channel = std::max(longest_channel, t);
  }
  // Channels run concurrently but share the rank's two ports.
  return std::max({longest_channel, send_port, recv_port});
}

double Algorithm::estimate_seconds(const CollArgs& args, const LinkModel& model) const {
  return EstimateFromRankSchedule(*this, args, model);
}

}  // namespace braid
