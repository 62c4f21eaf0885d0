#include "transport/tcp/tcp_endpoint.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/base/clock.h"
#include "transport/tcp/tcp_receive_counters.h"

namespace braid {
namespace {

// The urgent byte of shutdown(). Without SO_OOBINLINE it never enters the byte stream.
constexpr char kShutdownMarker = 'S';
// How long shutdown() may wait for room for the marker.
constexpr int kShutdownMarkerWaitMs = 20;

}  // namespace

TcpEndpoint::TcpEndpoint(Fd fd, TcpPeer peer)
    : fd_(std::move(fd)), peer_(std::move(peer)), buf_(new std::byte[kBufferBytes]) {
  // Where this endpoint's accounting of the stream starts (peerShutDown()): whatever the kernel
  // received so far less what is still unread was read by the handshake.
  if (auto c = ReadTcpReceiveCounters(fd_.get())) {
    consumed_before_ = c->bytes_received - c->unread - (c->fin_received ? 1 : 0);
  } else {
    guard_reads_ = true;
  }
  // A marker already pending (the peer failed right after connecting) is not in that count.
  // (Only the pending one: no read of this endpoint can have dropped one yet.)
  fetchPendingMarker();
}

// The peer must see the close even if a forked child of this process holds a copy of the fd.
TcpEndpoint::~TcpEndpoint() {
  HangUp(fd_.get());
}

namespace {

// Whether process `pid` (of this host) runs: it has not exited (a zombie not yet reaped counts
// as exited, which kill(pid, 0) alone would not tell) and does not within kExitGraceMs. The grace:
// an exiting process closes its sockets before it counts as exited, so a peer may read the FIN
// first. A pidfd tells (Linux 5.3); else kill.
constexpr int kExitGraceMs = 20;
bool ProcessRuns(int pid) {
#ifdef SYS_pidfd_open
  const long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (fd >= 0) {
    pollfd p{static_cast<int>(fd), POLLIN, 0};
    const bool exited = poll(&p, 1, kExitGraceMs) > 0;
    close(static_cast<int>(fd));
    return !exited;
  }
  if (errno == ESRCH) return false;
#endif
  return kill(static_cast<pid_t>(pid), 0) == 0;
}

}  // namespace

std::string TcpEndpoint::peerName() const {
  std::string s = "rank " + std::to_string(peer_.rank);
  if (!peer_.host.empty()) s += " on host " + peer_.host;
  if (!peer_.address.empty()) s += " (" + peer_.address + ")";
  return s;
}

std::string TcpEndpoint::describe() const {
  return "tcp to " + peerName() + " channel " + std::to_string(peer_.channel);
}

bool TcpEndpoint::fetchPendingMarker() {
  char m = 0;
  // EINVAL / EAGAIN when no urgent byte is pending: none arrived, or a read dropped it.
  if (::recv(fd_.get(), &m, 1, MSG_OOB | MSG_DONTWAIT) == 1 && m == kShutdownMarker)
    marker_seen_ = true;
  return marker_seen_;
}

bool TcpEndpoint::peerShutDown() {
  if (marker_seen_ || fetchPendingMarker()) return true;
  if (guard_reads_) return false;  // no read can have dropped it
  // The kernel counts every sequence number the peer sent: the handshake's, what this endpoint
  // read, what waits unread, the marker if a read dropped it, and the FIN. So two beyond the
  // first three are the marker and the FIN, whatever the connection's state: no FIN (a reset
  // alone, which also follows a FIN when this rank sends to the closed peer) leaves at most one.
  auto c = ReadTcpReceiveCounters(fd_.get());
  if (!c) return false;
  marker_seen_ = c->bytes_received == consumed_before_ + read_bytes_ + c->unread + 2;
  return marker_seen_;
}

void TcpEndpoint::report(FailureCause::Reason reason) const {
  if (!peer_.causes) return;
  FailureCause c;
  c.reason = reason;
  c.rank = peer_.rank;
  c.pid = peer_.pid;
  c.host = peer_.host;
  peer_.causes->offer(c);  // the engine fills in the observer and the operation
}

Status TcpEndpoint::peerError(int err, const char* op) {
  if (err == 0 || err == ECONNRESET || err == EPIPE) {
    if (peerShutDown()) {
      // Weak: the peer's own notice (failure_notice.h), when it sent one, names the real cause.
      report(FailureCause::Reason::kShutDown);
      return RemoteError(peerName() + " shut the stream down after a failure of its own operation");
    }
    // A peer on this host whose process still runs closed its connections itself: it destroyed
    // the communicator (an abort or a failure sends the marker first).
    if (peer_.same_host && peer_.pid > 0 && ProcessRuns(peer_.pid)) {
      report(FailureCause::Reason::kDestroyed);
      return RemoteError(peerName() +
                         " closed the connection while its process runs: it "
                         "destroyed the communicator");
    }
    report(FailureCause::Reason::kDied);
    return RemoteError(peerName() + " closed the connection: it probably exited or crashed");
  }
  if (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH) {
    report(FailureCause::Reason::kUnreachable);
    return RemoteError(ErrnoMessage("tcp " + std::string(op) + " with " + peerName(), err) +
                       ": the peer's host is unreachable (host down or link cut?)");
  }
  return SystemError(ErrnoMessage("tcp " + std::string(op) + " with " + peerName(), err));
}

ssize_t TcpEndpoint::readStream(void* p, size_t n) {
  if (guard_reads_ && !marker_seen_) {
    char probe;
    ssize_t k = ::recv(fd_.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0) peerShutDown();  // EOF: the marker, if any, is still there
    if (k <= 0) return k;        // errno is recv's when k < 0
  }
  ssize_t k = ::recv(fd_.get(), p, n, MSG_DONTWAIT);
  if (k > 0) read_bytes_ += static_cast<uint64_t>(k);
  return k;
}

void TcpEndpoint::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // The marker needs one byte of send buffer. A full buffer usually drains within
  // microseconds (the peer is reading what precedes it), so retry briefly; this is the error
  // path. If it stays full, the peer reports a closed connection instead.
  Deadline until = Deadline::After(kShutdownMarkerWaitMs);
  for (;;) {
    ssize_t n = ::send(fd_.get(), &kShutdownMarker, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == 1 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    if (until.expired()) break;
    pollfd p{fd_.get(), POLLOUT, 0};
    ::poll(&p, 1, 1);
  }
  ::shutdown(fd_.get(), SHUT_WR);
  Status local = AbortedError(describe() + " was shut down after a failure on this rank");
  if (tx_error_.ok()) tx_error_ = local;
  if (rx_error_.ok()) rx_error_ = local;
}

Result<size_t> TcpEndpoint::send(const void* data, size_t len) {
  const iovec one{const_cast<void*>(data), len};
  return sendv(std::span<const iovec>(&one, 1));
}

bool TcpEndpoint::cork(std::span<const iovec> parts, uint64_t* end) {
  size_t len = 0;
  for (const iovec& part : parts) len += part.iov_len;
  if (!tx_error_.ok() || len > kCorkMessageBytes || cork_.size() - cork_head_ + len > kCorkBytes)
    return false;
  if (cork_head_ >= kCorkBytes) {  // (flush() empties the buffer whenever it drains it)
    // A stream that never drains whole (a reader keeping pace with a full socket buffer) would
    // otherwise keep every sent byte in front of the unsent ones.
    cork_.erase(cork_.begin(), cork_.begin() + static_cast<ptrdiff_t>(cork_head_));
    cork_head_ = 0;
  }
  for (const iovec& part : parts) {
    const auto* p = static_cast<const std::byte*>(part.iov_base);
    cork_.insert(cork_.end(), p, p + part.iov_len);
  }
  corked_ += len;
  *end = corked_;
  return true;
}

Status TcpEndpoint::flush() {
  while (cork_head_ < cork_.size()) {
    const iovec one{cork_.data() + cork_head_, cork_.size() - cork_head_};
    auto r = sendDirect(std::span<const iovec>(&one, 1));
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();  // the stream is full: the next pass goes on
    cork_head_ += *r;
    flushed_ += *r;
  }
  cork_.clear();
  cork_head_ = 0;
  return tx_error_;
}

Result<size_t> TcpEndpoint::sendv(std::span<const iovec> parts) {
  // Corked messages go first: the stream keeps the order in which messages were handed over.
  if (cork_head_ < cork_.size()) {
    BRAID_RETURN_IF_ERROR(flush());
    if (cork_head_ < cork_.size()) return size_t{0};
  }
  return sendDirect(parts);
}

Result<size_t> TcpEndpoint::sendDirect(std::span<const iovec> parts) {
  if (!tx_error_.ok()) return tx_error_;
  if (peer_hung_up_) {
    tx_error_ = peerError(0, "send");
    return tx_error_;
  }
  size_t len = 0;
  for (const iovec& part : parts) len += part.iov_len;
  if (len == 0) return size_t{0};
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(parts.data());
  msg.msg_iovlen = parts.size();
  for (;;) {
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      countSent(static_cast<uint64_t>(n));
      return static_cast<size_t>(n);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // A full buffer toward a peer that hung up never drains: fail now, not at the timeout.
      pollfd p{fd_.get(), POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        tx_error_ = peerError(0, "send");
        return tx_error_;
      }
      return size_t{0};
    }
    tx_error_ = peerError(errno, "send");
    return tx_error_;
  }
}

bool TcpEndpoint::hasUnreadBytes() const {
  if (buffered_.load(std::memory_order_relaxed)) return true;
  int n = 0;
  return fd_.valid() && ioctl(fd_.get(), FIONREAD, &n) == 0 && n > 0;
}

void TcpEndpoint::fill(size_t want) {
  if (!rx_error_.ok()) return;
  size_t avail = tail_ - head_;
  // Compact when the buffer's end is reached, or when a short remainder sits so near the end
  // that a view could not grow to 8 bytes (the peek() guarantee).
  if (head_ > 0 && (tail_ == kBufferBytes || (avail < 8 && kBufferBytes - head_ < 8))) {
    std::memmove(buf_.get(), buf_.get() + head_, avail);
    head_ = 0;
    tail_ = avail;
  }
  // Read what was asked for and at least kReadAheadBytes: a header peeked alone brings a small
  // payload (and the frames behind it) in the same syscall, while a large payload behind it is
  // left in the socket for recv() to read straight into its destination.
  const size_t limit = std::min(kBufferBytes, tail_ + std::max(want, kReadAheadBytes));
  while (tail_ < limit) {
    size_t room = limit - tail_;
    ssize_t n = readStream(buf_.get() + tail_, room);
    if (n > 0) {
      tail_ += static_cast<size_t>(n);
      buffered_.store(true, std::memory_order_relaxed);
      if (static_cast<size_t>(n) < room) return;  // drained (or at the marker)
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    rx_error_ = peerError(n == 0 ? 0 : errno, "recv");
    if (tx_error_.ok()) tx_error_ = rx_error_;  // nobody reads what we would send
    return;
  }
}

Result<std::span<const std::byte>> TcpEndpoint::peek(size_t max) {
  if (tail_ - head_ < max) fill(max - (tail_ - head_));
  size_t avail = tail_ - head_;
  if (avail == 0) {
    last_peek_ = 0;
    if (!rx_error_.ok()) return rx_error_;
    return std::span<const std::byte>();
  }
  last_peek_ = std::min(avail, max);
  return std::span<const std::byte>(buf_.get() + head_, last_peek_);
}

void TcpEndpoint::consume(size_t len) {
  countReceived(std::min(len, last_peek_));
  head_ += std::min(len, last_peek_);
  last_peek_ = 0;
  if (head_ == tail_) {
    head_ = tail_ = 0;
    buffered_.store(false, std::memory_order_relaxed);
  }
}

Result<size_t> TcpEndpoint::recv(void* data, size_t len) {
  last_peek_ = 0;
  auto* out = static_cast<std::byte*>(data);
  size_t got = std::min(len, tail_ - head_);
  if (got) {
    std::memcpy(out, buf_.get() + head_, got);
    head_ += got;
    if (head_ == tail_) {
      head_ = tail_ = 0;
      buffered_.store(false, std::memory_order_relaxed);
    }
  }
  // The rest straight from the socket: no second copy for large messages.
  while (got < len && rx_error_.ok()) {
    size_t want = len - got;
    ssize_t n = readStream(out + got, want);
    if (n > 0) {
      got += static_cast<size_t>(n);
      if (static_cast<size_t>(n) < want) break;  // drained (or at the marker)
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    rx_error_ = peerError(n == 0 ? 0 : errno, "recv");
    if (tx_error_.ok()) tx_error_ = rx_error_;
  }
  // Bytes that arrived before an error are delivered first; the error comes on the next call.
  if (got == 0 && !rx_error_.ok() && len > 0) return rx_error_;
  countReceived(got);
  return got;
}

bool TcpEndpoint::arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) {
  poll_slot_ = -1;
  // The caller should see a pending error (or buffered bytes) now rather than sleep.
  if (want_send && !tx_error_.ok()) return true;
  want_send = want_send || cork_head_ < cork_.size();  // corked bytes wait for room
  if (want_recv && (!rx_error_.ok() || tail_ > head_)) return true;
  // POLLRDHUP with POLLOUT: a sender blocked on a full buffer wakes when the peer hangs up.
  short ev = static_cast<short>((want_recv ? POLLIN : 0) | (want_send ? POLLOUT | POLLRDHUP : 0));
  // Even with neither wanted, POLLERR/POLLHUP (always reported) wake on a reset connection.
  poll_slot_ = static_cast<ptrdiff_t>(fds.size());
  fds.push_back({fd_.get(), ev, 0});
  return false;
}

void TcpEndpoint::disarm(std::span<const pollfd> polled) {
  if (poll_slot_ >= 0 && static_cast<size_t>(poll_slot_) < polled.size() &&
      polled[poll_slot_].fd == fd_.get() &&
      (polled[poll_slot_].revents & (POLLRDHUP | POLLHUP | POLLERR)))
    peer_hung_up_ = true;
  poll_slot_ = -1;
}

}  // namespace braid
