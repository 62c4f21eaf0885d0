// What the control plane says about failures: failure notices and liveness probes.
//
// Both travel over the ranks' control listeners (authenticated with the communicator's secret,
// served from init to destroy; see comm.h), never over the data streams: a failed operation can
// leave a stream mid-payload, where a peer could not tell a cause from data, and a TCP stream
// can only flag its end with one urgent byte.
//
//   notice  client: handshake (purpose kFailureNoticePurpose), FailureCause::kWireBytes record
//           server: stores the record in its CauseBoard if valid, answers one byte (1)
//   probe   client: handshake (purpose kLivenessProbePurpose)
//           server: answers one byte (1)
//   cause   client: handshake (purpose kCausePurpose)
//           server: answers one byte (1), then one byte (1 when it knows a strong cause, else 0)
//           and a FailureCause::kWireBytes record (zeros without one): a rank that waits on a
//           failed rank learns why even when no notice reached it
//   calls   client: handshake (purpose kIssuedCallsPurpose)
//           server: answers one byte (1) and a u64 (little endian): how many collectives the
//           rank has issued on the communicator (kIssuedCallsUnknown before its engine runs)
//   waits   client: handshake (purpose kWaitStatePurpose)
//           server: answers one byte (1), the u64 of `calls`, and one byte: 1 when the rank's
//           calling thread is blocked in a point-to-point call that waits on the asking rank
//           (the handshake names it), else 0 (Engine::p2pBlockedOn)
//
// A rank that observed a failure itself sends its notice to every other rank and waits for the
// answers (bounded) before it shuts its streams down: a rank that then fails because a stream
// was shut down already holds the cause, whichever rank shut it. A probe tells a stopped rank
// (SIGSTOP: the kernel accepts the connection, but nobody answers) from a live one that is
// itself waiting on someone else.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/base/clock.h"
#include "core/base/failure_cause.h"
#include "core/net/handshake.h"

namespace braid {

inline constexpr uint32_t kFailureNoticePurpose = 4;
inline constexpr uint32_t kLivenessProbePurpose = 5;
inline constexpr uint32_t kIssuedCallsPurpose = 6;
inline constexpr uint32_t kCausePurpose = 7;
inline constexpr uint32_t kWaitStatePurpose = 8;
inline constexpr uint64_t kIssuedCallsUnknown = ~uint64_t{0};
// How long a notice or a probe may take. A live listener answers in milliseconds; this bounds
// the wait on a stopped or unreachable one.
inline constexpr int64_t kFailureNoticeMs = 300;
inline constexpr int64_t kLivenessProbeMs = 250;

// Who to talk to: every rank's control listener, and this rank's identity in the handshake.
struct ControlPeers {
  const std::vector<sockaddr_storage>* addrs = nullptr;  // indexed by rank
  const std::vector<uint8_t>* secret = nullptr;
  int rank = -1;
  int nranks = 0;
};

// Sends `cause` to every rank r with !skip[r] (and r != self) at once, and returns when each has
// answered, failed, or `deadline` passed. Failures are not errors: the notice is best effort, a
// rank that missed it names the neighbour that shut its stream down instead.
void SendFailureNotices(const ControlPeers& peers, const FailureCause& cause,
                        const std::vector<bool>& skip, Deadline deadline);

// Whether `rank`'s process answers on its control listener before `deadline`.
bool ProbeAlive(const ControlPeers& peers, int rank, Deadline deadline);
// The same, telling a rank that does not answer (stopped, unreachable: kSilent) from one whose
// listener is gone (connection refused: it destroyed the communicator or its process exited).
enum class ProbeResult { kAnswered, kSilent, kRefused };
ProbeResult Probe(const ControlPeers& peers, int rank, Deadline deadline);

// How many collectives each rank of `ranks` has issued on the communicator, asked of all at once;
// nullopt for a rank that did not answer before `deadline` (or does not know yet). A stalled
// collective #k whose peers all run finds a rank that never called it this way: its count is at
// most k (Engine::handleStall).
std::vector<std::optional<uint64_t>> AskIssuedCalls(const ControlPeers& peers,
                                                    const std::vector<int>& ranks,
                                                    Deadline deadline);

// What `rank` waits for, as it answers the asking rank: the collectives it has issued and
// whether its caller is blocked in a point-to-point call waiting on the asker. nullopt when it did
// not answer before `deadline` or does not know yet (its engine does not run). A rank stalled in
// collective #k on a peer that issued at most k collectives and is blocked in a send or receive
// on it is in a deadlock, whichever rank's code is wrong (Engine::p2pDeadlock).
struct WaitState {
  uint64_t issued = 0;
  bool p2p_blocked_on_asker = false;
};
std::optional<WaitState> AskWaitState(const ControlPeers& peers, int rank, Deadline deadline);

// `rank`'s answer to "why did you fail?": kRefused when its listener is gone, else whether it
// answered and the strong cause it knows, if any.
struct CauseAnswer {
  ProbeResult result = ProbeResult::kSilent;
  std::optional<FailureCause> cause;
};
CauseAnswer AskCause(const ControlPeers& peers, int rank, Deadline deadline);

// The control listener's side (HandshakeListener::Serve): serves notices, probes, causes (from
// `board`), issued-call counts (`issued_calls`, on the listener's thread; null: unknown) and
// wait states (`p2p_blocked_on(asker)`; null: never blocked); false for any other purpose (the
// connection then goes to whoever takes connections, e.g. a shrink).
bool ServeFailureControl(const HandshakeHello& hello, int fd, int nranks, CauseBoard* board,
                         const std::function<uint64_t()>& issued_calls = nullptr,
                         const std::function<bool(int)>& p2p_blocked_on = nullptr);

}  // namespace braid
