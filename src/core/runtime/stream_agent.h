// Stream-ordered calls (issue 39; DESIGN.md 2.5): a collective on device buffers, called with a
// device stream, returns at once; it starts only after the work queued on the stream before it,
// and the work queued after it sees its result, with no host synchronisation by the caller.
//
// One agent per communicator: a thread that runs the communicator's stream-ordered calls in
// submission order (the same on every rank, as every collective's order). submit() takes a flag
// pair from the StreamFlagPool and queues on each of the call's streams a write of `ready` and a
// wait for `done`, then queues the call for the agent. The agent sleeps until `ready` (the
// stream's earlier work is done), runs the call with braid's blocking API on host-accessible
// buffers, and writes `done`, which releases the stream.
//
// Host access: where device memory is not host memory (a GPU, the emulated device's default), the
// call's device buffers are staged through one pinned host buffer of the agent's with the
// runtime's copies on a stream of the agent's: regions read by the call are copied in before it,
// regions it writes are copied out after it. A whole-buffer copy before the collective starts, not
// yet the chunked pipeline issue 39 asks for across nodes (copies overlapping the wire).
//
// Failures never hang a stream: a call that fails, or that cannot run (the communicator failed
// earlier, the agent is aborted), still writes `done`. The first failure is kept (error()) and
// returned by every later submit(): the stream's later calls did not run, as after an NCCL
// asynchronous error.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/stream_flag_pool.h"
#include "device/device_runtime.h"

namespace braid {

// One buffer of a call, as the call uses it.
struct StreamBuffer {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool read = false;     // the call reads it
  bool written = false;  // the call writes all of it when it succeeds
  device::PointerInfo info;
};

// Where each user pointer of a call is for the host while the call runs: the staging copy of a
// device buffer, or the pointer itself. Pointers inside a buffer map with the same offset.
class HostPointers {
 public:
  void* operator()(const void* user) const;

 private:
  friend class StreamAgent;
  struct Range {
    uintptr_t start, end;
    char* host;
  };
  std::vector<Range> ranges_;
};

struct StreamCall {
  std::string what;                           // "ncclAllReduce", for messages
  std::vector<device::StreamHandle> streams;  // the streams it is ordered on (at least one)
  std::vector<StreamBuffer> buffers;
  std::function<Status(const HostPointers&)> run;
};

class StreamAgent {
 public:
  // `name` tells the agent's messages apart ("rank 1/4"). The runtime outlives every agent.
  // `pool`: where its flags come from; null = the process's pool for `runtime` (tests that make
  // and destroy runtimes bring their own).
  StreamAgent(device::DeviceRuntime* runtime, std::string name, StreamFlagPool* pool = nullptr);
  // Waits for the queued calls (drain()) unless abort() was called, then stops the thread.
  ~StreamAgent();
  StreamAgent(const StreamAgent&) = delete;
  StreamAgent& operator=(const StreamAgent&) = delete;

  // Checks the call (streams, buffer ranges), orders it on its streams and queues it. Returns at
  // once. Errors: the argument's (InvalidArgument, nothing queued), or the agent's kept error.
  Status submit(StreamCall call);
  // Several calls, each for its agent (a group over several communicators), ordered on their
  // streams together: every call's write of `ready` on every stream is queued before any wait for
  // `done`, so ranks that list the communicators in different orders cannot deadlock (one stream
  // waiting for A's `done` before it wrote B's `ready`, while a peer does the opposite). All or
  // nothing: on an error no call is queued (streams already ordered are released).
  static Status submitGroup(std::vector<std::pair<StreamAgent*, StreamCall>> calls);
  // Runs `job` on the agent's thread after every call queued before it, whatever their outcome
  // (also after an abort or a failure). For what must outlive the queued calls but not the
  // communicator (ncclRedOpDestroy of an operator they use). Runs it at once when stopped.
  void runAfterQueued(std::function<void()> job);
  // Waits until every submitted call has completed (their streams must make progress); returns
  // the kept error.
  Status drain();
  // From now on no call starts: the queued ones fail at once (their `done` written), a call
  // waiting for `ready` stops waiting. A call already running returns when the communicator is
  // aborted (the caller's next step). The destructor then joins without draining.
  void abort(const std::string& why);
  // The first failure (ok while none).
  Status error();
  // Stops the agent whatever the number of references to it (a thread polling the
  // communicator's error may hold one during ncclCommDestroy): without `abort`, waits for the
  // queued calls first (drain()); with it, abort(why) first. Then joins the thread. Idempotent;
  // later submits fail. Destroy, finalize and abort call it; the destructor calls shutdown(false).
  void shutdown(bool abort, const std::string& why = "");

 private:
  struct Pending {
    StreamCall call;
    std::vector<StreamFlagSlot> slots;  // one per stream
    void* context = nullptr;
    std::function<void()> host_job;  // runAfterQueued's (no call, no slots)
  };

  void loop();
  void execute(Pending& p);
  Status stage(Pending& p, HostPointers* map,
               std::vector<std::pair<const StreamBuffer*, char*>>* out);
  // Writes `done` for every slot; slots whose `ready` was seen go back to the pool.
  void release(Pending& p, bool ready_seen);
  void fail(Status s);

  device::DeviceRuntime* const runtime_;
  StreamFlagPool& pool_;  // process lifetime, or the test's
  const std::string name_;

  std::mutex mu_;
  std::condition_variable cv_;       // work queued, stop or abort
  std::condition_variable drained_;  // a call completed
  std::deque<Pending> queue_;
  uint64_t submitted_ = 0, completed_ = 0;
  bool stop_ = false;
  bool joined_ = false;  // shutdown() joined the thread (under join_mu_)
  std::mutex join_mu_;
  bool aborted_ = false;
  std::string abort_reason_;
  Status error_;

  // The agent thread's own: its copy stream and the pinned staging buffer.
  device::StreamHandle copy_stream_ = nullptr;
  bool have_copy_stream_ = false;
  char* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  // Staging buffers outgrown, freed only when the thread ends: freeing pinned memory
  // (cuMemFreeHost) synchronises the device, and a user's stream may be waiting for `done` right
  // now: the free would wait for the stream, the stream for the agent.
  std::vector<char*> retired_;

  std::thread thread_;
};

}  // namespace braid
