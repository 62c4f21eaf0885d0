#include "nccl/peer_reduce_plan.h"

#include <algorithm>

namespace braid::nccl {

const char* KindName(int32_t k) {
  switch (static_cast<WindowKind>(k)) {
    case WindowKind::kAllReduce:
      return "all-reduce";
    case WindowKind::kAllGather:
      return "all-gather";
    case WindowKind::kReduceScatter:
      return "reduce-scatter";
    case WindowKind::kBroadcast:
      return "broadcast";
    case WindowKind::kReduce:
      return "reduce";
    case WindowKind::kAllToAll:
      return "all-to-all";
    case WindowKind::kGather:
      return "gather";
    case WindowKind::kScatter:
      return "scatter";
  }
  return "?";
}

namespace {

void SetOp(device::PeerReduce* r, ncclRedOp_t op, int nranks) {
  r->op = op == ncclAvg ? ReduceOp::kSum : static_cast<ReduceOp>(op);
  r->divide_by = op == ncclAvg ? static_cast<uint64_t>(nranks) : 0;
}

}  // namespace

device::PeerReduce Build(const Plan& c, const PeerAt& send_of, const PeerAt& recv_of) {
  const size_t elt = c.elt();
  device::PeerReduce r;
  r.type = static_cast<DataType>(c.type);
  if (c.reduces()) SetOp(&r, c.op, c.nranks);
  switch (c.kind) {
    case WindowKind::kAllReduce: {
      const size_t group = 64 / elt;
      const size_t per = ((c.count + c.nranks - 1) / c.nranks + group - 1) / group * group;
      const size_t lo = std::min(c.count, per * static_cast<size_t>(c.rank));
      r.count = std::min(c.count, lo + per) - lo;
      for (int k = 0; k < c.nranks; ++k) {
        r.src.push_back(send_of(k) + lo * elt);
        r.dst.push_back(recv_of(k) + lo * elt);
      }
      break;
    }
    case WindowKind::kAllGather:
      r.count = c.count;
      r.src.push_back(c.send);
      for (int k = 0; k < c.nranks; ++k)
        r.dst.push_back(recv_of(k) + c.count * elt * static_cast<size_t>(c.rank));
      break;
    case WindowKind::kReduceScatter:
      r.count = c.count;
      for (int k = 0; k < c.nranks; ++k)
        r.src.push_back(send_of(k) + c.count * elt * static_cast<size_t>(c.rank));
      r.dst.push_back(c.recv);
      break;
    case WindowKind::kBroadcast:
      if (c.rank == c.root) {
        r.count = c.count;
        r.src.push_back(c.send);
        for (int k = 0; k < c.nranks; ++k) r.dst.push_back(recv_of(k));
      }
      break;
    case WindowKind::kReduce:
      if (c.rank == c.root) {
        r.count = c.count;
        for (int k = 0; k < c.nranks; ++k) r.src.push_back(send_of(k));
        r.dst.push_back(c.recv);
      }
      break;
    case WindowKind::kAllToAll: {
      const size_t block = c.count * elt;
      r.count = c.count;
      r.pairwise = true;
      for (int j = 0; j < c.nranks; ++j) {
        r.src.push_back(static_cast<const char*>(c.send) + block * static_cast<size_t>(j));
        r.dst.push_back(recv_of(j) + block * static_cast<size_t>(c.rank));
      }
      break;
    }
    case WindowKind::kGather:
      r.count = c.count;
      r.src.push_back(c.send);
      r.dst.push_back(recv_of(c.root) + c.count * elt * static_cast<size_t>(c.rank));
      break;
    case WindowKind::kScatter:
      r.count = c.count;
      r.src.push_back(send_of(c.root) + c.count * elt * static_cast<size_t>(c.rank));
      r.dst.push_back(c.recv);
      break;
  }
  return r;
}

}  // namespace braid::nccl
