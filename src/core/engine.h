// The progress engine (DESIGN.md 2.2): one thread per communicator runs the submitted operations
// in order. For each it builds this rank's schedule (via the tuner), then drives every channel's
// steps over the endpoints until done, failed, aborted or stalled past the deadline. Waiting
// spins briefly, then yields, then sleeps in poll() on the transports' fds and the doorbell, so
// eight ranks on two cores do not starve each other and an idle communicator uses no CPU.
#pragma once

#include <sys/eventfd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/schedule.h"
#include "core/operation.h"
#include "core/status.h"
#include "core/wire_header.h"

struct braidComm;

namespace braid {

class Engine {
 public:
  // `comm` is a non-owning back-pointer; the communicator owns the engine and outlives it.
  explicit Engine(braidComm* comm);
  ~Engine();  // stops the thread; pending operations complete with an aborted error

  void submit(std::shared_ptr<Operation> op);
  // Runs `op` on the calling thread when nothing else is queued or running, and returns true
  // (the op is then complete). Blocking calls use it: it saves two thread hand-offs per call,
  // which dominate small-message latency when ranks outnumber cores.
  bool tryRunInline(Operation& op);
  // Makes the running and all queued operations fail with `reason` as soon as possible.
  void abort(const Status& reason);
  // Blocks until every submitted operation has completed or `deadline`; true when all done.
  bool drain(Deadline deadline);

 private:
  struct Buffers;
  struct ChannelState;

  void threadMain();
  // Runs one operation. `*streams_intact` tells, on failure, whether every stream is still at a
  // message boundary (nothing moved, as after a call-agreement conflict): then the communicator
  // stays usable; otherwise it is failed and its streams are shut down.
  Status execute(Operation& op, bool* streams_intact);
  // execute() with the communicator's error handling; the caller owns busy_.
  Status executeChecked(Operation& op);
  Status run(Operation& op, const RankSchedule& sched, Buffers& bufs);
  Result<RankSchedule> buildSchedule(const OpDesc& d, CollArgs* args, std::string* algo_name);
  // Advances op `i` of the current step of a channel as far as the transports allow.
  using AdvanceFn = std::function<Status(ChannelState&, size_t, bool* moved)>;
  // The progress loop for one schedule: advances every channel until all are done, the deadline
  // passes without progress, or the engine is aborted; waits spin, yield, then sleep in poll().
  Status drive(std::vector<ChannelState>& chans, const AdvanceFn& advance,
               const std::function<std::string()>& context);
  // The call agreement of a collective (see CallConflict in wire_header.h): InvalidUsage on every
  // rank, naming both calls, when any two ranks' signatures differ.
  Status agree(const WireHeader& proto, const std::function<std::string()>& context);
  void sleepUntilProgress(std::vector<ChannelState>& channels, int64_t budget_ms);

  braidComm* comm_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable drained_cv_;
  std::deque<std::shared_ptr<Operation>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::atomic<bool> aborted_{false};
  Status abort_reason_;
  int wake_fd_ = -1;  // eventfd: abort() wakes a sleeping run()

  // Buffers reused across operations (they only grow).
  std::vector<std::byte> scratch_;
  std::vector<std::byte> premul_input_;
  uint64_t coll_seq_ = 0;
  std::vector<uint64_t> p2p_send_seq_;
  std::vector<uint64_t> p2p_recv_seq_;
};

}  // namespace braid
