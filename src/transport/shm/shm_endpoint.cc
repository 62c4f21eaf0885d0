#include "transport/shm/shm_endpoint.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/base/clock.h"
#include "core/net/doorbell.h"
#include "transport/shm/shm_arena.h"

namespace braid::shm {
namespace {

void CopyIn(const RingRef& r, uint64_t pos, const std::byte* src, size_t n) {
  const uint64_t off = pos & (r.size - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(n, r.size - off));
  std::memcpy(r.data + off, src, first);
  if (n > first) std::memcpy(r.data, src + first, n - first);
}

void CopyOut(const RingRef& r, uint64_t pos, std::byte* dst, size_t n) {
  const uint64_t off = pos & (r.size - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(n, r.size - off));
  std::memcpy(dst, r.data + off, first);
  if (n > first) std::memcpy(dst + first, r.data, n - first);
}

}  // namespace

// ---------------------------------------------------------------------------------- PeerLink

Result<std::shared_ptr<PeerLink>> PeerLink::Open(int rank, int pid, std::string host,
                                                 std::string doorbell, CauseBoard* causes) {
  std::shared_ptr<PeerLink> p(new (std::nothrow) PeerLink());
  if (!p) return SystemError("shm: out of memory");
  p->rank_ = rank;
  p->pid_ = pid;
  p->host_ = std::move(host);
  p->doorbell_ = std::move(doorbell);
  p->causes_ = causes;
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (fd >= 0) {
    p->pidfd_ = OwnedFd(static_cast<int>(fd));  // pidfds are always close-on-exec
  } else if (errno == ESRCH) {
    return p->deathError();
  }
  // Other errors (ENOSYS on old kernels, EMFILE): fall back to polling kill(pid, 0).
#endif
  if (!p->pidfd_.valid() && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
    return p->deathError();
  return p;
}

bool PeerLink::dead() {
  if (dead_.load(std::memory_order_relaxed) || departed() != 0) return true;
  const int64_t now = CoarseNowMicros();  // (checked every few milliseconds: no exact clock)
  if (now < next_check_us_.load(std::memory_order_relaxed)) return false;
  next_check_us_.store(now + kCheckIntervalUs, std::memory_order_relaxed);
  bool gone;
  if (pidfd_.valid()) {
    // A pidfd turns readable when the process exits (whether or not it was reaped).
    pollfd p{pidfd_.get(), POLLIN, 0};
    gone = poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  } else {
    gone = kill(static_cast<pid_t>(pid_), 0) != 0 && errno == ESRCH;
  }
  if (gone) dead_.store(true, std::memory_order_relaxed);
  return gone;
}

void PeerLink::report(FailureCause::Reason reason) const {
  if (!causes_) return;
  FailureCause c;
  c.reason = reason;
  c.rank = rank_;
  c.pid = pid_;
  c.host = host_;
  causes_->offer(c);  // the engine fills in the observer and the operation
}

Status PeerLink::deathError() const {
  if (const uint32_t how = departed(); how != 0) {
    const bool exited = how == static_cast<uint32_t>(FailureCause::Reason::kExited);
    report(exited ? FailureCause::Reason::kExited : FailureCause::Reason::kDestroyed);
    return RemoteError("rank " + std::to_string(rank_) + " (pid " + std::to_string(pid_) +
                       ") on host " + host_ +
                       (exited ? " exited without destroying the communicator"
                               : " destroyed the communicator (braidCommDestroy)") +
                       " before this call reached it");
  }
  report(FailureCause::Reason::kDied);
  return RemoteError("rank " + std::to_string(rank_) + " (pid " + std::to_string(pid_) +
                     ") on host " + host_ + " exited during the operation");
}

// ------------------------------------------------------------------------------- ShmEndpoint

ShmEndpoint::ShmEndpoint(std::shared_ptr<PeerLink> peer, RingRef tx, RingRef rx)
    : peer_(std::move(peer)), tx_(std::move(tx)), rx_(std::move(rx)) {
  tx_head_ = tx_.ctl->head.load(std::memory_order_relaxed);
  tx_tail_cache_ = tx_.ctl->tail.load(std::memory_order_acquire);
  rx_tail_ = rx_.ctl->tail.load(std::memory_order_relaxed);
  rx_head_cache_ = rx_tail_;
}

ShmEndpoint::~ShmEndpoint() = default;

Status ShmEndpoint::corruptError(const char* which, uint64_t used, uint64_t size) const {
  peer_->report(FailureCause::Reason::kCorrupt);
  return RemoteError("shm ring " + std::string(which) + " rank " + std::to_string(peer_->rank()) +
                     " (pid " + std::to_string(peer_->pid()) +
                     ") is corrupt: " + std::to_string(used) + " bytes in flight in a ring of " +
                     std::to_string(size));
}

Status ShmEndpoint::claimTx() {
  auto* arena = reinterpret_cast<ArenaControl*>(tx_.map->base() + tx_.layout.arenaControlOffset());
  auto area = ClaimRingArea(arena, tx_.layout);
  if (!area.ok())
    return RemoteError("shm segment of rank " + std::to_string(peer_->rank()) + " (pid " +
                       std::to_string(peer_->pid()) + "): " + area.status().message());
  // Published to the reader by the release store of head that follows the first bytes.
  tx_.ctl->data_offset.store(area->offset, std::memory_order_relaxed);
  tx_.ctl->data_bytes.store(area->bytes, std::memory_order_relaxed);
  tx_.data = tx_.map->base() + area->offset;
  tx_.size = area->bytes;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and fault lazily
#endif
  // The pages are reserved by the reader already: map them in one call rather than fault each.
  const uint64_t begin = area->offset / kPageBytes * kPageBytes;
  (void)madvise(tx_.map->base() + begin, area->offset + area->bytes - begin, MADV_POPULATE_WRITE);
  return Status::Ok();
}

Result<size_t> ShmEndpoint::send(const void* data, size_t len) {
  // A dead reader will never consume: fail now rather than when the ring fills. A peer that shut
  // the stream down before it exited failed first on its own: say so (the truer cause) rather
  // than that it exited.
  if (peer_->dead())
    return tx_.ctl->reader_closed.load(std::memory_order_acquire) ? closedError()
                                                                  : peer_->deathError();
  if (len == 0) return size_t{0};
  if (!tx_.data) BRAID_RETURN_IF_ERROR(claimTx());
  uint64_t used = tx_head_ - tx_tail_cache_;
  if (tx_.size - used < len) {
    tx_tail_cache_ = tx_.ctl->tail.load(std::memory_order_acquire);
    used = tx_head_ - tx_tail_cache_;
    if (used > tx_.size) return corruptError("to", used, tx_.size);
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, tx_.size - used));
  // A reader that shut down never consumes again: fail once we would block on it (not before,
  // so the peer's own messages, e.g. a mismatch report, are still read on this side first).
  if (n == 0)
    return tx_.ctl->reader_closed.load(std::memory_order_acquire) ? Result<size_t>(closedError())
                                                                  : size_t{0};
  CopyIn(tx_, tx_head_, static_cast<const std::byte*>(data), n);
  tx_head_ += n;
  countSent(n);
  tx_.ctl->head.store(tx_head_, std::memory_order_release);
  // Pairs with the fence in arm(): either we see reader_sleeping, or the reader sees our head.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (tx_.ctl->reader_sleeping.load(std::memory_order_relaxed) != 0 &&
      tx_.ctl->reader_sleeping.exchange(0, std::memory_order_relaxed) != 0)
    Doorbell::Ring(peer_->doorbell());
  return n;
}

bool ShmEndpoint::refreshHead() {
  rx_head_cache_ = rx_.ctl->head.load(std::memory_order_acquire);
  return checkHead();
}

bool ShmEndpoint::checkHead() {
  if (rx_head_cache_ == rx_tail_) return true;
  if (!rx_.data) {
    // The first bytes: the writer claimed the area before it published them (shm_arena.h).
    const RingArea area{rx_.ctl->data_offset.load(std::memory_order_relaxed),
                        rx_.ctl->data_bytes.load(std::memory_order_relaxed)};
    if (!IsValidRingArea(area, rx_.layout)) return false;
    rx_.data = rx_.map->base() + area.offset;
    rx_.size = area.bytes;
  }
  return rx_head_cache_ - rx_tail_ <= rx_.size;
}

Status ShmEndpoint::closedError() const {
  // Weak: the peer's own notice (failure_notice.h), when it sent one, names the real cause.
  peer_->report(FailureCause::Reason::kShutDown);
  return RemoteError("rank " + std::to_string(peer_->rank()) + " (pid " +
                     std::to_string(peer_->pid()) + ") on host " + peer_->host() +
                     " shut the stream down after a failure of its own operation");
}

void ShmEndpoint::shutdown() {
  tx_.ctl->writer_closed.store(1, std::memory_order_release);
  rx_.ctl->reader_closed.store(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  Doorbell::Ring(peer_->doorbell());
}

Status ShmEndpoint::emptyStatus() {
  // The peer shut the stream down and everything it sent has been read.
  if (rx_.ctl->writer_closed.load(std::memory_order_acquire)) {
    if (!refreshHead()) return corruptError("from", rx_head_cache_ - rx_tail_, rx_.size);
    if (rx_head_cache_ == rx_tail_) return closedError();
  }
  if (!peer_->dead()) return Status::Ok();
  // Bytes the peer published before it died are still ours to read.
  if (!refreshHead()) return corruptError("from", rx_head_cache_ - rx_tail_, rx_.size);
  if (rx_head_cache_ != rx_tail_) return Status::Ok();
  return peer_->deathError();
}

void ShmEndpoint::advanceTail(uint64_t n) {
  rx_tail_ += n;
  countReceived(n);
  rx_.ctl->tail.store(rx_tail_, std::memory_order_release);
  // Pairs with the fence in arm() on the writer's side.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (rx_.ctl->writer_sleeping.load(std::memory_order_relaxed) != 0 &&
      rx_.ctl->writer_sleeping.exchange(0, std::memory_order_relaxed) != 0)
    Doorbell::Ring(peer_->doorbell());
}

Result<bool> ShmEndpoint::firstBytes() {
  if (!refreshHead()) return corruptError("from", rx_head_cache_ - rx_tail_, rx_.size);
  if (!rx_.data) BRAID_RETURN_IF_ERROR(emptyStatus());
  return rx_.data != nullptr;
}

Result<size_t> ShmEndpoint::recv(void* data, size_t len) {
  peek_len_ = 0;
  if (len == 0) return size_t{0};
  if (!rx_.data) {
    BRAID_ASSIGN_OR_RETURN(const bool arrived, firstBytes());
    if (!arrived) return size_t{0};
  }
  uint64_t avail = rx_head_cache_ - rx_tail_;
  if (avail < len) {
    if (!refreshHead()) return corruptError("from", rx_head_cache_ - rx_tail_, rx_.size);
    avail = rx_head_cache_ - rx_tail_;
    if (avail == 0) {
      BRAID_RETURN_IF_ERROR(emptyStatus());
      avail = rx_head_cache_ - rx_tail_;
      if (avail == 0) return size_t{0};
    }
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, avail));
  CopyOut(rx_, rx_tail_, static_cast<std::byte*>(data), n);
  advanceTail(n);
  return n;
}

Result<std::span<const std::byte>> ShmEndpoint::peek(size_t max) {
  peek_len_ = 0;
  if (max == 0) return std::span<const std::byte>();
  if (!rx_.data) {
    BRAID_ASSIGN_OR_RETURN(const bool arrived, firstBytes());
    if (!arrived) return std::span<const std::byte>();
  }
  uint64_t avail = rx_head_cache_ - rx_tail_;
  const uint64_t off = rx_tail_ & (rx_.size - 1);
  if (avail < std::min<uint64_t>(max, rx_.size - off)) {
    if (!refreshHead()) return corruptError("from", rx_head_cache_ - rx_tail_, rx_.size);
    avail = rx_head_cache_ - rx_tail_;
    if (avail == 0) {
      BRAID_RETURN_IF_ERROR(emptyStatus());
      avail = rx_head_cache_ - rx_tail_;
      if (avail == 0) return std::span<const std::byte>();
    }
  }
  const size_t contiguous =
      static_cast<size_t>(std::min<uint64_t>({avail, rx_.size - off, uint64_t{max}}));
  const size_t need = static_cast<size_t>(std::min<uint64_t>({avail, uint64_t{max}, 8}));
  if (contiguous < need) {
    // Only when a short run is split by the wrap point (see the class comment).
    CopyOut(rx_, rx_tail_, bounce_, need);
    peek_len_ = need;
    return std::span<const std::byte>(bounce_, need);
  }
  peek_len_ = contiguous;
  return std::span<const std::byte>(rx_.data + off, contiguous);
}

void ShmEndpoint::consume(size_t len) {
  // Never past what peek() offered: that much is known to be published.
  const size_t n = std::min(len, peek_len_);
  peek_len_ = 0;
  if (n > 0) advanceTail(n);
}

bool ShmEndpoint::arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) {
  bool ready = false;
  // Flag first, fence, then re-check: a writer that publishes after our check sees the flag
  // (its fence pairs with ours), so the wake-up cannot be lost.
  if (want_recv) {
    armed_recv_ = true;
    rx_.ctl->reader_sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // recv() / peek() refresh the cached head themselves (attaching the data area on the first
    // bytes, reporting an impossible counter).
    if (rx_.ctl->head.load(std::memory_order_acquire) != rx_tail_) ready = true;
  }
  if (want_send) {
    armed_send_ = true;
    tx_.ctl->writer_sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    tx_tail_cache_ = tx_.ctl->tail.load(std::memory_order_acquire);
    // An unclaimed ring always has room: the claim never fails on a sound segment.
    if (!tx_.data || tx_head_ - tx_tail_cache_ < tx_.size) ready = true;
  }
  // A dead peer is progress too: the next call reports it.
  if ((want_send || want_recv) && peer_->dead()) ready = true;
  if (want_recv && rx_.ctl->writer_closed.load(std::memory_order_acquire)) ready = true;
  if (want_send && tx_.ctl->reader_closed.load(std::memory_order_acquire)) ready = true;
  if (ready) {
    disarm({});
    return true;
  }
  if ((want_send || want_recv) && peer_->pidfd() >= 0) {
    const bool present = std::any_of(fds.begin(), fds.end(),
                                     [&](const pollfd& p) { return p.fd == peer_->pidfd(); });
    if (!present) fds.push_back(pollfd{peer_->pidfd(), POLLIN, 0});
  }
  return false;
}

void ShmEndpoint::disarm(std::span<const pollfd>) {
  if (armed_recv_) rx_.ctl->reader_sleeping.store(0, std::memory_order_relaxed);
  if (armed_send_) tx_.ctl->writer_sleeping.store(0, std::memory_order_relaxed);
  armed_recv_ = armed_send_ = false;
}

std::string ShmEndpoint::describe() const {
  return "shm to rank " + std::to_string(peer_->rank()) + " (host " + peer_->host() + ", pid " +
         std::to_string(peer_->pid()) + ")";
}

}  // namespace braid::shm
