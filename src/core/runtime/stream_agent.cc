#include "core/runtime/stream_agent.h"

#include <algorithm>
#include <chrono>

namespace braid {

namespace {

// A call waiting for `ready` re-checks for an abort this often (the wait itself sleeps).
constexpr std::chrono::milliseconds kReadySlice{100};
constexpr size_t kStagingAlign = 256;

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

Status StreamAgent::submit(StreamCall call) {
  std::vector<std::pair<StreamAgent*, StreamCall>> one;
  one.emplace_back(this, std::move(call));
  return submitGroup(std::move(one));
}

// What submit checks before anything is queued: the agent's state, the streams, the buffers.
static Status CheckCall(device::DeviceRuntime* rt, const StreamCall& call) {
  if (call.streams.empty())
    return InternalError(call.what + ": a stream-ordered call without a stream");
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
  for (auto& [agent, call] : calls) {
    {
      std::lock_guard<std::mutex> lock(agent->mu_);
      if (agent->aborted_)
        return AbortedError(call.what + ": the communicator was aborted (" + agent->abort_reason_ +
                            ")");
      if (agent->stop_) return InvalidUsage(call.what + ": the communicator is being destroyed");
      if (!agent->error_.ok()) {
        Status s = agent->error_;
        return s.prepend(call.what + ": not run: an earlier stream-ordered call failed: ");
      }
    }
    Status st = CheckCall(agent->runtime_, call);
    if (!st.ok()) return st;
  }
  std::vector<Pending> pending(calls.size());
  // Streams already ordered on some call must not wait forever when a later step fails.
  auto unwind = [&](Status st, const std::string& what) {
    for (size_t i = 0; i < calls.size(); ++i)
      for (StreamFlagSlot& q : pending[i].slots)
        calls[i].first->runtime_->hostWriteFlag(q.done, q.value);
    return st.prepend(what + ": ordering the call on its stream: ");
  };
  // Every `ready` first, on every stream of every call...
  for (size_t i = 0; i < calls.size(); ++i) {
    StreamAgent* agent = calls[i].first;
    const StreamCall& call = calls[i].second;
    pending[i].context = agent->runtime_->currentContext();
    for (device::StreamHandle s : call.streams) {
      auto slot = agent->pool_.acquire();
      if (!slot.ok()) return unwind(slot.status(), call.what);
      Status st = agent->runtime_->writeValue32(s, slot->ready, slot->value);
      if (!st.ok()) {
        agent->pool_.release(*slot);  // nothing queued on the stream: the slot is untouched
        return unwind(st, call.what);
      }
      pending[i].slots.push_back(*slot);
    }
  }
  // ...then every wait for `done` (a slot whose stream writes `ready` but waits for nothing is
  // lost: quarantined, never released).
  for (size_t i = 0; i < calls.size(); ++i) {
    StreamAgent* agent = calls[i].first;
    const StreamCall& call = calls[i].second;
    for (size_t k = 0; k < call.streams.size(); ++k) {
      const StreamFlagSlot& slot = pending[i].slots[k];
      Status st = agent->runtime_->waitValue32(call.streams[k], slot.done, slot.value);
      if (!st.ok()) return unwind(st, call.what);
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    StreamAgent* agent = calls[i].first;
    pending[i].call = std::move(calls[i].second);
    {
      std::lock_guard<std::mutex> lock(agent->mu_);
      agent->queue_.push_back(std::move(pending[i]));
      ++agent->submitted_;
    }
    agent->cv_.notify_one();
  }
  return Status::Ok();
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
  for (StreamFlagSlot& s : p.slots) {
    runtime_->hostWriteFlag(s.done, s.value);
    if (ready_seen) pool_.release(s);
  }
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
  if (have_copy_stream_) (void)runtime_->destroyStream(copy_stream_);
  if (staging_) (void)runtime_->freeHostMapped(staging_);
  for (char* old : retired_) (void)runtime_->freeHostMapped(old);
}

// Every path keeps its failure before it writes `done`: whoever synchronises the stream and then
// asks for the communicator's error must see it.
void StreamAgent::execute(Pending& p) {
  {
    // Not run after an abort or a failure (the kept error already says why); the streams go on.
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_ || !error_.ok()) {
      if (error_.ok())  // aborted: the first failure
        error_ = AbortedError(p.call.what + ": not run: the communicator was aborted (" +
                              abort_reason_ + ")");
      lock.unlock();
      release(p, false);
      return;
    }
  }
  // The streams' earlier work: sleep until each stream wrote `ready`.
  for (const StreamFlagSlot& s : p.slots) {
    while (
        !runtime_->hostWaitFlag(s.ready, s.value, std::chrono::steady_clock::now() + kReadySlice)) {
      std::unique_lock<std::mutex> lock(mu_);
      if (aborted_) {
        if (error_.ok())
          error_ = AbortedError(p.call.what + ": not run: the communicator was aborted (" +
                                abort_reason_ + ") while the call waited for its stream");
        lock.unlock();
        // Some streams may have written `ready`: their slots are still not reused (simplest).
        release(p, false);
        return;
      }
    }
  }
  HostPointers map;
  std::vector<std::pair<const StreamBuffer*, char*>> out;
  Status st = stage(p, &map, &out);
  if (st.ok()) st = p.call.run(map);
  if (st.ok() && !out.empty()) {
    // Results back to device memory before the stream goes on.
    for (const auto& [b, host] : out) {
      st = runtime_->copyAsync(const_cast<void*>(b->ptr), host, b->bytes, copy_stream_);
      if (!st.ok()) break;
    }
    Status sync = runtime_->synchronize(copy_stream_);
    if (st.ok()) st = std::move(sync);
    if (!st.ok()) st.prepend("copying the result to device memory: ");
  }
  if (!st.ok())
    fail(std::move(st.prepend("[" + name_ + "] " + p.call.what + " (stream-ordered): ")));
  release(p, true);
}

Status StreamAgent::stage(Pending& p, HostPointers* map,
                          std::vector<std::pair<const StreamBuffer*, char*>>* out) {
  if (runtime_->deviceMemoryHostAccessible()) return Status::Ok();
  // Device buffers, merged where they overlap (in-place forms), each region staged once.
  struct Region {
    uintptr_t start, end;
    bool read;
  };
  std::vector<Region> regions;
  for (const StreamBuffer& b : p.call.buffers) {
    if (b.bytes == 0 || !b.info.onDevice()) continue;
    const auto s = reinterpret_cast<uintptr_t>(b.ptr);
    regions.push_back({s, s + b.bytes, b.read});
  }
  if (regions.empty()) return Status::Ok();
  std::sort(regions.begin(), regions.end(),
            [](const Region& a, const Region& b) { return a.start < b.start; });
  std::vector<Region> merged;
  for (const Region& r : regions) {
    if (!merged.empty() && r.start < merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
      merged.back().read = merged.back().read || r.read;
    } else {
      merged.push_back(r);
    }
  }
  size_t total = 0;
  for (const Region& r : merged)
    total += (r.end - r.start + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  if (total > staging_bytes_) {
    if (staging_) retired_.push_back(staging_);  // a stream may wait: see retired_
    staging_ = nullptr;
    staging_bytes_ = 0;
    // Powers of two: outgrown buffers are kept (retired_), so few sizes.
    size_t size = 4096;
    while (size < total) size *= 2;
    auto buf = runtime_->allocHostMapped(size);
    if (!buf.ok()) return Status(buf.status()).prepend("staging buffer: ");
    staging_ = static_cast<char*>(*buf);
    staging_bytes_ = size;
  }
  if (!have_copy_stream_) {
    auto s = runtime_->createStream();
    if (!s.ok()) return Status(s.status()).prepend("the agent's copy stream: ");
    copy_stream_ = *s;
    have_copy_stream_ = true;
  }
  size_t offset = 0;
  Status st;
  for (const Region& r : merged) {
    char* host = staging_ + offset;
    map->ranges_.push_back({r.start, r.end, host});
    // Regions the call only writes are written whole: nothing to copy in.
    if (r.read && st.ok())
      st = runtime_->copyAsync(host, reinterpret_cast<const void*>(r.start), r.end - r.start,
                               copy_stream_);
    offset += (r.end - r.start + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  }
  Status sync = runtime_->synchronize(copy_stream_);
  if (st.ok()) st = std::move(sync);
  if (!st.ok()) return st.prepend("copying the inputs from device memory: ");
  for (const StreamBuffer& b : p.call.buffers)
    if (b.bytes > 0 && b.written && b.info.onDevice())
      out->push_back({&b, static_cast<char*>((*map)(b.ptr))});
  return Status::Ok();
}

}  // namespace braid
