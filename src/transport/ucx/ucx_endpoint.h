// The UCX transport's Endpoint: one channel to one peer, a byte stream carried as tagged UCX
// messages, and the message interface natively (transport.h).
//
// The stream. The engine hands sendv() what is left of a frame (header, payload, padding) and
// retries a call that took nothing with the same bytes (its StreamGate keeps one operation at the
// head of a stream, and an operation's progress only moves with accepted bytes). So:
//   - parts below kInPlaceBytes are gathered into one *eager* message and accepted at once, as a
//     socket takes bytes: UCX sends it from the caller's memory when it can complete at once, else
//     from braid's copy. (Accepted is in the stream: an operation that then fails cannot take it
//     back, and its memory may go.)
//   - a part of kInPlaceBytes or more goes alone from the caller's memory, accepted once UCX
//     completed it, when the same bytes are offered again: a *rendezvous* (UCX_RNDV_THRESH is
//     kInPlaceBytes, ucx_fabric.h; the receiver has it when it completes) on a verbs device,
//     a zero-copy RDMA read by the receiver, and between ranks of a node cma
//     (process_vm_readv); on the net route (UCX over tcp) an eager message, credited.
// What UCX completed but its tcp still holds in its own buffer leaves with later progress: the
// engine's, or the worker's helper thread's (ucx_worker.h).
// The receiver probes for the next message of the stream (tags carry the channel and a sequence
// number, so messages of different channels and peers never mix) and, when the caller's recv()
// asks for at least the whole message, receives it straight into the caller's memory (again
// answering 0 until it completed and the same destination is offered again); otherwise into the
// endpoint's buffer, from which peek() offers views and recv() copies.
//
// Flow control. A receiver's UCX buffers eager messages nobody has asked for yet. So eager bytes
// are credited: a sender has at most kWindowBytes of them unconsumed (or one message, however
// large, on top of less than kCreditEvery), and the receiver returns credit (a small message the
// other way) every kCreditEvery bytes it takes. Rendezvous messages wait at the sender. On the net
// route (UCX over tcp) large parts go eagerly too and are credited alike (ucx_fabric.h,
// CreditsLargeParts).
//
// Failures. shutdown() sends a marker as the stream's last message: the peer reads everything
// before it, then reports "shut the stream down after a failure of its own operation" (as TCP's
// urgent byte does). A peer that died (UCX's error callback, or its pidfd on this node) fails the
// endpoint once nothing more of it arrived, naming the peer, and is reported to the cause board.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"
#include "transport/ucx/ucx_worker.h"

namespace braid::ucx {

// Tags: kind (3 bits) | sender rank (21 bits) | channel (8 bits) | sequence (32 bits).
enum class TagKind : uint64_t {
  kEager = 0,     // stream bytes, credited
  kInPlace = 1,   // stream bytes, rendezvous
  kShutdown = 2,  // the stream ends here (shutdown())
  kMessage = 3,   // a message of the message interface
  kCredit = 4,    // stream bytes taken by the receiver (8 bytes: the total), the other way
};
inline constexpr int kMaxRanks = 1 << 21;
inline constexpr int kMaxChannels = 1 << 8;
uint64_t MakeTag(TagKind kind, int rank, int channel, uint32_t seq);
TagKind KindOf(uint64_t tag);
uint32_t SeqOf(uint64_t tag);

// A registration of the message interface: the memory mapped with the UCP context of each of
// the instance's workers (an endpoint uses its worker's).
class Registration final : public MemoryRegistration {
 public:
  Registration(const TransportInstance* owner, void* base, size_t bytes, MemoryType type)
      : MemoryRegistration(owner, base, bytes, type) {}
  ~Registration() override;
  struct Mapping {
    std::shared_ptr<Context> context;
    ucp_mem_h memh = nullptr;
  };
  std::vector<Mapping> mappings;
  ucp_mem_h memhFor(const Context& c) const;
};

class Endpoint final : public braid::Endpoint {
 public:
  static constexpr size_t kInPlaceBytes = 64 * 1024;
  // Largest eager message (gathered parts, each below kInPlaceBytes).
  static constexpr size_t kMaxEagerBytes = 128 * 1024;
  static constexpr uint64_t kWindowBytes = 4 << 20;
  // Credit goes back once this much was taken since the last credit.
  static constexpr uint64_t kCreditEvery = kWindowBytes / 4;
  // How long shutdown() progresses the worker for its marker to leave.
  static constexpr int kShutdownMarkerWaitMs = 20;
  // How long a send that found the peer gone waits for its unread bytes to be read (sendLocked).
  static constexpr int64_t kGoneReadFirstUs = 200 * 1000;

  Endpoint(Worker* worker, std::shared_ptr<PeerLink> peer, int my_rank, int channel);
  ~Endpoint() override;

  Result<size_t> send(const void* data, size_t len) override;
  Result<size_t> sendv(std::span<const iovec> parts) override;
  Result<size_t> recv(void* data, size_t len) override;
  Result<std::span<const std::byte>> peek(size_t max) override;
  void consume(size_t len) override;
  bool arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) override;
  void disarm(std::span<const pollfd> polled) override;
  void shutdown() override;
  std::string describe() const override;
  // Bytes this endpoint already took from UCX and nobody read. A message still in the worker's
  // queue (not yet probed) is not seen: the engine asks only for the board's peers (comm.cc
  // peerSentUnreadStreamBytes), and the board serves a communicator only when shm connects every
  // pair, so no ucx endpoint is asked there; this answer is a lower bound for other callers.
  bool hasUnreadBytes() const override { return unread_.load(std::memory_order_relaxed); }
  // Progresses the worker until the eager sends are complete and the endpoint is flushed.
  void settle(int64_t max_ms) override;

  Result<uint64_t> postSend(const MemoryRegistration& mem, size_t offset, size_t len) override;
  Result<uint64_t> postRecv(const MemoryRegistration& mem, size_t offset, size_t len) override;
  Result<std::optional<size_t>> test(uint64_t id) override;
  void messageWants(bool* want_send, bool* want_recv) const override;

 private:
  // A UCX request of this endpoint, or none (completed at once).
  struct Request {
    void* req = nullptr;
    bool pending() const { return req != nullptr; }
  };

  // --- sending (mu held)
  Result<size_t> sendLocked(std::span<const iovec> parts);
  // Posts one tagged send of `parts` (contiguous when one part), never waiting: null when UCX
  // completed it at once, else its request. `force_immediate`: UCX completes it at once or refuses
  // it (*refused, nothing sent).
  Result<void*> postTagged(TagKind kind, const iovec* parts, size_t n, bool force_immediate,
                           bool* refused);
  // Moves the send in flight on; true once UCX completed it (the bytes may be accepted).
  Result<bool> advanceSend();
  // Whether the credit window takes a message of `bytes` now.
  bool windowTakes(uint64_t bytes) const;
  // Frees a completed credit send; reads credit messages.
  Status reapSends();
  Status pollCredit();
  Status sendCredit();
  Status sendError(ucs_status_t st, const char* what);
  // --- receiving (mu held)
  // Brings the next message of the stream into the buffer if possible (never waits).
  Status fetch();
  // Takes the next message of the stream off UCX's queue (probe); false when none arrived.
  Result<bool> probeNext();
  // Finishes a receive that completed: accounting and credit.
  Status received(uint64_t bytes, TagKind kind);
  Status recvLocked(void* data, size_t len, size_t* got);
  // The error for an empty stream whose peer is gone or shut it down; OK while it may still come.
  Status endOfStream();
  void compact(size_t need);
  // --- messages
  // advanceMessages(), then every completed message to completed_ (also after a failure).
  Status progressMessages();
  Status advanceMessages();
  Status failMessages(Status st);
  // --- common
  Status peerGone(ucs_status_t st, const char* op);
  bool readyLocked(bool want_send, bool want_recv);
  Status ensureEp(ucp_ep_h* ep);

  Worker* worker_;
  std::shared_ptr<PeerLink> peer_;
  int my_rank_;
  int channel_;
  // Large parts are credited (the route sends them eagerly): CreditsLargeParts(route).
  bool credit_large_;

  // Sending.
  uint32_t tx_seq_ = 0;
  Status tx_error_;
  // Eager sends UCX has not finished, with braid's copy of their bytes.
  struct EagerSend {
    void* req;
    std::shared_ptr<std::vector<std::byte>> copy;
  };
  std::deque<EagerSend> eager_sends_;
  // The rendezvous in flight: the bytes it was posted from (the engine offers them again until
  // they are taken) and its request.
  struct Outgoing {
    const void* first = nullptr;  // the first part's memory and length, and the total
    size_t first_len = 0;
    size_t total = 0;
    void* req = nullptr;
    bool sent = false;  // UCX completed the send
  };
  std::optional<Outgoing> out_;
  // When a send first found the peer gone while its bytes were still arriving here (sendLocked):
  // the receive side reads them first (a goodbye names how the peer left), for a moment.
  int64_t gone_with_bytes_us_ = 0;
  // The gathered parts of an eager send UCX completes at once (it reads them during the post).
  static constexpr size_t kMaxParts = 8;
  ucp_dt_iov_t iov_[kMaxParts];
  uint64_t eager_sent_ = 0;      // eager bytes sent on the stream
  uint64_t eager_credited_ = 0;  // of which the peer has taken (its last credit)
  size_t credit_need_ = 0;       // the eager message the window last refused
  void* credit_recv_ = nullptr;  // the pending receive of the peer's next credit
  std::shared_ptr<uint64_t> credit_in_;
  bool shut_down_ = false;

  // Receiving.
  uint32_t rx_seq_ = 0;
  Status rx_error_;
  std::vector<std::byte> buf_;
  size_t head_ = 0, tail_ = 0;
  size_t last_peek_ = 0;
  std::atomic<bool> unread_{false};
  // The next message, taken off UCX's queue and not yet received.
  ucp_tag_message_h msg_ = nullptr;
  uint64_t msg_len_ = 0;
  TagKind msg_kind_ = TagKind::kEager;
  // A receive in flight: into the buffer (at buf_[tail_]) or straight into the caller's memory.
  struct Incoming {
    void* req = nullptr;
    uint64_t len = 0;
    TagKind kind = TagKind::kEager;
    void* direct = nullptr;  // the caller's destination, or null for the buffer
    size_t direct_len = 0;   // what the caller asked for
    bool done = false;
  };
  std::optional<Incoming> incoming_;
  bool peer_shut_down_ = false;           // its marker arrived
  uint64_t eager_taken_ = 0;              // eager bytes received
  uint64_t credit_sent_ = 0;              // the last total credited back
  std::shared_ptr<uint64_t> credit_out_;  // the value of the credit message in flight
  void* credit_send_ = nullptr;

  // Messages (postSend / postRecv / test).
  struct Message {
    uint64_t id = 0;
    bool send = false;
    void* req = nullptr;
    std::byte* data = nullptr;
    size_t capacity = 0;  // receive: the posted size; send: the length
    ucp_mem_h memh = nullptr;
    bool matched = false;  // receive: its message was probed and its receive started
    uint64_t len = 0;      // receive: the message's length once matched
    bool done = false;
  };
  std::deque<Message> messages_;  // pending, in post order
  std::unordered_map<uint64_t, size_t> completed_;
  uint64_t next_message_id_ = 1;
  uint32_t msg_tx_seq_ = 0;
  uint32_t msg_rx_seq_ = 0;
  std::optional<Status> messages_failed_;
};

}  // namespace braid::ucx
