#include "core/runtime/operation.h"

#include "algorithms/codec.h"

#include <sched.h>

namespace braid {

std::string DescribeCall(const OpDesc& d) {
  std::string s = CollKindName(d.kind);
  if (d.kind == CollKind::kSendRecv) {
    int sends = 0, recvs = 0;
    for (const auto& c : d.p2p) (c.is_send ? sends : recvs)++;
    return "send/recv group(" + std::to_string(sends) + " sends, " + std::to_string(recvs) +
           " recvs)";
  }
  if (d.kind == CollKind::kBarrier) return s;
  s += "(count=" + std::to_string(d.count) + ", " + DataTypeName(d.dtype);
  bool reduces = d.kind == CollKind::kAllReduce || d.kind == CollKind::kReduceScatter ||
                 d.kind == CollKind::kReduce;
  if (reduces) {
    if (d.avg)
      s += ", avg";
    else if (d.premul)
      s += ", premulsum";
    else
      s += std::string(", ") + ReduceOpName(d.base_op);
  }
  if (d.kind == CollKind::kBroadcast || d.kind == CollKind::kReduce)
    s += ", root=" + std::to_string(d.root);
  if (d.codec.id != CodecId::kNone) s += ", quantized " + CodecName(d.codec);
  return s + ")";
}

void Operation::complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool Operation::wait(Deadline deadline, int64_t spin_us) {
  if (done()) return true;
  // A short spin catches small operations without paying for a futex sleep and wake-up.
  int64_t until = NowMicros() + spin_us;
  while (NowMicros() < until) {
    if (done()) return true;
    sched_yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline.at() == Clock::time_point::max()) {
    cv_.wait(lock, [&] { return done(); });
    return true;
  }
  return cv_.wait_until(lock, deadline.at(), [&] { return done(); });
}

}  // namespace braid
