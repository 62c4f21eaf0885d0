#include "completer.h"

#include <vector>

namespace braid_torch {

namespace {
// How long a wait on the oldest Work lasts before the younger ones are tested again. It only
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
  std::vector<c10::intrusive_ptr<BraidWork>> pending;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop, with nothing left in flight
      pending.assign(queue_.begin(), queue_.end());
    }
    // Test everything; complete what is done, in issue order.
    std::vector<BraidWork*> done;
    for (auto& w : pending)
      if (w->poll()) done.push_back(w.get());
    if (done.empty()) {
      pending.front()->waitSlice(kSliceMs);
      if (pending.front()->poll()) done.push_back(pending.front().get());
    }
    for (BraidWork* w : done) w->complete();
    if (!done.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (BraidWork* w : done)
        for (auto it = queue_.begin(); it != queue_.end(); ++it)
          if (it->get() == w) {
            queue_.erase(it);
            break;
          }
      if (queue_.empty()) idle_cv_.notify_all();
    }
    pending.clear();
  }
}

}  // namespace braid_torch
