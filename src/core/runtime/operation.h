// One call of the API as the engine sees it: what was asked, and how it ended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "core/base/clock.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

struct braidComm;

namespace braid {

// One send or receive of a group of point-to-point calls.
struct P2PCall {
  bool is_send = false;
  void* buf = nullptr;  // const for sends
  uint64_t count = 0;   // elements
  DataType dtype = DataType::kUint8;
  int peer = -1;
};

struct OpDesc {
  CollKind kind = CollKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  int user_op = braidSum;  // braidRedOp_t as called (premul ops keep their id for messages)
  ReduceOp base_op = ReduceOp::kSum;
  bool avg = false;     // divide by nranks after the sum
  bool premul = false;  // multiply each input by `scalar` first
  uint8_t scalar[8] = {};
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  uint64_t count = 0;
  int root = -1;
  bool in_place = false;
  std::vector<P2PCall> p2p;  // kSendRecv only
  Codec codec;               // quantized collectives: the block codec (CollArgs::codec)
};

// "allreduce(count=1024, float, sum)"
std::string DescribeCall(const OpDesc& d);

// Whether two collective calls get the same plan on one communicator: everything CollArgsFor
// reads of a call (the rest of it is the communicator's, fixed at init).
inline bool SamePlanShape(const OpDesc& a, const OpDesc& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.base_op == b.base_op && a.avg == b.avg &&
         a.premul == b.premul && a.count == b.count && a.root == b.root &&
         a.in_place == b.in_place && a.codec == b.codec;
}

class Operation {
 public:
  explicit Operation(OpDesc desc) : desc_(std::move(desc)) {}
  const OpDesc& desc() const { return desc_; }
  // The communicator the call was made on (set by braidComm::submit / runInline). A split view
  // runs its operations on its root's engine; the engine reads ranks, numbering and algorithms
  // from the owner. The owner outlives the operation (braidComm waits for its operations).
  braidComm* owner() const { return owner_; }
  void setOwner(braidComm* c) { owner_ = c; }

  void complete(Status status);
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits until done or `deadline`; returns true when done. Spins `spin_us` first.
  bool wait(Deadline deadline, int64_t spin_us);
  // Valid once done().
  const Status& status() const { return status_; }
  // Whether a caller's thread is held until this operation completes (a blocking call, a group's
  // end, a wait without a deadline on its request): that thread issues nothing meanwhile, which
  // is what makes a wait cycle through it a deadlock (Engine::p2pDeadlock). Any thread.
  bool callerBlocked() const { return blocked_callers_.load(std::memory_order_acquire) > 0; }
  // Marks the caller's thread held on `ops` (one operation, or a group's batch) for its own
  // lifetime.
  class HeldCaller {
   public:
    explicit HeldCaller(Operation& op) : one_(&op) { one_->blocked_callers_.fetch_add(1); }
    explicit HeldCaller(std::span<const std::shared_ptr<Operation>> ops) : ops_(ops) {
      for (const auto& op : ops_) op->blocked_callers_.fetch_add(1);
    }
    ~HeldCaller() {
      if (one_) one_->blocked_callers_.fetch_sub(1);
      for (const auto& op : ops_) op->blocked_callers_.fetch_sub(1);
    }
    HeldCaller(const HeldCaller&) = delete;
    HeldCaller& operator=(const HeldCaller&) = delete;

   private:
    Operation* one_ = nullptr;
    std::span<const std::shared_ptr<Operation>> ops_;
  };

 private:
  OpDesc desc_;
  braidComm* owner_ = nullptr;
  std::atomic<bool> done_{false};
  std::atomic<int> waiters_{0};          // callers asleep in wait() (or about to be)
  std::atomic<int> blocked_callers_{0};  // HeldCaller
  Status status_;
  std::mutex mu_;
  std::condition_variable cv_;
};

// What became of a non-blocking call offered to start on the caller's thread (Engine::startCall).
enum class CallStart {
  kCompleted,  // it ran to its end there: no operation was made
  kTaken,      // it goes on in the operation MakeOperation built (waiting, active or queued)
};
// Builds the operation a started call goes on in, from its description (moved), with whatever
// the caller keeps beside it (its request: api_submit.cc). May throw std::bad_alloc.
using MakeOperation = std::shared_ptr<Operation> (*)(OpDesc&& d, void* ctx);

}  // namespace braid
