#include "completer.h"

#include <algorithm>
#include <vector>

namespace braid_torch {

namespace {
// How long a pass waits on the oldest Work before the younger ones are tested again. It only
// matters when operations complete out of issue order (point-to-point); in order, the wait
// returns at the oldest's completion.
constexpr int64_t kSliceMs = 20;
}  // namespace

Completer::Completer() : thread_([this] { run(); }) {}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Completer::add(c10::intrusive_ptr<BraidWork> work) {
  work->handedOver(weak_from_this());
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void Completer::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty(); });
}

void Completer::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return (stop_ && queue_.empty()) || (!queue_.empty() && !driving_ && waiters_ == 0);
    });
    if (queue_.empty()) return;  // stopped, nothing left in flight
    driving_ = true;
    driver_ = std::this_thread::get_id();
    lock.unlock();
    pass(kSliceMs);
    lock.lock();
    driving_ = false;
    cv_.notify_all();
  }
}

bool Completer::waitFor(BraidWork& work,
                        std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  ++waiters_;
  while (!work.isCompleted()) {
    int64_t slice = kSliceMs;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      slice = std::min<int64_t>(slice, left.count());
    }
    // A wait inside a pass of this very thread (a future's callback that waits for a call) runs
    // passes of its own: waiting for the outer one to end would never end.
    const bool nested = driving_ && driver_ == std::this_thread::get_id();
    if ((!driving_ || nested) && !queue_.empty()) {
      driving_ = true;
      driver_ = std::this_thread::get_id();
      lock.unlock();
      pass(slice);
      lock.lock();
      if (!nested) driving_ = false;
      cv_.notify_all();
    } else if (deadline) {
      cv_.wait_until(lock, *deadline);  // woken when a pass ends
    } else {
      cv_.wait(lock);
    }
  }
  --waiters_;
  cv_.notify_all();  // the Completer's thread takes over what is left
  return work.isCompleted();
}

void Completer::pass(int64_t slice_ms) {
  std::vector<c10::intrusive_ptr<BraidWork>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.assign(queue_.begin(), queue_.end());
  }
  if (pending.empty()) return;
  // Test everything; complete what is done, in issue order.
  std::vector<BraidWork*> done;
  for (auto& w : pending)
    if (w->poll()) done.push_back(w.get());
  if (done.empty()) {
    pending.front()->waitSlice(slice_ms);
    if (pending.front()->poll()) done.push_back(pending.front().get());
  }
  if (done.empty()) return;
  // Out of the queue before completing: a pass nested in a completion's callback must not
  // complete them again. `pending` keeps them alive.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (BraidWork* w : done)
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if (it->get() == w) {
          queue_.erase(it);
          break;
        }
  }
  for (BraidWork* w : done) w->complete();
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) idle_cv_.notify_all();
  // Waiters see their Work complete when the pass ends (run/waitFor notify cv_ then).
}

}  // namespace braid_torch
