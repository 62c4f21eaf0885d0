#include "core/runtime/stream_agent.h"

#include <algorithm>
#include <chrono>

#include "core/base/log.h"

namespace braid {

namespace {

// A call waiting for `ready` re-checks for an abort this often (the wait itself sleeps).
constexpr std::chrono::milliseconds kReadySlice{100};
// Staged regions are padded to this (each starts aligned for any element type and copy engine).
constexpr size_t kStagingAlign = 256;
// How long the agent's end waits for the staging buffers' copies out before freeing them.
constexpr std::chrono::seconds kStagingFreeWait{5};

}  // namespace

void* HostPointers::operator()(const void* user) const {
  const auto a = reinterpret_cast<uintptr_t>(user);
  for (const Range& r : ranges_)
    if (a >= r.start && a < r.end) return r.host + (a - r.start);
  return const_cast<void*>(user);
}

StreamAgent::StreamAgent(device::DeviceRuntime* runtime, std::string name, StreamFlagPool* pool)
    : runtime_(runtime),
      pool_(pool ? *pool : StreamFlagPool::For(runtime)),
      name_(std::move(name)) {
  thread_ = std::thread(&StreamAgent::loop, this);
}

StreamAgent::~StreamAgent() {
  shutdown(false);
}

void StreamAgent::shutdown(bool abort_calls, const std::string& why) {
  if (abort_calls) abort(why);
  std::lock_guard<std::mutex> join_lock(join_mu_);
  if (joined_) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!aborted_) drained_.wait(lock, [&] { return completed_ == submitted_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  joined_ = true;
}

void StreamAgent::runAfterQueued(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      Pending p;
      p.host_job = std::move(job);
      queue_.push_back(std::move(p));
      ++submitted_;
      job = nullptr;
    }
  }
  if (job) {
    job();  // stopped: nothing is queued any more
    return;
  }
  cv_.notify_one();
}

Status StreamAgent::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void StreamAgent::fail(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = std::move(s);
}

void StreamAgent::tellDropped() {
  if (on_dropped_ && !dropped_told_.exchange(true)) on_dropped_();
}

Status StreamAgent::submit(StreamCall call) {
  std::vector<std::pair<StreamAgent*, StreamCall>> one;
  one.emplace_back(this, std::move(call));
  return submitGroup(std::move(one));
}

// What submit checks before anything is queued: the agent's state, the streams, the buffers.
static Status CheckCall(device::DeviceRuntime* rt, const StreamCall& call) {
  if (call.streams.empty())
    return InternalError(call.what + ": a stream-ordered call without a stream");
  if (call.device_work && call.streams.size() != 1)
    return InternalError(call.what + ": a call with device work on several streams");
  for (device::StreamHandle s : call.streams) {
    Status st = rt->checkStream(s);
    if (!st.ok()) return st.prepend(call.what + ": ");
  }
  for (const StreamBuffer& b : call.buffers)
    if (b.bytes > 0 && !b.info.covers(b.ptr, b.bytes))
      return InvalidArgument(
          call.what + ": " + std::to_string(b.bytes) + " bytes at " + device::PointerText(b.ptr) +
          " run past the end of their " + device::MemoryKindName(b.info.kind) + " allocation (" +
          std::to_string(b.info.size) + " bytes at " + device::PointerText(b.info.base) +
          "): check the count and the buffer");
  return Status::Ok();
}

Status StreamAgent::submitGroup(std::vector<std::pair<StreamAgent*, StreamCall>> calls) {
  // Refused before anything is queued: no device work of these calls can run, so what it holds
  // may be reused (DeviceWork::released).
  const auto refused = [&calls](Status st) {
    for (auto& [agent, call] : calls)
      if (call.device_work && call.device_work->released) {
        call.device_work->released(true);
        call.device_work->released = nullptr;
      }
    return st;
  };
  for (auto& [agent, call] : calls) {
    Status kept;
    {
      std::lock_guard<std::mutex> lock(agent->mu_);
      if (agent->aborted_)
        return refused(AbortedError(call.what + ": the communicator was aborted (" +
                                    agent->abort_reason_ + ")"));
      if (agent->stop_)
        return refused(InvalidUsage(call.what + ": the communicator is being destroyed"));
      kept = agent->error_;
    }
    if (!kept.ok()) {
      agent->tellDropped();
      return refused(
          kept.prepend(call.what + ": not run: an earlier stream-ordered call failed: "));
    }
    Status st = CheckCall(agent->runtime_, call);
    if (!st.ok()) return refused(st);
  }
  std::vector<Pending> pending(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    pending[i].call = std::move(calls[i].second);
    pending[i].slots.resize(pending[i].call.streams.size());
  }
  // Streams already ordered on some call must not wait forever when a later step fails: every
  // `done` and every staging flag a stream may wait for is written from here. A staging buffer
  // with copies queued into it is never reused (they may still run).
  auto unwind = [&](Status st, const std::string& what) {
    for (size_t i = 0; i < calls.size(); ++i) {
      StreamAgent* agent = calls[i].first;
      for (StreamFlagSlot& q : pending[i].slots)
        if (q.done) agent->runtime_->hostWriteFlag(q.done, q.value);
      for (StreamFlagSlot& q : pending[i].piece_slots)
        agent->runtime_->hostWriteFlag(q.done, q.value);
      // Device work queued: told to skip, then let go (skip first: go lets it run).
      for (auto it = pending[i].device_slots.rbegin(); it != pending[i].device_slots.rend(); ++it)
        agent->runtime_->hostWriteFlag(it->ready, it->value);
      if (pending[i].staging) agent->dropStaging(pending[i], pending[i].staging_queued);
      // Device work never queued: nothing of it can run, so what it holds may be reused.
      DeviceWork* work = pending[i].call.device_work.get();
      if (work && work->released && !pending[i].work_queued) {
        work->released(true);
        work->released = nullptr;
      }
    }
    st.prepend(what + ": ordering the call on its stream: ");
    // Past CheckCall a failure is the device's (a CUDA call, memory), and the peers may have
    // queued their part of the call: they would wait for this rank's until BRAID_TIMEOUT, or
    // take its next call for this one. So each agent keeps the failure (its next calls are
    // refused naming it, GetAsyncError reports it) and is told a call was dropped (the shim
    // revokes the communicator). That also settles what this call queued and may still run at a
    // time no later call waits for (a copy into scratch behind the previous call's `done`): no
    // later call of these agents runs to be overtaken by it.
    for (auto& [agent, call] : calls) {
      bool aborted;
      {
        std::lock_guard<std::mutex> lock(agent->mu_);
        aborted = agent->aborted_ || agent->stop_;
        if (!aborted && agent->error_.ok()) agent->error_ = st;
      }
      if (!aborted) agent->tellDropped();
    }
    return st;
  };
  auto take_slot = [&](size_t i, size_t k) -> Status {
    StreamAgent* agent = calls[i].first;
    auto slot = agent->pool_.acquire();
    if (!slot.ok()) return slot.status();
    Status st = agent->runtime_->writeValue32(pending[i].call.streams[k], slot->ready, slot->value);
    if (!st.ok()) {
      agent->pool_.giveBackUnused(*slot);  // nothing queued on the stream: untouched
      return st;
    }
    pending[i].slots[k] = *slot;
    return Status::Ok();
  };
  // Where each call's buffers are for the host: staging buffers taken, nothing queued yet.
  for (size_t i = 0; i < calls.size(); ++i) {
    pending[i].context = calls[i].first->runtime_->currentContext();
    Status st = calls[i].first->planStaging(pending[i]);
    if (!st.ok()) return unwind(st, pending[i].call.what);
  }
  // Every `ready` first, on every stream of every call (so that ranks listing communicators in
  // different orders cannot deadlock, and on one hardware queue no wait comes before the write
  // it waits for): the streams after a call's first...
  for (size_t i = 0; i < calls.size(); ++i)
    for (size_t k = 1; k < pending[i].call.streams.size(); ++k) {
      Status st = take_slot(i, k);
      if (!st.ok()) return unwind(st, pending[i].call.what);
    }
  // ...then the first: a staged call's copies in go there, after the other streams' `ready`
  // (their earlier work may write what the call reads).
  for (size_t i = 0; i < calls.size(); ++i) {
    device::DeviceRuntime* rt = calls[i].first->runtime_;
    Pending& p = pending[i];
    device::StreamHandle s0 = p.call.streams[0];
    Status st;
    if (p.staging) {
      p.staging_queued = true;
      StreamAgent* agent = calls[i].first;
      uint32_t* prev_flag;
      uint32_t prev_value;
      {
        std::lock_guard<std::mutex> lock(agent->staging_mu_);
        prev_flag = agent->last_flag_;
        prev_value = agent->last_value_;
      }
      // The communicator's previous staged call wrote its results back (it may be on another
      // stream). Its flag write was queued by an earlier submit (a group holds one call per
      // communicator), so on one hardware queue this wait comes after it.
      if (prev_flag) st = rt->waitValue32(s0, prev_flag, prev_value);
      for (size_t k = 1; k < p.slots.size() && st.ok(); ++k)
        st = rt->waitValue32(s0, p.slots[k].ready, p.slots[k].value);
      if (p.split) {
        // Piece by piece: copies in, then the piece's `ready` (piece 0's is slots[0]).
        if (st.ok()) st = agent->queuePiecesIn(p);
        if (!st.ok()) return unwind(st, p.call.what);
        continue;
      }
      for (const auto& [host, dev, bytes] : p.in) {
        if (!st.ok()) break;
        st = rt->copyAsync(host, dev, bytes, s0);
      }
      if (!st.ok())
        return unwind(st.prepend("copying the inputs from device memory: "), p.call.what);
    }
    if (p.call.device_work) {
      // As a staged call's copies in: after the communicator's previous staged call wrote its
      // results back (it may be on another stream), since the device work reads the buffers.
      StreamAgent* agent = calls[i].first;
      std::lock_guard<std::mutex> lock(agent->staging_mu_);
      if (agent->last_flag_) st = rt->waitValue32(s0, agent->last_flag_, agent->last_value_);
      if (st.ok() && p.call.device_work->prepare) st = p.call.device_work->prepare(s0);
      if (!st.ok()) return unwind(st, p.call.what);
    }
    st = take_slot(i, 0);
    if (!st.ok()) return unwind(st, p.call.what);
    if (p.call.device_work) {
      st = calls[i].first->queueDeviceWork(p);
      if (!st.ok()) return unwind(st, p.call.what);
    }
  }
  // ...then every wait for `done` (a slot whose stream writes `ready` but waits for nothing is
  // lost: quarantined, never released). A staged call's copies out follow its `done` on the first
  // stream, then its staging flag, which its other streams wait for.
  for (size_t i = 0; i < calls.size(); ++i) {
    device::DeviceRuntime* rt = calls[i].first->runtime_;
    Pending& p = pending[i];
    const auto& streams = p.call.streams;
    // A split call waits for each piece's `done` and copies that piece out.
    Status st = p.split ? calls[i].first->queuePiecesOut(p)
                        : rt->waitValue32(streams[0], p.slots[0].done, p.slots[0].value);
    if (p.split) {
      if (st.ok()) st = rt->writeValue32(streams[0], p.staging->flag(), p.staging_value);
    } else if (p.staging) {
      for (const auto& [dev, host, bytes] : p.out) {
        if (!st.ok()) break;
        st = rt->copyAsync(dev, host, bytes, streams[0]);
      }
      if (st.ok()) st = rt->writeValue32(streams[0], p.staging->flag(), p.staging_value);
    }
    for (size_t k = 1; k < streams.size() && st.ok(); ++k)
      st = p.staging ? rt->waitValue32(streams[k], p.staging->flag(), p.staging_value)
                     : rt->waitValue32(streams[k], p.slots[k].done, p.slots[k].value);
    if (!st.ok()) return unwind(st, p.call.what);
  }
  Status result;
  for (size_t i = 0; i < calls.size(); ++i) {
    StreamAgent* agent = calls[i].first;
    Pending& p = pending[i];
    Staging* const sb = p.staging;
    const uint32_t value = p.staging_value;
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(agent->mu_);
      // An abort (ncclCommRevoke, another thread) may have ended the agent's thread since the
      // check above: nobody would run the call, so it is released here.
      if (!agent->aborted_ && !agent->stop_) {
        if (p.call.device_work) {
          agent->last_work_end_ = p.device_slots[0].done;
          agent->last_work_value_ = p.device_slots[0].value;
        }
        agent->queue_.push_back(std::move(p));
        ++agent->submitted_;
        queued = true;
      } else if (result.ok()) {
        result = AbortedError(pending[i].call.what + ": the communicator was aborted (" +
                              agent->abort_reason_ + ") while the call was being queued");
      }
    }
    // The staging buffer was held until here, so an agent ending meanwhile kept it (loop()).
    if (!queued) {
      if (sb) agent->dropStaging(pending[i], true);  // released unrun: copies may be pending
      agent->release(pending[i], false);
      continue;
    }
    if (sb) {
      std::lock_guard<std::mutex> lock(agent->staging_mu_);
      sb->value = value;  // free again once the stream wrote it
      sb->held = false;
      agent->last_flag_ = sb->flag();
      agent->last_value_ = value;
    } else if (p.call.device_work) {
      // The next staged call (maybe on another stream) copies in after this call's `done`: its
      // device work wrote the outputs by then, on every rank. A `done` only grows, so the wait
      // holds after the slot is reused.
      std::lock_guard<std::mutex> lock(agent->staging_mu_);
      agent->last_flag_ = p.slots[0].done;
      agent->last_value_ = p.slots[0].value;
    }
    agent->cv_.notify_one();
  }
  return result;
}

Status StreamAgent::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  drained_.wait(lock, [&] { return completed_ == submitted_; });
  return error_;
}

void StreamAgent::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = why;
  }
  cv_.notify_all();
}

void StreamAgent::release(Pending& p, bool ready_seen) {
  if (!p.device_slots.empty()) {
    if (p.device_ended) {
      // The stream wrote go's `done` (the work's end); skip's is written here: both are back in
      // the pool with their `done` at their value.
      runtime_->hostWriteFlag(p.device_slots[1].done, p.device_slots[1].value);
      for (const StreamFlagSlot& s : p.device_slots) pool_.release(s);
    } else {
      // Not run (or not seen to end): told to skip and let go; never reused.
      runtime_->hostWriteFlag(p.device_slots[1].ready, p.device_slots[1].value);
      runtime_->hostWriteFlag(p.device_slots[0].ready, p.device_slots[0].value);
    }
  }
  if (p.call.device_work && p.call.device_work->released) {
    p.call.device_work->released(p.device_ended);
    p.call.device_work->released = nullptr;  // once
  }
  for (StreamFlagSlot& s : p.slots) {
    runtime_->hostWriteFlag(s.done, s.value);
    if (ready_seen) pool_.release(s);
  }
  for (StreamFlagSlot& s : p.piece_slots) {
    runtime_->hostWriteFlag(s.done, s.value);
    if (ready_seen) pool_.release(s);
  }
}

Status StreamAgent::queuePiecesIn(Pending& p) {
  device::StreamHandle s0 = p.call.streams[0];
  const size_t piece = p.call.piece_bytes;
  for (size_t k = 0; k < p.call.pieces; ++k) {
    for (size_t j = 0; j < p.in.size(); ++j) {
      const auto& [host, dev, bytes] = p.in[j];
      size_t from = 0, n = 0;
      if (p.in_sliced[j]) {
        from = std::min(bytes, k * piece);
        n = std::min(bytes - from, piece);
      } else if (k == 0) {
        n = bytes;  // a merged region: whole, before the first piece
      }
      if (n == 0) continue;
      Status st = runtime_->copyAsync(host + from, static_cast<const char*>(dev) + from, n, s0);
      if (!st.ok()) return st.prepend("copying the inputs from device memory: ");
    }
    auto slot = pool_.acquire();
    if (!slot.ok()) return slot.status();
    Status st = runtime_->writeValue32(s0, slot->ready, slot->value);
    if (!st.ok()) {
      pool_.giveBackUnused(*slot);
      return st;
    }
    if (k == 0)
      p.slots[0] = *slot;
    else
      p.piece_slots.push_back(*slot);
  }
  return Status::Ok();
}

Status StreamAgent::queuePiecesOut(Pending& p) {
  device::StreamHandle s0 = p.call.streams[0];
  const size_t piece = p.call.piece_bytes;
  for (size_t k = 0; k < p.call.pieces; ++k) {
    const StreamFlagSlot& slot = p.pieceSlot(k);
    Status st = runtime_->waitValue32(s0, slot.done, slot.value);
    if (!st.ok()) return st;
    // Copies out are per buffer (never merged): piece k of each.
    for (const auto& [dev, host, bytes] : p.out) {
      const size_t from = std::min(bytes, k * piece);
      const size_t n = std::min(bytes - from, piece);
      if (n == 0) continue;
      st = runtime_->copyAsync(static_cast<char*>(dev) + from, host + from, n, s0);
      if (!st.ok()) return st;
    }
  }
  return Status::Ok();
}

void StreamAgent::loop() {
  bool context_set = false;
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || aborted_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopped (or aborted) with nothing left
      p = std::move(queue_.front());
      queue_.pop_front();
    }
    if (p.host_job) {
      p.host_job();
    } else {
      if (!context_set && p.context) context_set = runtime_->useContext(p.context).ok();
      execute(p);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++completed_;
    }
    drained_.notify_all();
  }
  // The staging buffers, once their copies out ran: every `done` is written, so the streams get
  // there unless their own work hangs. Waited for a bounded time after a drain, not at all after
  // an abort (its streams may be stuck for good); a buffer still in use is left allocated rather
  // than freed under a copy. Lost ones (a failed submit) may have copies pending: kept too.
  bool aborted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted = aborted_;
  }
  const auto until = aborted ? std::chrono::steady_clock::time_point{}
                             : std::chrono::steady_clock::now() + kStagingFreeWait;
  // A buffer held by a submit racing an abort stays too (with its Staging: the submit uses it).
  std::lock_guard<std::mutex> lock(staging_mu_);
  std::vector<std::unique_ptr<Staging>> kept;
  for (auto& sb : staging_) {
    if (sb->held)
      kept.push_back(std::move(sb));
    else if (!sb->lost && runtime_->hostWaitFlag(sb->flag(), sb->value, until)) {
      (void)runtime_->freeHostMapped(sb->base);
      // The flag word holds `value`: a later use of the slot waits for more (the pool's rule).
      sb->word.value = sb->value;
      pool_.release(sb->word);
    }
  }
  staging_ = std::move(kept);
  staging_bytes_ = 0;
  for (const auto& sb : staging_) staging_bytes_ += sb->bytes;
  last_flag_ = nullptr;
}

// Every path keeps its failure before it writes `done`: whoever synchronises the stream and then
// asks for the communicator's error must see it.
void StreamAgent::execute(Pending& p) {
  {
    // Not run after an abort or a failure (the kept error already says why); the streams go on.
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_ || !error_.ok()) {
      const bool failed = !aborted_;
      if (error_.ok())  // aborted: the first failure
        error_ = AbortedError(p.call.what + ": not run: the communicator was aborted (" +
                              abort_reason_ + ")");
      lock.unlock();
      release(p, false);
      if (failed) tellDropped();
      return;
    }
  }
  // The streams' earlier work (and the copies in): sleep until each stream wrote `ready`.
  for (const StreamFlagSlot& s : p.slots)
    if (!waitReady(p, s)) return;
  if (p.call.device_work) {
    executeDeviceWork(p);
    return;
  }
  if (p.call.pieces >= 2 && p.call.run_piece) {
    const size_t last = p.call.pieces - 1;
    for (size_t k = 0; k <= last; ++k) {
      if (k > 0) {
        // An abort stops the call between pieces (the peers stop too, or time out).
        std::unique_lock<std::mutex> lock(mu_);
        if (aborted_) {
          if (error_.ok())
            error_ = AbortedError(p.call.what + ": stopped after piece " + std::to_string(k) +
                                  " of " + std::to_string(last + 1) +
                                  ": the communicator was aborted (" + abort_reason_ + ")");
          lock.unlock();
          release(p, false);
          return;
        }
      }
      // Split: piece k's own copies in (piece 0's came with slots[0]).
      if (p.split && k > 0 && !waitReady(p, p.pieceSlot(k), k)) return;
      if (p.split) {
        // Started before the last piece's inputs were on the host: the pipeline at work.
        const StreamFlagSlot& tail = p.pieceSlot(last);
        const bool early = k < last && !runtime_->hostWaitFlag(tail.ready, tail.value, {});
        std::lock_guard<std::mutex> lock(staging_mu_);
        ++pieces_run_;
        pieces_early_ += early;
      }
      Status st = p.call.run_piece(p.map, k);
      if (!st.ok()) {
        fail(std::move(st.prepend("[" + name_ + "] " + p.call.what + " (stream-ordered, piece " +
                                  std::to_string(k + 1) + " of " + std::to_string(last + 1) +
                                  "): ")));
        // The later pieces' `ready` may not have been seen: their slots are not reused.
        release(p, k == last || !p.split);
        return;
      }
      // The stream copies this piece out while the next one runs.
      if (p.split) runtime_->hostWriteFlag(p.pieceSlot(k).done, p.pieceSlot(k).value);
    }
    release(p, true);
    return;
  }
  Status st = p.call.run(p.map);
  if (!st.ok())
    fail(std::move(st.prepend("[" + name_ + "] " + p.call.what + " (stream-ordered): ")));
  release(p, true);
}

bool StreamAgent::waitDeviceWork(std::chrono::steady_clock::time_point deadline) {
  uint32_t* end;
  uint32_t value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    end = last_work_end_;
    value = last_work_value_;
  }
  // Calls run in order on their streams, so the last one's end follows every earlier one's. A
  // word that only grows: reached even after its slot was reused.
  return !end || runtime_->hostWaitFlag(end, value, deadline);
}

Status StreamAgent::queueDeviceWork(Pending& p) {
  device::StreamHandle s0 = p.call.streams[0];
  for (int k = 0; k < 2; ++k) {
    auto slot = pool_.acquire();
    if (!slot.ok()) return slot.status();
    p.device_slots.push_back(*slot);
  }
  const StreamFlagSlot& go = p.device_slots[0];
  const StreamFlagSlot& skip = p.device_slots[1];
  BRAID_RETURN_IF_ERROR(runtime_->waitValue32(s0, go.ready, go.value));
  p.work_queued = true;  // from here a kernel may read what the work points to
  BRAID_RETURN_IF_ERROR(p.call.device_work->queue(s0, skip.ready, skip.value));
  return runtime_->writeValue32(s0, go.done, go.value);
}

void StreamAgent::executeDeviceWork(Pending& p) {
  const StreamFlagSlot& go = p.device_slots[0];
  const StreamFlagSlot& skip = p.device_slots[1];
  Status st = p.call.device_work->agree();
  if (!st.ok()) runtime_->hostWriteFlag(skip.ready, skip.value);
  runtime_->hostWriteFlag(go.ready, go.value);
  // The work waits for nothing but `go`: it ends unless the device hangs; an abort stops the wait.
  while (
      !runtime_->hostWaitFlag(go.done, go.value, std::chrono::steady_clock::now() + kReadySlice)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) {
      if (error_.ok())
        error_ = AbortedError(p.call.what + ": the communicator was aborted (" + abort_reason_ +
                              ") while the call's device work ran");
      lock.unlock();
      release(p, false);
      return;
    }
  }
  p.device_ended = true;
  if (st.ok()) st = p.call.device_work->finish();
  if (!st.ok())
    fail(std::move(
        st.prepend("[" + name_ + "] " + p.call.what + " (stream-ordered, on the device): ")));
  release(p, true);
}

bool StreamAgent::waitReady(Pending& p, const StreamFlagSlot& s, size_t pieces_run) {
  while (
      !runtime_->hostWaitFlag(s.ready, s.value, std::chrono::steady_clock::now() + kReadySlice)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) {
      if (error_.ok())
        error_ =
            AbortedError(p.call.what +
                         (pieces_run == 0 ? std::string(": not run")
                                          : ": stopped after piece " + std::to_string(pieces_run) +
                                                " of " + std::to_string(p.call.pieces)) +
                         ": the communicator was aborted (" + abort_reason_ +
                         ") while the call waited for its stream");
      lock.unlock();
      // Some streams may have written `ready`: their slots are still not reused (simplest).
      release(p, false);
      return false;
    }
  }
  return true;
}

void StreamAgent::dropStaging(Pending& p, bool queued_into) {
  Staging* sb = p.staging;
  // A stream may wait for its flag: written. Copies into it may still run: never reused.
  if (queued_into) runtime_->hostWriteFlag(sb->flag(), p.staging_value);
  std::lock_guard<std::mutex> lock(staging_mu_);
  sb->held = false;
  sb->lost = queued_into;
}

void StreamAgent::setStagingCap(uint64_t bytes, std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(staging_mu_);
  staging_cap_ = bytes;
  staging_cap_wait_ = wait;
}

StreamAgent::StagingStats StreamAgent::stagingStats() {
  std::lock_guard<std::mutex> lock(staging_mu_);
  return {staging_.size(), staging_bytes_, staging_waits_, staging_past_cap_,
          staging_cap_,    pieces_run_,    pieces_early_};
}

Result<StreamAgent::Staging*> StreamAgent::acquireStaging(size_t bytes, const std::string& what) {
  // Powers of two, so that buffers fit the next calls of a similar size.
  size_t size = 4096;
  while (size < bytes) size *= 2;
  std::unique_lock<std::mutex> lock(staging_mu_);
  const auto wait_until = std::chrono::steady_clock::now() + staging_cap_wait_;
  bool counted = false;
  for (;;) {
    Staging* best = nullptr;         // the smallest free buffer that fits
    Staging* oldest_busy = nullptr;  // the buffer of the oldest call in flight
    uint64_t in_use = 0;             // bytes of buffers held or in flight
    const auto now = std::chrono::steady_clock::time_point{};  // past: a look, no wait
    for (auto& sb : staging_) {
      if (sb->lost) continue;
      if (sb->held) {
        in_use += sb->bytes;
      } else if (runtime_->hostWaitFlag(sb->flag(), sb->value, now)) {
        if (sb->bytes >= bytes && (!best || sb->bytes < best->bytes)) best = sb.get();
      } else {
        in_use += sb->bytes;
        if (!oldest_busy || sb->last_use < oldest_busy->last_use) oldest_busy = sb.get();
      }
    }
    const bool may_allocate = staging_cap_ == 0 || in_use + size <= staging_cap_;
    // A free buffer far larger than the call is kept for large calls while a right-sized one may
    // be made (else one large call would leave every later small call on one buffer, one at a
    // time).
    if (best && (best->bytes <= 4 * size || !may_allocate)) {
      best->held = true;
      return best;
    }
    if (may_allocate || !oldest_busy) break;
    // Past the cap with calls in flight: once the oldest's results are copied back its buffer is
    // free (and the look above may find that one, or another, fits). Its flag is a pool word,
    // valid even if the agent ends meanwhile. Bounded: a wait that does not end soon may be one
    // that cannot (ranks calling two communicators in different orders, which NCCL's queues
    // absorb), so past that bound the call allocates past the cap.
    if (std::chrono::steady_clock::now() >= wait_until) {
      if (staging_past_cap_++ == 0)
        BRAID_WARN(
            "[%s] %s: staging past BRAID_STAGING_MAX_BYTES (%llu bytes in flight, %zu more): "
            "the oldest call in flight did not complete within %lld ms",
            name_.c_str(), what.c_str(), static_cast<unsigned long long>(in_use), size,
            static_cast<long long>(staging_cap_wait_.count()));
      break;
    }
    if (!counted) ++staging_waits_;
    counted = true;
    const uint32_t* flag = oldest_busy->flag();
    const uint32_t value = oldest_busy->value;
    lock.unlock();
    for (;;) {
      {
        std::lock_guard<std::mutex> agent_lock(mu_);
        if (aborted_)
          return AbortedError(what + ": the communicator was aborted (" + abort_reason_ +
                              ") while the call waited for a staging buffer");
        if (stop_)
          return InvalidUsage(what +
                              ": the communicator was destroyed while the call waited "
                              "for a staging buffer");
      }
      const auto slice = std::min(wait_until, std::chrono::steady_clock::now() + kReadySlice);
      if (runtime_->hostWaitFlag(flag, value, slice) ||
          std::chrono::steady_clock::now() >= wait_until)
        break;
    }
    lock.lock();
  }
  auto word = pool_.acquire();
  if (!word.ok()) return Status(word.status()).prepend("staging flag: ");
  auto buf = runtime_->allocHostMapped(size);
  if (!buf.ok()) {
    pool_.giveBackUnused(*word);
    return Status(buf.status()).prepend("staging buffer: ");
  }
  auto sb = std::make_unique<Staging>();
  sb->base = static_cast<char*>(*buf);
  sb->bytes = size;
  sb->word = *word;
  // The word holds its last use's value (a stale wait for it may still be queued: never lower
  // it); this buffer's calls write the values after it. Written, so that a buffer no call has
  // used yet reads as free whatever the word's history (a raise: stale waits stay satisfied).
  sb->value = word->value - 1;
  runtime_->hostWriteFlag(sb->flag(), sb->value);
  sb->held = true;
  staging_bytes_ += size;
  Staging* raw = sb.get();
  staging_.push_back(std::move(sb));
  return raw;
}

Status StreamAgent::planStaging(Pending& p) {
  // Device work reads and writes the device buffers themselves.
  if (runtime_->deviceMemoryHostAccessible() || p.call.device_work) return Status::Ok();
  // Device buffers, merged where they overlap (in-place forms), each region staged once.
  struct Region {
    uintptr_t start, end;
    bool read;
    bool exact;  // one buffer's range (or several identical ones): copied piece by piece
  };
  std::vector<Region> regions;
  for (const StreamBuffer& b : p.call.buffers) {
    if (b.bytes == 0 || !b.info.onDevice()) continue;
    const auto s = reinterpret_cast<uintptr_t>(b.ptr);
    regions.push_back({s, s + b.bytes, b.read, true});
  }
  if (regions.empty()) return Status::Ok();
  std::sort(regions.begin(), regions.end(),
            [](const Region& a, const Region& b) { return a.start < b.start; });
  std::vector<Region> merged;
  for (const Region& r : regions) {
    if (!merged.empty() && r.start < merged.back().end) {
      merged.back().exact =
          merged.back().exact && r.start == merged.back().start && r.end == merged.back().end;
      merged.back().end = std::max(merged.back().end, r.end);
      merged.back().read = merged.back().read || r.read;
    } else {
      merged.push_back(r);
    }
  }
  auto padded = [](uintptr_t n) { return (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign; };
  size_t total = 0;
  for (const Region& r : merged) total += padded(r.end - r.start);
  BRAID_ASSIGN_OR_RETURN(Staging * sb, acquireStaging(total, p.call.what));
  {
    std::lock_guard<std::mutex> lock(staging_mu_);
    p.staging_value = sb->value + 1;
    sb->last_use = ++staging_uses_;
  }
  p.staging = sb;
  size_t offset = 0;
  for (const Region& r : merged) {
    char* host = sb->data() + offset;
    p.map.ranges_.push_back({r.start, r.end, host});
    // Regions the call only writes are written whole: nothing to copy in.
    if (r.read) {
      p.in.emplace_back(host, reinterpret_cast<const void*>(r.start), r.end - r.start);
      p.in_sliced.push_back(r.exact);
    }
    offset += padded(r.end - r.start);
  }
  for (const StreamBuffer& b : p.call.buffers)
    if (b.bytes > 0 && b.written && b.info.onDevice())
      p.out.emplace_back(const_cast<void*>(b.ptr), static_cast<const char*>(p.map(b.ptr)), b.bytes);
  // In pieces with copies of their own: on one stream only (a group's calls run whole).
  p.split = p.call.pieces >= 2 && p.call.run_piece && p.call.piece_bytes > 0 &&
            p.call.streams.size() == 1;
  return Status::Ok();
}

}  // namespace braid
