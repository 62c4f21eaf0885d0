// Deadlines: every wait in braid has one, and the waits of an init can be aborted through it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace braid {

using Clock = std::chrono::steady_clock;

// How long a wait bounded by an abortable deadline sleeps at most before it looks at the abort
// flag again: short enough for braidCommAbort's 2 s promise, long enough to cost nothing (ranks
// outnumber cores; 10 wake-ups a second of a blocked init are no spinning).
inline constexpr int kAbortCheckMs = 100;

class Deadline {
 public:
  static Deadline After(int64_t ms) {
    return Deadline(Clock::now() + std::chrono::milliseconds(ms));
  }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }
  // This deadline, which also expires as soon as `*flag` is true (braidCommAbort or
  // braidCommDestroy of a pending init). Every wait that polls with remainingMs() and checks
  // expired() is then abortable without an fd of its own. `flag` must outlive every copy.
  Deadline abortableBy(const std::atomic<bool>* flag) const {
    Deadline d = *this;
    d.abort_ = flag;
    return d;
  }
  // The earlier of this deadline and `ms` from now, still abortable by the same flag.
  Deadline within(int64_t ms) const {
    Deadline d = After(ms);
    d.at_ = std::min(d.at_, at_);
    d.abort_ = abort_;
    return d;
  }
  bool aborted() const { return abort_ && abort_->load(std::memory_order_acquire); }
  // (Never() reads no clock: a driving caller's wait looks at its deadline after every pass.)
  bool expired() const {
    return aborted() || (at_ != Clock::time_point::max() && Clock::now() >= at_);
  }
  // Milliseconds to wait before looking again, clamped to [0, cap]; for poll() timeouts. For an
  // abortable deadline at most kAbortCheckMs, and 0 once aborted: a wait loop that polls with
  // it and stops when expired() notices an abort within kAbortCheckMs.
  int remainingMs(int cap = 1 << 30) const {
    if (abort_) {
      if (aborted()) return 0;
      cap = std::min(cap, kAbortCheckMs);
    }
    return msLeft(cap);
  }
  // Milliseconds until the time limit itself, clamped to [0, cap], whether or not the deadline
  // is abortable (e.g. to tell a server how long we will wait for its answer).
  int msLeft(int cap = 1 << 30) const {
    if (at_ == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > cap ? cap : static_cast<int>(left);
  }
  // The time limit alone: a wait_until(at()) does not see an abort (use remainingMs()).
  Clock::time_point at() const { return at_; }
  // No time limit and no abort flag (braidWait's -1).
  bool never() const { return at_ == Clock::time_point::max() && !abort_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
  const std::atomic<bool>* abort_ = nullptr;  // not owned; null = not abortable
};

inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

// NowMicros at the last timer tick (CLOCK_MONOTONIC_COARSE: the same time base, up to one tick,
// 1-10 ms, behind; never ahead of NowMicros). For rate limits of milliseconds or more on paths
// that run once per call (a peer's next liveness check): on a VM the exact clock costs about
// 30 ns a read (31-33 ns on the CI machine's kvm TSC), the coarse one about 7.
inline int64_t CoarseNowMicros() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

}  // namespace braid
