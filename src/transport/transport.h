// The transport interface (DESIGN.md 2.3) and the registry that picks one per peer pair.
//
// A transport moves bytes between two ranks of one communicator. Per peer it provides
// `nchannels` Endpoints; each is a reliable FIFO byte stream in both directions. The engine
// frames messages itself (header + payload), so a transport knows nothing about collectives.
//
// Besides the stream, every endpoint offers a message interface: post the send or receive of a
// whole message in memory registered with the transport, then test for completion. That is the
// native shape of RDMA (verbs work requests, UCX tagged operations), so those transports plug in
// without emulating a stream; shm and tcp carry messages over their streams (stream_messages.h).
// A transport also declares which memory types (host, CUDA, HIP) it can read and write, and
// refuses to register the others.
//
// Lifecycle inside one communicator's init:
//   1. factory->create(ctx)              : listeners / segments are prepared, nothing connects
//   2. instance->localBlob()             : published to every rank through the bootstrap
//   3. instance->canConnect(peer, blob)  : symmetric decision; the registry takes, per peer, the
//                                          highest-priority transport both sides accept
//   4. instance->connect(peers, ...)     : collective among the ranks concerned; returns the
//                                          endpoints [peer][channel] (with lazy_connect, endpoints
//                                          that connect when first used: nothing is collective)
//   5. bootstrap barrier, then instance->finishConnect(): e.g. unlink shm names
// All steps honour the deadline and never block forever.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/failure_cause.h"
#include "core/base/memory_type.h"
#include "core/base/status.h"
#include "transport/memory_registration.h"

namespace braid {

class LocalBoard;  // local_board.h: one-sided windows on one host
class StreamMessages;
class TransportInstance;

// What the communicator knows about each rank after the first bootstrap round.
struct RankInfo {
  int rank = -1;
  int pid = 0;
  std::string hostname;
  // Identity of the node for "same host" decisions: BRAID_HOSTID if set, else
  // hostname + boot id + network namespace inode. Equal ids share /dev/shm and loopback.
  std::string host_id;
  // Its node's NICs (core/runtime/placement.h): a bit per topo::NicType (0 = not known), and
  // the type the node prefers (its best RDMA type, else Ethernet; -1 = not known). A transport
  // picks, per peer pair, a NIC type both ends have.
  uint8_t nic_types = 0;
  int8_t fabric = -1;
  // The network interface its TCP traffic goes through (BRAID_SOCKET_IFNAME's choice, else the
  // automatic one; "" when not known). Ranks of one node on different interfaces use different
  // NICs: the cost model's NICs per node (NicsPerNode, core/runtime/placement.h).
  std::string nic;
  // The device group of the device this rank is bound to (core/runtime/placement.h), unique
  // within its node; empty when its node has no devices.
  std::string device_group;
  // Its cross-memory probe word (transport/cross_memory.h): where it lives in the rank's
  // process and the value it holds; 0 when not known.
  uint64_t memory_probe_address = 0;
  uint64_t memory_probe_value = 0;
  // Its device IPC probe (device/ipc_probe.h) as text; empty when it has none.
  std::string device_ipc_probe;
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
  // Payload bytes per post of the small-message board (BRAID_ONESHOT_BYTES, agreed by every
  // rank); 0: no board.
  uint64_t board_bytes = 0;
  // BRAID_LAZY_CONNECT: connect() may return endpoints that connect when first used
  // (lazy_endpoint.h) instead of connecting before it returns. A transport for which connecting
  // costs nothing per peer (shm maps every peer's segment for the board anyway) ignores it.
  bool lazy_connect = false;
  // BRAID_TRANSPORTS as this rank has it ("" = every transport, best per pair). A transport named
  // there may serve pairs it leaves to others by default (ucx: every pair, not only those on a
  // common RDMA fabric).
  std::string transports;
  // This rank's node's RDMA NICs from the topology (InfiniBand and RoCE), for a transport that
  // picks its devices per fabric (ucx).
  struct Nic {
    std::string name;    // "mlx5_0", or "mlx5_0:2" for a port of a multi-port HCA
    uint8_t type = 0;    // topo::NicType, as RankInfo::nic_types numbers them
    int gid_index = -1;  // RoCE v2 GID index (verbs), -1 when not known
  };
  std::vector<Nic> local_nics;
};

// One reliable FIFO byte stream to one peer, both directions. Non-blocking: every call returns
// at once. Errors are RemoteError naming the peer (rank, host) for a dead or misbehaving peer,
// SystemError for local failures.
class Endpoint {
 public:
  Endpoint();
  virtual ~Endpoint();

  // Writes up to `len` bytes; returns how many were accepted (0 when the stream is full).
  virtual Result<size_t> send(const void* data, size_t len) = 0;
  // Writes up to the total of `parts`, in order, as one stream; returns how many bytes were
  // accepted. A transport that gathers them in one call (TCP: one sendmsg, one segment for a
  // small message's header, payload and padding) overrides it; this one sends part by part and
  // stops at the first part the stream did not take whole. An error after some bytes were taken
  // returns those bytes; the error must then come again on the next call (a transport's send
  // errors are sticky).
  virtual Result<size_t> sendv(std::span<const iovec> parts);
  // Batching of small messages: cork() appends one whole message (`parts`) to the endpoint's
  // outgoing buffer instead of sending it, and flush() sends everything buffered in one call;
  // send() and sendv() flush first, so the stream keeps its order. Returns false when the
  // transport does not batch (a send costs no syscall there: shm) or the buffer is full; the
  // caller then sends the message itself. `*end` is the stream position at the message's end:
  // it has gone out once flushedThrough() reaches it. Whoever corks must see that flush() is
  // called before it sleeps (the engine flushes at the end of every pass).
  virtual bool cork(std::span<const iovec> parts, uint64_t* end) {
    (void)parts;
    (void)end;
    return false;
  }
  // Sends what cork() buffered, as far as the stream takes it; the sticky send error if any.
  virtual Status flush() { return Status::Ok(); }
  // Waits, at most `max_ms`, until what send() accepted has left this process. A transport whose
  // bytes leave from its own progress (ucx: UCX's buffers) would otherwise lose them when the
  // process exits right after (a goodbye, braidComm::leave); sockets and rings need nothing.
  virtual void settle(int64_t max_ms) { (void)max_ms; }
  // Bytes of corked messages handed to the stream so far (a position comparable with `end`).
  virtual uint64_t flushedThrough() const { return 0; }
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

  // Whether bytes from the peer have arrived that nobody has read yet, where the transport can
  // tell without touching the stream (safe from any thread; false when it cannot tell). The
  // board's executor uses it to see a peer that is in another call (comm.h,
  // peerSentUnreadStreamBytes).
  virtual bool hasUnreadBytes() const { return false; }
  // Whether the stream is up (a lazy one may not be yet: LazyEndpoint). Any thread.
  virtual bool connected() const { return true; }

  // Message interface. postSend / postRecv name `len` bytes at `offset` of memory registered
  // with this endpoint's transport and return an id at once; test(id) moves what can move and
  // returns the message's byte count once it has completed (reported once; nullopt while
  // pending). Messages match in FIFO order per endpoint and direction: the k-th send is received
  // by the peer's k-th posted receive, which must be at least as large (a larger message fails
  // both the receive and the endpoint's later messages: the pair is out of step). The memory must
  // stay valid and untouched until completion. A send completes when its memory may be reused,
  // not when the peer has it. Bad arguments (a slice outside the registration, memory of another
  // transport, an unknown id) are InvalidArgument and change nothing. One thread per endpoint,
  // and no stream use of the endpoint while messages are pending. The default carries messages
  // over this endpoint's stream (stream_messages.h); RDMA transports override all four.
  virtual Result<uint64_t> postSend(const MemoryRegistration& mem, size_t offset, size_t len);
  virtual Result<uint64_t> postRecv(const MemoryRegistration& mem, size_t offset, size_t len);
  virtual Result<std::optional<size_t>> test(uint64_t id);
  // What pending messages wait for: pass them to arm() to sleep until they can progress.
  virtual void messageWants(bool* want_send, bool* want_recv) const;
  // The transport that made this endpoint (its registrations are the ones the endpoint takes).
  void setTransport(const TransportInstance* t) { transport_ = t; }
  const TransportInstance* transport() const { return transport_; }

  // Traffic counters (bytes accepted by send() and handed out by recv()/consume() since the
  // endpoint was made). Written by the thread that moves data, readable from any thread. A
  // wrapper (lazy_endpoint.h) reports those of the endpoint it wraps.
  virtual uint64_t bytesSent() const { return sent_bytes_.load(std::memory_order_relaxed); }
  virtual uint64_t bytesReceived() const { return received_bytes_.load(std::memory_order_relaxed); }

 protected:
  void countSent(uint64_t n) { sent_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void countReceived(uint64_t n) { received_bytes_.fetch_add(n, std::memory_order_relaxed); }

 private:
  // InvalidArgument unless `mem` belongs to this endpoint's transport and holds the slice.
  Status checkMemory(const MemoryRegistration& mem, size_t offset, size_t len,
                     const char* what) const;
  StreamMessages& messages();

  std::atomic<uint64_t> sent_bytes_{0};
  std::atomic<uint64_t> received_bytes_{0};
  const TransportInstance* transport_ = nullptr;
  std::unique_ptr<StreamMessages> messages_;  // made on first use
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
  // The host's small-message board (local_board.h) when this transport has one, covering the
  // peers it connected; null otherwise. Valid as long as the instance.
  virtual LocalBoard* localBoard() { return nullptr; }
  // This rank leaves the communicator with every call complete (`reason`: FailureCause::Reason
  // kDestroyed or kExited): a transport whose peers can read a word of this rank's (shm: the
  // segment's owner block) says so there, before the goodbye on the streams (braidComm::leave).
  virtual void markDeparted(uint32_t reason) { (void)reason; }

  // The factory's name ("shm", "tcp"), for messages.
  virtual const char* name() const { return "transport"; }
  // Memory types this transport's endpoints can read and write.
  virtual MemoryTypeMask memoryTypes() const { return MemoryTypeBit(MemoryType::kHost); }
  // Registers `bytes` bytes at `base` (of type `type`) for the message interface of this
  // instance's endpoints. InvalidArgument for a type outside memoryTypes() or a null base with
  // a non-zero size. The default records the range (stream transports need nothing more); RDMA
  // transports pin and register it with the device.
  virtual Result<std::unique_ptr<MemoryRegistration>> registerMemory(void* base, size_t bytes,
                                                                     MemoryType type);
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
