#include "transport/ucx/ucx_endpoint.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/base/log.h"
#include "transport/ucx/ucx_fabric.h"

namespace braid::ucx {
namespace {

constexpr int kKindShift = 61;
constexpr int kRankShift = 40;
constexpr int kChannelShift = 32;
constexpr uint64_t kRankBits = uint64_t{kMaxRanks - 1} << kRankShift;
constexpr uint64_t kChannelBits = uint64_t{kMaxChannels - 1} << kChannelShift;
constexpr uint64_t kSeqBits = 0xffffffffull;
// A stream message: kinds 0-3 (the top bit clear) of one sender, channel and sequence number.
// Kind 3 (a message of the message interface) is matched too, to be reported as out of step.
constexpr uint64_t kStreamMask = (uint64_t{1} << 63) | kRankBits | kChannelBits | kSeqBits;
// The next message-interface message of one sender and channel, of any kind 0-3 (stream bytes or
// a shutdown marker where a message was due are reported) and any sequence number (UCX matches a
// sender's messages in the order they were sent; the number is checked after).
constexpr uint64_t kMessageMask = (uint64_t{1} << 63) | kRankBits | kChannelBits;
// Credit messages of one sender and channel.
constexpr uint64_t kCreditMask = (uint64_t{7} << kKindShift) | kRankBits | kChannelBits;

}  // namespace

uint64_t MakeTag(TagKind kind, int rank, int channel, uint32_t seq) {
  return (static_cast<uint64_t>(kind) << kKindShift) |
         (static_cast<uint64_t>(rank & (kMaxRanks - 1)) << kRankShift) |
         (static_cast<uint64_t>(channel & (kMaxChannels - 1)) << kChannelShift) | seq;
}

TagKind KindOf(uint64_t tag) {
  return static_cast<TagKind>(tag >> kKindShift);
}

uint32_t SeqOf(uint64_t tag) {
  return static_cast<uint32_t>(tag & kSeqBits);
}

// -------------------------------------------------------------------------------- Registration

Registration::~Registration() {
  for (auto& m : mappings)
    if (m.memh) m.context->lib().ucp_mem_unmap(m.context->get(), m.memh);
}

ucp_mem_h Registration::memhFor(const Context& c) const {
  for (const auto& m : mappings)
    if (m.context.get() == &c) return m.memh;
  return nullptr;
}

// ------------------------------------------------------------------------------------ Endpoint

Endpoint::Endpoint(Worker* worker, std::shared_ptr<PeerLink> peer, int my_rank, int channel)
    : worker_(worker),
      peer_(std::move(peer)),
      my_rank_(my_rank),
      channel_(channel),
      credit_large_(CreditsLargeParts(worker->route())) {}

bool Endpoint::windowTakes(uint64_t bytes) const {
  // Below kCreditEvery outstanding, no more credit may come (the receiver returns it in steps of
  // kCreditEvery), so any one message goes then, a large part too: waiting there would wait for
  // ever. What the receiver's UCX may hold unasked stays below kCreditEvery plus that message.
  const uint64_t outstanding = eager_sent_ - eager_credited_;
  return outstanding < kCreditEvery || outstanding + bytes <= kWindowBytes;
}

Endpoint::~Endpoint() {
  Worker::Use use(*worker_);
  const Library& lib = worker_->lib();
  // A message taken off UCX's queue but never received is received into memory of its own, so
  // that UCX gets its descriptor back; requests still in flight go to the worker, which lets
  // the eager sends leave and cancels the rest when the communicator's transport goes.
  if (msg_) {
    auto scratch = std::make_shared<std::vector<std::byte>>(msg_len_);
    ucp_request_param_t p{};
    void* r = lib.ucp_tag_msg_recv_nbx(worker_->get(), scratch->data(), msg_len_, msg_, &p);
    if (UCS_PTR_IS_PTR(r)) worker_->retire(r, scratch, false);
    msg_ = nullptr;
  }
  if (incoming_ && incoming_->req) {
    auto keep = std::make_shared<std::vector<std::byte>>(std::move(buf_));
    worker_->retire(incoming_->req, keep, false);
  }
  // A send the engine never saw accepted (its operation failed): cancelled, not waited for.
  if (out_ && out_->req) worker_->retire(out_->req, nullptr, false);
  // Eager sends the engine counted as sent: they leave first (Worker::closeAll).
  for (auto& e : eager_sends_) worker_->retire(e.req, e.copy, true);
  if (credit_recv_) worker_->retire(credit_recv_, credit_in_, false);
  if (credit_send_) worker_->retire(credit_send_, credit_out_, true);
  for (auto& m : messages_)
    if (m.req) worker_->retire(m.req, nullptr, m.send);
  worker_->touched();
  peer_.reset();  // (under the lock: the last channel's link retires the UCP endpoint)
}

std::string Endpoint::describe() const {
  return "ucx to " + peer_->name() + " channel " + std::to_string(channel_) + " (" +
         RouteName(worker_->route()) + " route)";
}

Status Endpoint::ensureEp(ucp_ep_h* ep) {
  auto r = peer_->ep(channel_);
  if (!r.ok()) return r.status();
  *ep = *r;
  return Status::Ok();
}

Status Endpoint::peerGone(ucs_status_t st, const char* op) {
  // A failure UCX reports on an operation is the peer's (its endpoint failed) unless the peer
  // link says otherwise; the link reports the death once.
  Status f = peer_->fail();
  if (!f.ok()) return f;
  return RemoteError("ucx " + std::string(op) + " with " + peer_->name() +
                     " failed: " + StatusText(st) + " (the peer or its link failed)");
}

Status Endpoint::sendError(ucs_status_t st, const char* what) {
  tx_error_ = peerGone(st, what);
  return tx_error_;
}

// ------------------------------------------------------------------------------------ sending

Result<void*> Endpoint::postTagged(TagKind kind, const iovec* parts, size_t n, bool force_immediate,
                                   bool* refused) {
  if (refused) *refused = false;
  ucp_ep_h ep = nullptr;
  BRAID_RETURN_IF_ERROR(ensureEp(&ep));
  ucp_request_param_t param{};
  const void* buffer = parts[0].iov_base;
  size_t count = parts[0].iov_len;
  if (n > 1) {
    for (size_t i = 0; i < n && i < kMaxParts; ++i) iov_[i] = {parts[i].iov_base, parts[i].iov_len};
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_iov();
    buffer = iov_;
    count = std::min(n, kMaxParts);
  }
  if (force_immediate) param.op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  worker_->touched();
  void* r = worker_->lib().ucp_tag_send_nbx(ep, buffer, count,
                                            MakeTag(kind, my_rank_, channel_, tx_seq_), &param);
  if (UCS_PTR_IS_ERR(r)) {
    if (UCS_PTR_STATUS(r) == UCS_ERR_NO_RESOURCE && force_immediate && refused) {
      *refused = true;  // (nothing was sent)
      return static_cast<void*>(nullptr);
    }
    return sendError(UCS_PTR_STATUS(r), "send");
  }
  return r;
}

Result<bool> Endpoint::advanceSend() {
  const Library& lib = worker_->lib();
  if (!out_->sent && out_->req) {
    ucs_status_t st = lib.ucp_request_check_status(out_->req);
    if (st == UCS_INPROGRESS && worker_->progress() > 0)
      st = lib.ucp_request_check_status(out_->req);
    if (st == UCS_INPROGRESS) return false;
    lib.ucp_request_free(out_->req);
    out_->req = nullptr;
    if (st != UCS_OK) return sendError(st, "send");
  }
  // Completed: UCX copied it (eager; its tcp may still hold it in its own buffer, which any
  // progress sends, the worker's helper thread's too) or the peer has it (rendezvous).
  out_->sent = true;
  return true;
}

Status Endpoint::reapSends() {
  const Library& lib = worker_->lib();
  while (!eager_sends_.empty()) {
    const ucs_status_t st = lib.ucp_request_check_status(eager_sends_.front().req);
    if (st == UCS_INPROGRESS) break;
    lib.ucp_request_free(eager_sends_.front().req);
    eager_sends_.pop_front();
    if (st != UCS_OK) return sendError(st, "send");
  }
  if (credit_send_ && lib.ucp_request_check_status(credit_send_) != UCS_INPROGRESS) {
    lib.ucp_request_free(credit_send_);
    credit_send_ = nullptr;
    // Credit earned while that one was on its way goes now: the peer may wait for it.
    BRAID_RETURN_IF_ERROR(sendCredit());
  }
  return pollCredit();
}

Status Endpoint::pollCredit() {
  if (eager_sent_ == 0) return Status::Ok();  // nothing sent eagerly, no credit to come
  const Library& lib = worker_->lib();
  for (int i = 0; i < 16; ++i) {
    if (credit_recv_) {
      const ucs_status_t st = lib.ucp_request_check_status(credit_recv_);
      if (st == UCS_INPROGRESS) return Status::Ok();
      lib.ucp_request_free(credit_recv_);
      credit_recv_ = nullptr;
      if (st != UCS_OK) return sendError(st, "credit receive");
      eager_credited_ = std::max(eager_credited_, *credit_in_);
    }
    if (!credit_in_) credit_in_ = std::make_shared<uint64_t>(0);
    ucp_tag_recv_info_t info{};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
    param.recv_info.tag_info = &info;
    worker_->touched();
    void* r = lib.ucp_tag_recv_nbx(worker_->get(), credit_in_.get(), sizeof(uint64_t),
                                   MakeTag(TagKind::kCredit, peer_->info().rank, channel_, 0),
                                   kCreditMask, &param);
    if (UCS_PTR_IS_ERR(r)) return sendError(UCS_PTR_STATUS(r), "credit receive");
    if (r) {
      credit_recv_ = r;
      continue;  // (it may have completed already: look once more)
    }
    eager_credited_ = std::max(eager_credited_, *credit_in_);
  }
  return Status::Ok();
}

Status Endpoint::sendCredit() {
  if (eager_taken_ - credit_sent_ < kCreditEvery || credit_send_) return Status::Ok();
  if (!credit_out_) credit_out_ = std::make_shared<uint64_t>(0);
  *credit_out_ = eager_taken_;
  ucp_ep_h ep = nullptr;
  BRAID_RETURN_IF_ERROR(ensureEp(&ep));
  ucp_request_param_t param{};
  worker_->touched();
  void* r =
      worker_->lib().ucp_tag_send_nbx(ep, credit_out_.get(), sizeof(uint64_t),
                                      MakeTag(TagKind::kCredit, my_rank_, channel_, 0), &param);
  if (UCS_PTR_IS_ERR(r))
    return RemoteError("ucx: credit to " + peer_->name() + ": " + StatusText(UCS_PTR_STATUS(r)));
  credit_send_ = r;
  credit_sent_ = eager_taken_;
  return Status::Ok();
}

Result<size_t> Endpoint::send(const void* data, size_t len) {
  const iovec one{const_cast<void*>(data), len};
  return sendv(std::span<const iovec>(&one, 1));
}

Result<size_t> Endpoint::sendv(std::span<const iovec> parts) {
  Worker::Use use(*worker_);
  return sendLocked(parts);
}

Result<size_t> Endpoint::sendLocked(std::span<const iovec> parts) {
  if (!tx_error_.ok()) return tx_error_;
  BRAID_RETURN_IF_ERROR(reapSends());
  size_t first = 0;
  while (first < parts.size() && parts[first].iov_len == 0) ++first;
  if (first == parts.size()) return size_t{0};
  if (out_) {
    // The engine offers the same bytes again until they are taken (ucx_endpoint.h).
    if (parts[first].iov_base != out_->first || parts[first].iov_len != out_->first_len) {
      tx_error_ = InternalError(describe() +
                                ": the stream's sender offered other bytes while a send was in "
                                "flight; the stream is out of step");
      return tx_error_;
    }
    BRAID_ASSIGN_OR_RETURN(bool done, advanceSend());
    if (!done && !peer_->failure().ok()) {
      // The peer went with this send under way: it never completes.
      for (int i = 0; i < 1000 && worker_->progress() > 0; ++i) {
      }
      BRAID_ASSIGN_OR_RETURN(done, advanceSend());
      if (!done) return tx_error_ = peer_->fail();
    }
    if (!done) return size_t{0};
    const size_t n = out_->total;
    out_.reset();
    countSent(n);
    return n;
  }
  if (Status f = peer_->failure(); !f.ok()) {
    // What the peer sent before it went comes first: its last message may say why it went (a
    // goodbye: it left the communicator). While some is still here unread, the stream takes
    // nothing (bounded), so that the operation reads it instead of failing on the send.
    const int64_t now = NowMicros();
    if (gone_with_bytes_us_ == 0) gone_with_bytes_us_ = now;
    if (now - gone_with_bytes_us_ < kGoneReadFirstUs && rx_error_.ok() &&
        (tail_ > head_ || incoming_ || msg_ || [&] {
          auto more = probeNext();
          return more.ok() && *more;
        }()))
      return size_t{0};
    tx_error_ = peer_->fail();
    return tx_error_;
  }
  // Small parts gathered into one eager message; a large part alone, as a rendezvous.
  iovec gather[kMaxParts];
  size_t k = 0, total = 0;
  for (size_t i = first; i < parts.size() && k < kMaxParts; ++i) {
    const size_t len = parts[i].iov_len;
    if (len == 0) continue;
    if (len >= kInPlaceBytes || total + len > kMaxEagerBytes) break;
    gather[k++] = parts[i];
    total += len;
  }
  if (k > 0) {
    // Eager: accepted at once, as a socket takes bytes. UCX sends it from the engine's memory
    // when it can complete at once; otherwise from braid's copy, which the send keeps until UCX
    // is done (and the peer gets it however this rank's operation ends: it is in the stream).
    if (!windowTakes(total)) {
      credit_need_ = total;
      if (worker_->progress() > 0) BRAID_RETURN_IF_ERROR(reapSends());
      if (!windowTakes(total)) return size_t{0};
    }
    bool refused = false;
    BRAID_ASSIGN_OR_RETURN(void* req, postTagged(TagKind::kEager, gather, k, true, &refused));
    if (refused) {
      auto copy = std::make_shared<std::vector<std::byte>>(total);
      size_t at = 0;
      for (size_t i = 0; i < k; ++i) {
        std::memcpy(copy->data() + at, gather[i].iov_base, gather[i].iov_len);
        at += gather[i].iov_len;
      }
      const iovec whole{copy->data(), total};
      BRAID_ASSIGN_OR_RETURN(req, postTagged(TagKind::kEager, &whole, 1, false, nullptr));
      if (req) eager_sends_.push_back({req, std::move(copy)});
    }
    ++tx_seq_;
    eager_sent_ += total;
    credit_need_ = 0;
    countSent(total);
    return total;
  }
  // A large part alone, from the engine's memory: accepted once UCX completed it (a rendezvous:
  // the receiver has it), when the engine offers the same bytes again. Where the route sends it
  // eagerly (CreditsLargeParts) it is credited like the small ones: the window bounds what the
  // receiver's UCX may hold unasked.
  gather[k++] = parts[first];
  total = parts[first].iov_len;
  if (credit_large_ && !windowTakes(total)) {
    credit_need_ = total;
    if (worker_->progress() > 0) BRAID_RETURN_IF_ERROR(reapSends());
    if (!windowTakes(total)) return size_t{0};
  }
  BRAID_ASSIGN_OR_RETURN(void* req, postTagged(TagKind::kInPlace, gather, 1, false, nullptr));
  ++tx_seq_;
  if (credit_large_) {
    eager_sent_ += total;
    credit_need_ = 0;
  }
  out_ = Outgoing{gather[0].iov_base, gather[0].iov_len, total, req, false};
  BRAID_ASSIGN_OR_RETURN(bool done, advanceSend());
  if (!done) return size_t{0};
  out_.reset();
  countSent(total);
  return total;
}

void Endpoint::settle(int64_t max_ms) {
  Worker::Use use(*worker_);
  const Library& lib = worker_->lib();
  const Deadline until = Deadline::After(max_ms);
  while (!eager_sends_.empty() && !until.expired() && reapSends().ok())
    if (!eager_sends_.empty() && worker_->progress() == 0) std::this_thread::yield();
  // What UCX completed may still sit in its transport's buffer (tcp): flushed, it has left.
  ucp_ep_h ep = nullptr;
  if (!peer_->failure().ok() || !ensureEp(&ep).ok()) return;
  ucp_request_param_t param{};
  void* f = lib.ucp_ep_flush_nbx(ep, &param);
  if (!UCS_PTR_IS_PTR(f)) return;
  while (lib.ucp_request_check_status(f) == UCS_INPROGRESS && !until.expired())
    if (worker_->progress() == 0) std::this_thread::yield();
  if (lib.ucp_request_check_status(f) == UCS_INPROGRESS)
    worker_->retire(f, nullptr, false);
  else
    lib.ucp_request_free(f);
}

void Endpoint::shutdown() {
  Worker::Use use(*worker_);
  if (shut_down_) return;
  shut_down_ = true;
  // The marker is the stream's last message: the peer reads what came before, then fails with
  // "shut the stream down". Without a live link to the peer there is nothing to mark.
  if (peer_->failure().ok() && tx_error_.ok()) {
    const iovec none{nullptr, 0};
    auto r = postTagged(TagKind::kShutdown, &none, 1, false, nullptr);
    ++tx_seq_;
    // Briefly, as TCP waits for room for its marker: out now if the link takes it (this is the
    // error path); otherwise it leaves with the worker's next progress, at the latest when the
    // communicator is destroyed.
    Deadline until = Deadline::After(kShutdownMarkerWaitMs);
    while (r.ok() && *r && worker_->lib().ucp_request_check_status(*r) == UCS_INPROGRESS &&
           !until.expired())
      if (worker_->progress() == 0) std::this_thread::yield();
    if (r.ok() && *r) worker_->retire(*r, nullptr, true);
  }
  // A receive into the engine's memory under way: cancelled where UCX still can (the operation
  // that owns the memory has failed, and its caller may reuse it).
  if (incoming_ && incoming_->direct && incoming_->req)
    worker_->lib().ucp_request_cancel(worker_->get(), incoming_->req);
  Status local = AbortedError(describe() + " was shut down after a failure on this rank");
  if (tx_error_.ok()) tx_error_ = local;
  if (rx_error_.ok()) rx_error_ = local;
  if (!messages_failed_) (void)failMessages(local);
}

// ---------------------------------------------------------------------------------- receiving

Result<bool> Endpoint::probeNext() {
  if (msg_) return true;
  const Library& lib = worker_->lib();
  const uint64_t tag = MakeTag(TagKind::kEager, peer_->info().rank, channel_, rx_seq_);
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h m = lib.ucp_tag_probe_nb(worker_->get(), tag, kStreamMask, 1, &info);
  if (!m && worker_->progress() > 0)
    m = lib.ucp_tag_probe_nb(worker_->get(), tag, kStreamMask, 1, &info);
  if (!m) return false;
  ++rx_seq_;
  const TagKind kind = KindOf(info.sender_tag);
  if (kind == TagKind::kShutdown || kind == TagKind::kMessage) {
    // Received (it frees UCX's descriptor), not delivered.
    ucp_request_param_t p{};
    worker_->touched();
    void* r = lib.ucp_tag_msg_recv_nbx(worker_->get(), nullptr, 0, m, &p);
    if (UCS_PTR_IS_PTR(r)) worker_->retire(r, nullptr, false);
    if (kind == TagKind::kShutdown) {
      peer_shut_down_ = true;
    } else {
      rx_error_ = RemoteError(describe() +
                              ": a message of the message interface arrived on the byte stream; "
                              "the stream is out of step");
    }
    return false;
  }
  msg_ = m;
  msg_len_ = info.length;
  msg_kind_ = kind;
  return true;
}

Status Endpoint::received(uint64_t bytes, TagKind kind) {
  if (kind != TagKind::kEager && !(credit_large_ && kind == TagKind::kInPlace)) return Status::Ok();
  eager_taken_ += bytes;
  return sendCredit();
}

void Endpoint::compact(size_t need) {
  if (head_ > 0) {
    std::memmove(buf_.data(), buf_.data() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  if (buf_.size() < tail_ + need) buf_.resize(std::max(tail_ + need, size_t{64} << 10));
}

Status Endpoint::fetch() {
  if (!rx_error_.ok()) return rx_error_;
  const Library& lib = worker_->lib();
  if (incoming_) {
    if (incoming_->direct)
      return rx_error_ = InternalError(describe() +
                                       ": a view of the stream was asked for while a receive "
                                       "into the caller's memory was in flight; out of step");
    if (!incoming_->done) {
      ucp_tag_recv_info_t info{};
      ucs_status_t st = lib.ucp_tag_recv_request_test(incoming_->req, &info);
      if (st == UCS_INPROGRESS && worker_->progress() > 0)
        st = lib.ucp_tag_recv_request_test(incoming_->req, &info);
      if (st == UCS_INPROGRESS) return Status::Ok();
      lib.ucp_request_free(incoming_->req);
      incoming_->req = nullptr;
      if (st != UCS_OK) return rx_error_ = peerGone(st, "recv");
    }
    tail_ += incoming_->len;
    const Incoming done = *incoming_;
    incoming_.reset();
    unread_.store(true, std::memory_order_relaxed);
    return received(done.len, done.kind);
  }
  BRAID_ASSIGN_OR_RETURN(bool got, probeNext());
  if (!got) return rx_error_;
  compact(msg_len_);
  ucp_tag_recv_info_t info{};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
  param.recv_info.tag_info = &info;
  worker_->touched();
  void* r = lib.ucp_tag_msg_recv_nbx(worker_->get(), buf_.data() + tail_, msg_len_, msg_, &param);
  msg_ = nullptr;
  if (UCS_PTR_IS_ERR(r)) return rx_error_ = peerGone(UCS_PTR_STATUS(r), "recv");
  if (r) {
    incoming_ = Incoming{r, msg_len_, msg_kind_, nullptr, 0, false};
    return Status::Ok();
  }
  tail_ += msg_len_;
  unread_.store(true, std::memory_order_relaxed);
  return received(msg_len_, msg_kind_);
}

Status Endpoint::endOfStream() {
  if (!rx_error_.ok()) return rx_error_;
  if (peer_shut_down_) {
    // Weak: the peer's own notice (failure_notice.h), when it sent one, names the real cause.
    peer_->report(FailureCause::Reason::kShutDown);
    rx_error_ =
        RemoteError(peer_->name() + " shut the stream down after a failure of its own operation");
    return rx_error_;
  }
  if (Status f = peer_->failure(); !f.ok()) {
    // What the peer sent before it went may still be on its way through this worker (a message's
    // later fragments, a FIFO entry not yet read): the stream ends only once nothing more comes.
    for (int i = 0; i < 1000 && worker_->progress() > 0; ++i) {
    }
    if (incoming_) {
      // A message already under way: finished now, or never (its sender went mid-way).
      ucp_tag_recv_info_t info{};
      if (incoming_->done ||
          worker_->lib().ucp_tag_recv_request_test(incoming_->req, &info) != UCS_INPROGRESS)
        return Status::Ok();
    } else if (auto more = probeNext(); more.ok() && *more) {
      return Status::Ok();
    }
    rx_error_ = peer_->fail();
    return rx_error_;
  }
  return Status::Ok();
}

Result<std::span<const std::byte>> Endpoint::peek(size_t max) {
  Worker::Use use(*worker_);
  // At least min(max, 8) bytes whenever that many arrived (transport.h): messages are appended
  // to what is left of the last one until the view is long enough.
  for (int i = 0; i < 64 && tail_ - head_ < std::min<size_t>(max, 8); ++i) {
    const size_t before = tail_ - head_;
    BRAID_RETURN_IF_ERROR(fetch());
    if (tail_ - head_ == before) break;
  }
  if (tail_ - head_ < max && tail_ - head_ >= 8 && !incoming_) BRAID_RETURN_IF_ERROR(fetch());
  const size_t avail = tail_ - head_;
  if (avail == 0) {
    last_peek_ = 0;
    unread_.store(false, std::memory_order_relaxed);
    BRAID_RETURN_IF_ERROR(endOfStream());
    return std::span<const std::byte>();
  }
  last_peek_ = std::min(avail, max);
  return std::span<const std::byte>(buf_.data() + head_, last_peek_);
}

void Endpoint::consume(size_t len) {
  Worker::Use use(*worker_);
  const size_t n = std::min(len, last_peek_);
  head_ += n;
  countReceived(n);
  last_peek_ = 0;
  if (head_ == tail_) {
    head_ = tail_ = 0;
    unread_.store(false, std::memory_order_relaxed);
  }
}

Result<size_t> Endpoint::recv(void* data, size_t len) {
  Worker::Use use(*worker_);
  size_t got = 0;
  Status st = recvLocked(data, len, &got);
  if (!st.ok()) return st;
  countReceived(got);
  return got;
}

Status Endpoint::recvLocked(void* data, size_t len, size_t* got) {
  last_peek_ = 0;
  *got = 0;
  if (len == 0) return Status::Ok();
  const Library& lib = worker_->lib();
  if (tail_ > head_) {
    *got = std::min(len, tail_ - head_);
    std::memcpy(data, buf_.data() + head_, *got);
    head_ += *got;
    if (head_ == tail_) {
      head_ = tail_ = 0;
      unread_.store(false, std::memory_order_relaxed);
    }
    return Status::Ok();
  }
  if (incoming_ && incoming_->direct) {
    if (incoming_->direct != data || incoming_->direct_len != len)
      return rx_error_ = InternalError(describe() +
                                       ": the stream's reader asked for other bytes while a "
                                       "receive into its memory was in flight; out of step");
    ucp_tag_recv_info_t info{};
    ucs_status_t st = lib.ucp_tag_recv_request_test(incoming_->req, &info);
    if (st == UCS_INPROGRESS && worker_->progress() > 0)
      st = lib.ucp_tag_recv_request_test(incoming_->req, &info);
    if (st == UCS_INPROGRESS && !peer_->failure().ok()) {
      // The sender went mid-way (or its last bytes are still on their way: looked at once more).
      for (int i = 0; i < 1000 && worker_->progress() > 0; ++i) {
      }
      st = lib.ucp_tag_recv_request_test(incoming_->req, &info);
      if (st == UCS_INPROGRESS) return rx_error_ = peer_->fail();
    }
    if (st == UCS_INPROGRESS) return Status::Ok();
    lib.ucp_request_free(incoming_->req);
    const Incoming done = *incoming_;
    incoming_.reset();
    if (st != UCS_OK) return rx_error_ = peerGone(st, "recv");
    *got = done.len;
    return received(done.len, done.kind);
  }
  if (!rx_error_.ok()) return rx_error_;
  if (!incoming_) {
    BRAID_ASSIGN_OR_RETURN(bool have, probeNext());
    if (!have) return endOfStream();
    if (len >= msg_len_) {
      // Straight into the caller's memory: no copy beyond UCX's own (none for a rendezvous on
      // an RDMA device).
      ucp_tag_recv_info_t info{};
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
      param.recv_info.tag_info = &info;
      worker_->touched();
      void* r = lib.ucp_tag_msg_recv_nbx(worker_->get(), data, msg_len_, msg_, &param);
      msg_ = nullptr;
      if (UCS_PTR_IS_ERR(r)) return rx_error_ = peerGone(UCS_PTR_STATUS(r), "recv");
      if (r) {
        incoming_ = Incoming{r, msg_len_, msg_kind_, data, len, false};
        return Status::Ok();
      }
      *got = msg_len_;
      return received(msg_len_, msg_kind_);
    }
  }
  BRAID_RETURN_IF_ERROR(fetch());
  if (tail_ > head_) return recvLocked(data, len, got);
  return Status::Ok();
}

// -------------------------------------------------------------------------------------- waiting

bool Endpoint::readyLocked(bool want_send, bool want_recv) {
  if (!peer_->failure().ok()) return true;
  if (!messages_.empty()) {
    // Messages pending: the stream is not in use (transport.h), and what arrives is theirs. A
    // failure found here is kept for the next test(): what caused it (garbage, a shutdown
    // marker) was taken off UCX's queue and is not seen again.
    const size_t before = completed_.size();
    if (Status st = progressMessages(); !st.ok()) {
      (void)failMessages(st);
      return true;
    }
    return completed_.size() != before;
  }
  if (!reapSends().ok() || !tx_error_.ok() || !rx_error_.ok()) return true;
  if (want_send) {
    if (out_) {
      auto done = advanceSend();
      if (!done.ok() || *done) return true;
    } else if (windowTakes(credit_need_)) {
      // (Ready once the message the window refused fits: not before, or the engine would spin.)
      return true;
    }
  }
  if (want_recv) {
    if (tail_ > head_ || peer_shut_down_) return true;
    if (incoming_) {
      ucp_tag_recv_info_t info{};
      if (worker_->lib().ucp_tag_recv_request_test(incoming_->req, &info) != UCS_INPROGRESS)
        return true;
    } else {
      auto got = probeNext();
      if (!got.ok() || *got || peer_shut_down_ || !rx_error_.ok()) return true;
    }
  }
  return false;
}

bool Endpoint::arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) {
  {
    Worker::Use use(*worker_);
    if (readyLocked(want_send, want_recv)) return true;
  }
  // The communicator's other workers progress too, and wake this rank (Worker::setSiblings).
  bool progressed = false;
  for (Worker* w : worker_->siblings()) {
    Worker::Use use(*w);
    progressed = w->arm(fds) || progressed;
  }
  Worker::Use use(*worker_);
  if (progressed || readyLocked(want_send, want_recv)) return true;
  if (worker_->arm(fds)) return true;
  peer_->addFds(fds);
  return false;
}

void Endpoint::disarm(std::span<const pollfd>) {
  for (Worker* w : worker_->siblings()) {
    Worker::Use use(*w);
    w->disarmed();
  }
  Worker::Use use(*worker_);
  worker_->disarmed();
}

// ------------------------------------------------------------------------------------ messages

Result<uint64_t> Endpoint::postSend(const MemoryRegistration& mem, size_t offset, size_t len) {
  if (mem.owner() != transport())
    return InvalidArgument("postSend on " + describe() +
                           ": the memory is registered with another transport instance "
                           "(register it with the one that made this endpoint)");
  BRAID_RETURN_IF_ERROR(mem.checkSlice(offset, len, "postSend"));
  Worker::Use use(*worker_);
  if (messages_failed_) return *messages_failed_;
  ucp_ep_h ep = nullptr;
  if (Status st = ensureEp(&ep); !st.ok()) return failMessages(st);
  const uint64_t id = next_message_id_++;
  Message m;
  m.id = id;
  m.send = true;
  m.data = mem.base() + offset;
  m.capacity = len;
  m.memh = static_cast<const Registration&>(mem).memhFor(worker_->context());
  ucp_request_param_t param{};
  if (m.memh) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = m.memh;
  }
  worker_->touched();
  void* r = worker_->lib().ucp_tag_send_nbx(
      ep, m.data, len, MakeTag(TagKind::kMessage, my_rank_, channel_, msg_tx_seq_++), &param);
  if (UCS_PTR_IS_ERR(r)) return failMessages(peerGone(UCS_PTR_STATUS(r), "message send"));
  if (!r) {
    completed_[id] = len;
    return id;
  }
  m.req = r;
  messages_.push_back(m);
  return id;
}

Result<uint64_t> Endpoint::postRecv(const MemoryRegistration& mem, size_t offset, size_t len) {
  if (mem.owner() != transport())
    return InvalidArgument("postRecv on " + describe() +
                           ": the memory is registered with another transport instance "
                           "(register it with the one that made this endpoint)");
  BRAID_RETURN_IF_ERROR(mem.checkSlice(offset, len, "postRecv"));
  Worker::Use use(*worker_);
  if (messages_failed_) return *messages_failed_;
  Message m;
  m.id = next_message_id_++;
  m.data = mem.base() + offset;
  m.capacity = len;
  m.memh = static_cast<const Registration&>(mem).memhFor(worker_->context());
  messages_.push_back(m);
  return m.id;  // (matched by test(), where a failure is reported)
}

Status Endpoint::progressMessages() {
  if (messages_failed_) return *messages_failed_;
  Status st = advanceMessages();
  // Completions before a failure are still reported (transport.h).
  for (auto it = messages_.begin(); it != messages_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    completed_[it->id] = it->send ? it->capacity : it->len;
    it = messages_.erase(it);
  }
  return st;
}

Status Endpoint::advanceMessages() {
  if (messages_failed_) return *messages_failed_;
  const Library& lib = worker_->lib();
  worker_->progress();
  // (A peer that went: whatever it sent before is let in first.)
  if (!peer_->failure().ok())
    for (int i = 0; i < 1000 && worker_->progress() > 0; ++i) {
    }
  // Completions, in any order.
  for (auto& m : messages_) {
    if (!m.req) continue;
    ucp_tag_recv_info_t info{};
    const ucs_status_t st =
        m.send ? lib.ucp_request_check_status(m.req) : lib.ucp_tag_recv_request_test(m.req, &info);
    if (st == UCS_INPROGRESS) continue;
    lib.ucp_request_free(m.req);
    m.req = nullptr;
    if (st != UCS_OK) return peerGone(st, m.send ? "message send" : "message receive");
    m.done = true;
  }
  // Matches, in post order: the next message from the peer goes to the oldest receive waiting.
  for (auto& m : messages_) {
    if (m.send || m.matched) continue;
    const uint64_t tag = MakeTag(TagKind::kMessage, peer_->info().rank, channel_, 0);
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h h = lib.ucp_tag_probe_nb(worker_->get(), tag, kMessageMask, 1, &info);
    if (!h) {
      if (peer_->failure().ok()) break;
      // A peer that went may have sent this message before (endOfStream says why to look again).
      for (int i = 0; i < 1000 && worker_->progress() > 0; ++i) {
      }
      h = lib.ucp_tag_probe_nb(worker_->get(), tag, kMessageMask, 1, &info);
      if (!h) return peer_->fail();
    }
    const TagKind kind = KindOf(info.sender_tag);
    const bool fits = kind == TagKind::kMessage && SeqOf(info.sender_tag) == msg_rx_seq_ &&
                      info.length <= m.capacity;
    ucp_request_param_t param{};
    ucp_tag_recv_info_t got{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
    param.recv_info.tag_info = &got;
    if (fits && m.memh) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = m.memh;
    }
    worker_->touched();
    // Anything that does not fit is still received, with no room (UCX frees it): nothing of it
    // reaches the caller's memory.
    void* r = lib.ucp_tag_msg_recv_nbx(worker_->get(), fits ? m.data : nullptr,
                                       fits ? info.length : 0, h, &param);
    if (UCS_PTR_IS_PTR(r) && !fits) worker_->retire(r, nullptr, false);
    if (kind == TagKind::kShutdown) {
      peer_->report(FailureCause::Reason::kShutDown);
      return RemoteError(peer_->name() +
                         " shut the stream down after a failure of its own operation");
    }
    if (kind != TagKind::kMessage)
      return RemoteError("garbage on the message stream from " + describe() +
                         ": stream bytes where a message was due; the stream is out of step");
    if (SeqOf(info.sender_tag) != msg_rx_seq_)
      return RemoteError("garbage on the message stream from " + describe() + ": message #" +
                         std::to_string(SeqOf(info.sender_tag)) + " where #" +
                         std::to_string(msg_rx_seq_) + " was due; the stream is out of step");
    if (!fits)
      return InvalidUsage("a message of " + std::to_string(info.length) + " bytes from " +
                          describe() + " does not fit the receive of " +
                          std::to_string(m.capacity) + " bytes posted for it");
    ++msg_rx_seq_;
    m.matched = true;
    m.len = info.length;
    if (UCS_PTR_IS_ERR(r)) return peerGone(UCS_PTR_STATUS(r), "message receive");
    if (r)
      m.req = r;
    else
      m.done = true;
  }
  // A peer that went leaves what it had not finished sending pending for ever.
  if (!peer_->failure().ok())
    for (const auto& m : messages_)
      if (!m.done && (m.req || !m.matched)) return peer_->fail();
  return Status::Ok();
}

Status Endpoint::failMessages(Status st) {
  if (!messages_failed_) messages_failed_ = st;
  for (auto& m : messages_)
    if (m.req) {
      if (!m.send) worker_->lib().ucp_request_cancel(worker_->get(), m.req);
      worker_->retire(m.req, nullptr, false);
    }
  messages_.clear();
  return *messages_failed_;
}

Result<std::optional<size_t>> Endpoint::test(uint64_t id) {
  Worker::Use use(*worker_);
  if (id == 0 || id >= next_message_id_)
    return InvalidArgument("message " + std::to_string(id) + " was never posted on " + describe());
  auto report = [&]() -> std::optional<size_t> {
    auto it = completed_.find(id);
    if (it == completed_.end()) return std::nullopt;
    const size_t n = it->second;
    completed_.erase(it);
    return n;
  };
  if (auto n = report()) return n;
  if (messages_failed_) return *messages_failed_;
  if (Status st = progressMessages(); !st.ok()) return failMessages(st);
  if (auto n = report()) return n;
  for (const auto& m : messages_)
    if (m.id == id) return std::optional<size_t>();
  return InvalidArgument("message " + std::to_string(id) + " on " + describe() +
                         " was already reported complete");
}

void Endpoint::messageWants(bool* want_send, bool* want_recv) const {
  *want_send = *want_recv = false;
  for (const auto& m : messages_) (m.send ? *want_send : *want_recv) = true;
}

}  // namespace braid::ucx
