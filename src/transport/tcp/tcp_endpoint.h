// One TCP connection to one peer as a transport Endpoint (transport.h): non-blocking
// send()/recv(), an internal receive buffer for peek()/consume(), and fd-based sleeping.
#pragma once

#include <cstddef>
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/net/socket.h"
#include "core/base/status.h"
#include "transport/transport.h"

namespace braid {

// Who is at the other end, for error messages.
struct TcpPeer {
  int rank = -1;
  std::string host;     // hostname, "" when unknown
  std::string address;  // the peer's listening address "10.0.0.2:5123"
  int channel = 0;
  int pid = 0;
  bool same_host = false;        // its host id is this rank's: its pid can be looked at
  CauseBoard* causes = nullptr;  // hears of the peer's failures (TransportContext::causes)
};

class TcpEndpoint final : public Endpoint {
 public:
  // Receive-buffer size for peek(): large views let the engine reduce in place.
  static constexpr size_t kBufferBytes = 256 * 1024;
  // The least peek() reads ahead when it must read at all (fill()): a whole frame of up to 16
  // KiB of payload (its 48-byte header and padding included), so that one receive syscall
  // brings it; at exactly 16 KiB the last 48 bytes took a second one (a 2-rank all-gather of
  // 32 KiB: 4 receive syscalls per call instead of 2).
  static constexpr size_t kReadAheadBytes = 16 * 1024 + 64;

  TcpEndpoint(Fd fd, TcpPeer peer);
  ~TcpEndpoint() override;

  Result<size_t> send(const void* data, size_t len) override;
  Result<size_t> sendv(std::span<const iovec> parts) override;  // one sendmsg
  // Messages of at most kCorkMessageBytes, up to kCorkBytes buffered: a pass of the engine that
  // sends several small messages to this peer (the operations of a group of small calls, or
  // of non-blocking calls in flight) makes one sendmsg of them.
  bool cork(std::span<const iovec> parts, uint64_t* end) override;
  Status flush() override;
  uint64_t flushedThrough() const override { return flushed_; }
  static constexpr size_t kCorkMessageBytes = 17 * 1024;  // 16 KiB of payload and its header
  static constexpr size_t kCorkBytes = 128 * 1024;
  Result<size_t> recv(void* data, size_t len) override;
  Result<std::span<const std::byte>> peek(size_t max) override;
  void consume(size_t len) override;
  bool arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) override;
  void disarm(std::span<const pollfd> polled) override;
  // Sends one urgent (out-of-band) marker byte, then FIN: the peer reads everything sent so
  // far, then reports "shut the stream down after a failure" rather than a crash.
  void shutdown() override;
  std::string describe() const override;

  // Bytes read into the buffer and not consumed, or waiting in the socket (FIONREAD). From any
  // thread.
  bool hasUnreadBytes() const override;
  int fd() const { return fd_.get(); }

 private:
  // "rank 3 on host h2 (10.0.0.2:5123)"
  std::string peerName() const;
  // The error for a peer that hung up (err = 0 for EOF) or failed otherwise; reports what it
  // shows of the peer's failure as a cause.
  Status peerError(int err, const char* op);
  void report(FailureCause::Reason reason) const;
  // Whether the peer's shutdown marker arrived (cached once seen): still pending as urgent data,
  // or dropped by a read that started at it (accounted for by tcp_receive_counters.h).
  bool peerShutDown();
  // The marker if it is still pending as urgent data (MSG_OOB); sets marker_seen_.
  bool fetchPendingMarker();
  // sendv() without the cork: one sendmsg of `parts`.
  Result<size_t> sendDirect(std::span<const iovec> parts);
  // Reads what the socket has into the buffer: `want` bytes or kReadAheadBytes, whichever is
  // more, at most to the buffer's end.
  void fill(size_t want);
  // One recv() of the byte stream. Linux drops a pending urgent byte (the shutdown marker) when
  // a normal read starts at it; since only FIN follows the marker, such a read returns 0 or
  // EAGAIN, never data, and peerShutDown() finds the dropped byte in the kernel's counters. Where
  // the kernel has no such counter (guard_reads_), a one-byte MSG_PEEK (which leaves the urgent
  // byte in place) goes first, at one more syscall per read.
  ssize_t readStream(void* p, size_t n);

  Fd fd_;
  TcpPeer peer_;
  std::unique_ptr<std::byte[]> buf_;
  size_t head_ = 0, tail_ = 0;
  // Corked messages: cork_[cork_head_..] not yet sent; flushed_ counts corked bytes sent,
  // corked_ those ever corked.
  std::vector<std::byte> cork_;
  size_t cork_head_ = 0;
  uint64_t flushed_ = 0, corked_ = 0;
  size_t last_peek_ = 0;
  // Sticky, per direction: the incoming stream ends only after its bytes were delivered, while
  // sends may fail earlier.
  Status rx_error_;
  Status tx_error_;
  bool marker_seen_ = false;
  // Sequence numbers of the incoming stream consumed before this endpoint took the socket (the
  // handshake's), and bytes read since: what the kernel received beyond them, the unread bytes
  // and the FIN is the dropped marker. guard_reads_: no counters, peek before each read instead.
  uint64_t consumed_before_ = 0;
  uint64_t read_bytes_ = 0;
  bool guard_reads_ = false;
  bool shut_down_ = false;
  // Index of this endpoint's entry in the array of the last arm(), or -1.
  ptrdiff_t poll_slot_ = -1;
  // poll() reported that the peer hung up (FIN, reset): it reads nothing more, so the next
  // send fails even if the window still has room (which otherwise hides the FIN until full).
  bool peer_hung_up_ = false;
  std::atomic<bool> buffered_{false};  // tail_ > head_, for hasUnreadBytes() on other threads
};

}  // namespace braid
