// Bootstrap: the rendezvous that lets N ranks find each other (spec/nccl-compat.md section 2,
// spec/reliability.md items 4-5).
//
// braidGetUniqueId() starts a Rendezvous service (a detached thread) listening on the chosen
// interface. Each rank connects, proves it knows the id's secret (HMAC-SHA256 challenge-response,
// see handshake.h), states (rank, nranks), and then the ranks run rounds of allGather through
// the service: each round every rank sends one message (bounded size) and receives all N.
// The service exits once every rank has closed its connection, or when its deadline passes
// (then connected ranks receive an error naming the ranks that never arrived).
//
// Strangers (wrong secret, garbage, slow or idle connections) are handled concurrently with the
// real ranks and dropped within a second without affecting them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/net/unique_id.h"

namespace braid {

// Largest message one rank may contribute to one allGather round.
inline constexpr size_t kMaxBootstrapMessage = 1 << 20;

// Options for the listener of a rendezvous service.
struct RendezvousOptions {
  std::string ifname;           // BRAID_SOCKET_IFNAME; "" = automatic
  int64_t timeout_ms = 300000;  // how long the service waits for all ranks
  // Optional fixed address to listen on ("host:port"), used by braidInitFromEnv's
  // BRAID_COMM_ID / MASTER_ADDR path; empty = the chosen interface, ephemeral port.
  std::string listen_address;
  // Optional fixed secret (BRAID_SECRET-derived); empty = random.
  std::vector<uint8_t> fixed_secret;
};

// Creates a fresh id and starts the service for it in a detached thread.
// With `fixed_secret`, the id's secret is DeriveSecret(fixed_secret), so that ranks which
// build their id from the environment (BRAID_COMM_ID + BRAID_SECRET) derive the same one.
Result<UniqueIdData> StartRendezvous(const RendezvousOptions& options);

// The 32-byte secret for a configured secret: itself when it has 32 bytes, else its SHA-256.
std::array<uint8_t, 32> DeriveSecret(const std::vector<uint8_t>& configured);

// Number of rendezvous service threads still running in this process (for tests and leak
// checks: a service ends once all its ranks closed, or at its deadline).
int RendezvousServicesRunning();
// Waits (polling, at most `ms`) until at most `at_most` services run; true when they do.
bool WaitRendezvousServices(int at_most, int64_t ms);

// A rank's side of the rendezvous. Every call waits at most until its deadline; when that
// deadline is aborted (Deadline::abortableBy), the call returns an Aborted status within
// kAbortCheckMs and the object is broken for good.
class Bootstrap {
 public:
  // Connects (retrying until `deadline` while the service is not up yet), authenticates, and
  // registers as `rank` of `nranks`. A mismatch of nranks between ranks, a duplicate rank or a
  // rank that never arrives fails every connected rank with a message naming it.
  static Result<std::unique_ptr<Bootstrap>> Connect(const UniqueIdData& id, int rank, int nranks,
                                                    Deadline deadline);
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // The communicator nonce as the service knows it (the id's nonce). Ranks that build their id
  // from the environment cannot know it in advance (an all-zero nonce in `id` is accepted).
  virtual const std::array<uint8_t, 16>& commNonce() const = 0;
  // Every rank contributes `mine` (<= kMaxBootstrapMessage); returns all contributions by rank.
  virtual Result<std::vector<std::string>> allGather(std::string_view mine, Deadline deadline) = 0;
  Status barrier(Deadline deadline) { return allGather("", deadline).status(); }
};

}  // namespace braid
