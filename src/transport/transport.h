// The transport interface (DESIGN.md 2.3) and the registry that picks one per peer pair.
//
// A transport moves bytes between two ranks of one communicator. Per peer it provides
// `nchannels` Endpoints; each is a reliable FIFO byte stream in both directions. The engine
// frames messages itself (header + payload), so a transport knows nothing about collectives.
//
// Lifecycle inside one communicator's init:
//   1. factory->create(ctx)              : listeners / segments are prepared, nothing connects
//   2. instance->localBlob()             : published to every rank through the bootstrap
//   3. instance->canConnect(peer, blob)  : symmetric decision; the registry takes, per peer, the
//                                          highest-priority transport both sides accept
//   4. instance->connect(peers, ...)     : collective among the ranks concerned; returns the
//                                          endpoints [peer][channel]
//   5. bootstrap barrier, then instance->finishConnect(): e.g. unlink shm names
// All steps honour the deadline and never block forever.
#pragma once

#include <poll.h>

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/failure_cause.h"
#include "core/base/status.h"

namespace braid {

// What the communicator knows about each rank after the first bootstrap round.
struct RankInfo {
  int rank = -1;
  int pid = 0;
  std::string hostname;
  // Identity of the node for "same host" decisions: BRAID_HOSTID if set, else
  // hostname + boot id + network namespace inode. Equal ids share /dev/shm and loopback.
  std::string host_id;
};

// What a transport needs from the communicator.
struct TransportContext {
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;                   // endpoints per peer
  std::vector<RankInfo> ranks;         // indexed by rank
  std::string comm_tag;                // unique per communicator (hex), for names of shm objects
  std::vector<uint8_t> secret;         // 32 bytes; authenticates every data connection
  std::string socket_ifname;           // BRAID_SOCKET_IFNAME ("" = automatic)
  bool all_on_one_host = false;        // then TCP may use loopback
  size_t shm_ring_bytes = 1 << 20;     // BRAID_SHM_RING_BYTES: upper bound per ring (shm_sizing.h)
  int tcp_sockets_per_channel = 1;     // reserved
  std::string doorbell_name;           // this rank's doorbell (see Doorbell in core/net/doorbell.h)
  std::vector<std::string> doorbells;  // every rank's doorbell name, indexed by rank
  // Where endpoints report what they see of a peer's failure (a death, a shut-down stream), so
  // that the engine can name the root cause; owned by the communicator, which outlives every
  // endpoint. May be null (tests of a transport alone).
  CauseBoard* causes = nullptr;
};

// One reliable FIFO byte stream to one peer, both directions. Non-blocking: every call returns
// at once. Errors are RemoteError naming the peer (rank, host) for a dead or misbehaving peer,
// SystemError for local failures.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // Writes up to `len` bytes; returns how many were accepted (0 when the stream is full).
  virtual Result<size_t> send(const void* data, size_t len) = 0;
  // Reads up to `len` bytes into `data`; returns how many arrived (0 when none yet).
  virtual Result<size_t> recv(void* data, size_t len) = 0;
  // A view of arrived bytes that can be read in place, at most `max` of them (empty when none).
  // The view starts at the stream's read position and stays valid until consume() or the next
  // call on this endpoint. An implementation returns at least min(max, 8) bytes whenever that
  // many have arrived, so that no element of <= 8 bytes is ever split across two views.
  virtual Result<std::span<const std::byte>> peek(size_t max) = 0;
  // Marks `len` bytes of the last peek() as read.
  virtual void consume(size_t len) = 0;

  // Sleeping (DESIGN.md 2.2: waiting must not burn a core). Before the engine blocks in poll(),
  // it arms every endpoint it waits on: the endpoint appends the fds to watch to `fds` and
  // arranges to be woken (fd readiness, or a ring on this rank's doorbell) when it can accept
  // more bytes (want_send) or has bytes (want_recv), or when the peer dies. Returns true when
  // progress is possible right now, in which case the engine does not sleep.
  virtual bool arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) = 0;
  // Called after poll() returns (or instead of it), for every armed endpoint, with the array
  // that was polled: an endpoint reads the `revents` of the entries it appended (zero when the
  // engine did not poll) so that what poll() saw — e.g. the peer's FIN — is not lost.
  virtual void disarm(std::span<const pollfd> polled) = 0;

  // Shuts the stream down after a failure of this rank's operation, so that the peer's pending
  // and next calls fail at once (with a RemoteError naming this rank) instead of waiting for a
  // timeout: errors then propagate through a communicator in milliseconds. Bytes already sent
  // are still delivered first. Idempotent; the endpoint must not be used for transfers after.
  virtual void shutdown() {}

  // "shm to rank 3 (host a, pid 42)" — for messages.
  virtual std::string describe() const = 0;

  // Traffic counters (bytes accepted by send() and handed out by recv()/consume() since the
  // endpoint was made). Written by the thread that moves data, readable from any thread.
  uint64_t bytesSent() const { return sent_bytes_.load(std::memory_order_relaxed); }
  uint64_t bytesReceived() const { return received_bytes_.load(std::memory_order_relaxed); }

 protected:
  void countSent(uint64_t n) { sent_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void countReceived(uint64_t n) { received_bytes_.fetch_add(n, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> sent_bytes_{0};
  std::atomic<uint64_t> received_bytes_{0};
};

// One transport inside one communicator.
class TransportInstance {
 public:
  virtual ~TransportInstance() = default;
  // Bytes every rank will see through the bootstrap (addresses, segment names ...).
  virtual std::string localBlob() const = 0;
  // Whether this rank and `peer` can talk over this transport. Must give the same answer on
  // both sides (it sees both blobs via `blobs`, indexed by rank).
  virtual bool canConnect(int peer, const std::vector<std::string>& blobs) const = 0;
  // Connects to `peers` (sorted; each peer calls connect with this rank in its list). Fills
  // (*out)[i][c] for peers[i], channel c.
  virtual Status connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                         Deadline deadline,
                         std::vector<std::vector<std::unique_ptr<Endpoint>>>* out) = 0;
  // After every rank of the communicator has connected (a bootstrap barrier separates the two).
  virtual Status finishConnect() { return Status::Ok(); }
};

class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  virtual const char* name() const = 0;  // "shm", "tcp", ...
  virtual int priority() const = 0;      // higher wins
  // Prepares the transport for one communicator. An error here is not fatal for the
  // communicator: the transport is skipped (with a warning) and peers use the next one.
  virtual Result<std::unique_ptr<TransportInstance>> create(const TransportContext& ctx) = 0;
};

// Registered transports, highest priority first.
const std::vector<TransportFactory*>& TransportFactories();
// Parses BRAID_TRANSPORTS-style lists ("shm,tcp"); unknown names are an InvalidArgument.
Result<std::vector<TransportFactory*>> SelectTransports(const std::string& list);

// Implemented in shm/ and tcp/.
TransportFactory* ShmTransportFactory();
TransportFactory* TcpTransportFactory();

}  // namespace braid
