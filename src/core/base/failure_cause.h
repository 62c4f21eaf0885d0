// The root cause of a communicator's failure, and where a rank keeps the one it learned first.
//
// When a rank dies or stops, only its neighbours see it happen; the other ranks only see their
// neighbours shut streams down. So the rank that observes a failure itself (a peer's death, a
// stall it has checked, a failure of its own) turns it into a FailureCause, sends it to every
// other rank over the control plane before it shuts its streams down (failure_notice.h), and
// every rank names that cause in its errors: "rank 2 (host h, pid 42) died during allreduce #12",
// however many hops away it is.
//
// A cause travels as a fixed-size record: it comes from another process, so nothing in it is a
// length, every field is checked (rank against the communicator's size, text printable and
// bounded) and a record that fails any check is dropped.
#pragma once

#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace braid {

struct FailureCause {
  enum class Reason : uint8_t {
    kDied = 1,         // the process exited (or its connection broke as a crash breaks it)
    kStalled = 2,      // made no progress for `seconds` and did not answer a liveness probe
    kNoProgress = 3,   // alive (answered the probe) but made no progress: hung or not calling
    kUnreachable = 4,  // its host stopped answering (connection timed out, no route)
    kCorrupt = 5,      // sent data that breaks the protocol
    kOwnFailure = 6,   // failed on its own (out of memory, a local error); `detail` says what
    kRevoked = 7,      // revoked the communicator (braidCommRevoke)
    kShutDown = 8,     // shut its streams down without saying why (weak: only a fallback)
    kAborted = 9,      // aborted the communicator (braidCommAbort)
    kDestroyed = 10,   // destroyed the communicator (braidCommDestroy) before the call completed
    kNotCalling = 11,  // alive, but has not issued the collective the others wait in; `detail`
    kLeft = 12,        // its control listener is gone: it destroyed the communicator or exited
    kExited = 13,      // its process exited without destroying the communicator (said goodbye)
    // Alive, blocked in a point-to-point call that waits on the observer, which waits for it in
    // a collective it has not issued: a deadlock of the program's making (a usage error), found
    // by the observer (Engine::p2pDeadlock) long before BRAID_TIMEOUT.
    kP2pDeadlock = 14,
  };
  static constexpr size_t kHostBytes = 64;
  static constexpr size_t kDetailBytes = 96;
  // `text` as a detail that fits the record: a longer one keeps its end (where an error says
  // its reason: "... Too many open files (EMFILE): raise ulimit -n"), after "...".
  static std::string FitDetail(const std::string& text);
  static constexpr size_t kCollBytes = 16;
  static constexpr uint64_t kNoSeq = ~uint64_t{0};  // a point-to-point operation

  Reason reason = Reason::kDied;
  int32_t rank = -1;  // the rank that failed
  int32_t pid = 0;
  std::string host;
  int32_t observer = -1;  // the rank that saw it happen
  // The operation it happened during; unset until the observer's engine fills it in.
  bool has_op = false;
  std::string coll;  // "allreduce" (CollKindName), as text: the base layer knows no CollKind
  uint64_t seq = kNoSeq;
  uint32_t seconds = 0;  // kStalled / kNoProgress: the timeout
  std::string detail;    // kOwnFailure: a short reason

  // "rank 2 (host h, pid 42) died during allreduce #12".
  std::string describe() const;
  // The class this rank reports the cause under: a stall is a timeout, the rest are remote
  // failures (a rank's own failure is remote to the others).
  ErrorClass errorClass() const;
  // A cause with kShutDown names only the neighbour that shut a stream down; any other cause
  // replaces it.
  bool weak() const { return reason == Reason::kShutDown; }

  // Wire form: exactly kWireBytes, little-endian.
  static constexpr size_t kWireBytes = 224;  // 16 reserved (zero) at the end
  void encode(uint8_t out[kWireBytes]) const;
  // Checks everything: magic, version, reason, ranks in [0, nranks), text. nullopt when any
  // check fails.
  static std::optional<FailureCause> Decode(const uint8_t in[kWireBytes], int nranks);
};

// The causes one rank has learned, first come first kept (thread-safe: transports report on the
// engine's thread, notices arrive on the control listener's thread).
class CauseBoard {
 public:
  // Keeps `c` unless a cause is already known (a weak one only fills the weak slot).
  void offer(const FailureCause& c);
  // The strong cause if any, else the weak one.
  std::optional<FailureCause> first() const;
  bool hasStrong() const;
  // Waits until a strong cause is known or `deadline`; true when one is.
  bool waitStrong(Deadline deadline) const;
  // Fills in what a transport's report cannot know: the observer (when unset) and the
  // operation (when unset and `has_op`), in both slots.
  void complete(int observer, bool has_op, const std::string& coll, uint64_t seq);
  // True once, for whoever should send the strong cause to the other ranks.
  bool claimBroadcast();

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable strong_cv_;
  std::optional<FailureCause> strong_;
  std::optional<FailureCause> weak_;
  bool broadcast_claimed_ = false;
};

}  // namespace braid
