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
  status_ = std::move(status);
  // Dekker with wait(): this stores done_ before it reads waiters_, a sleeper counts itself in
  // waiters_ before it reads done_ (all seq_cst): either the sleeper sees done_, or this sees the
  // sleeper and wakes it under the lock (which orders the wake-up after the sleeper's check).
  // Most operations have no sleeper (the caller drove it, or polls done()), and skipping the
  // lock and the broadcast saves a small call about 150 instructions.
  done_.store(true);
  if (waiters_.load() == 0) return;
  { std::lock_guard<std::mutex> lock(mu_); }
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
  waiters_.fetch_add(1);
  bool finished;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (deadline.at() == Clock::time_point::max()) {
      cv_.wait(lock, [&] { return done_.load(); });
      finished = true;
    } else {
      finished = cv_.wait_until(lock, deadline.at(), [&] { return done_.load(); });
    }
  }
  waiters_.fetch_sub(1);
  return finished;
}

}  // namespace braid
