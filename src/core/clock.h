// Deadlines: every wait in braid has one.
#pragma once

#include <chrono>
#include <cstdint>

namespace braid {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline After(int64_t ms) {
    return Deadline(Clock::now() + std::chrono::milliseconds(ms));
  }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, cap]; for poll() timeouts.
  int remainingMs(int cap = 1 << 30) const {
    if (at_ == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > cap ? cap : static_cast<int>(left);
  }
  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace braid
