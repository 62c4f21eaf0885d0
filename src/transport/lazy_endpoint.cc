#include "transport/lazy_endpoint.h"

#include <utility>

namespace braid {

LazyEndpoint::LazyEndpoint(std::unique_ptr<PeerConnector> connector)
    : connector_(std::move(connector)) {}

LazyEndpoint::~LazyEndpoint() = default;

Status LazyEndpoint::connect() {
  if (real_) return Status::Ok();
  if (!failed_.ok()) return failed_;
  auto r = connector_->progress();
  if (!r.ok()) {
    failed_ = r.status();
    return failed_;
  }
  if (!*r) return Status::Ok();
  adopt(std::move(*r));
  hold_reads_ = true;  // until this rank has had its chance to send (holdRead())
  return Status::Ok();
}

void LazyEndpoint::adopt(std::unique_ptr<Endpoint> ep) {
  real_ = std::move(ep);
  real_->setTransport(transport());
  real_ptr_.store(real_.get(), std::memory_order_release);
  connector_.reset();  // (its sockets are the endpoint's now)
}

Result<size_t> LazyEndpoint::send(const void* data, size_t len) {
  BRAID_RETURN_IF_ERROR(connect());
  if (!real_) return size_t{0};
  hold_reads_ = false;
  return real_->send(data, len);
}

Result<size_t> LazyEndpoint::sendv(std::span<const iovec> parts) {
  BRAID_RETURN_IF_ERROR(connect());
  if (!real_) return size_t{0};
  hold_reads_ = false;
  return real_->sendv(parts);
}

bool LazyEndpoint::cork(std::span<const iovec> parts, uint64_t* end) {
  // Not up: the caller sends the message itself, which takes nothing until the connection is.
  if (!connect().ok() || !real_) return false;
  hold_reads_ = false;
  return real_->cork(parts, end);
}

Status LazyEndpoint::flush() {
  return real_ ? real_->flush() : Status::Ok();  // nothing was corked before the connection
}

uint64_t LazyEndpoint::flushedThrough() const {
  return real_ ? real_->flushedThrough() : 0;
}

// Once the connection is up, the first receive reads nothing unless a send came first. The peer
// may have connected and sent at once, while this rank's own first message on the endpoint (its
// call agreement, say) could not leave before the connection existed: the engine's next pass
// tries every transfer of the step, so that message leaves before anything received is acted on,
// as when connections were made at init. Otherwise a rank that happened to read first would
// judge the peer's message before its own went out, and the peer would hear only that it failed,
// not why (the two ranks' first messages are how each learns how the other called).
bool LazyEndpoint::holdRead() {
  if (!hold_reads_) return false;
  hold_reads_ = false;
  return true;
}

Result<size_t> LazyEndpoint::recv(void* data, size_t len) {
  BRAID_RETURN_IF_ERROR(connect());
  if (!real_ || holdRead()) return size_t{0};
  return real_->recv(data, len);
}

Result<std::span<const std::byte>> LazyEndpoint::peek(size_t max) {
  BRAID_RETURN_IF_ERROR(connect());
  if (!real_ || holdRead()) return std::span<const std::byte>();
  return real_->peek(max);
}

void LazyEndpoint::consume(size_t len) {
  if (real_) real_->consume(len);  // (else peek() showed nothing to consume)
}

bool LazyEndpoint::arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) {
  armed_real_ = false;
  // A connection that failed is progress: the next call reports the error.
  if (!connect().ok()) return true;
  if (real_) {
    armed_real_ = true;
    // (A held read is progress: the next receive reads.)
    return real_->arm(want_send, want_recv, fds) || (hold_reads_ && want_recv);
  }
  connector_->arm(fds);
  return false;
}

void LazyEndpoint::disarm(std::span<const pollfd> polled) {
  // The connector looks at its sockets itself on its next step (progress() polls them).
  if (armed_real_) real_->disarm(polled);
  armed_real_ = false;
}

void LazyEndpoint::shutdown() {
  if (real_) return real_->shutdown();
  if (!failed_.ok() || !connector_) return;
  // The peer may hold a connection this rank never used (it connected for an operation this rank
  // had not reached): mark that one as shut down, or the peer would take this rank's exit for a
  // crash and blame it.
  if (auto ready = connector_->takeReady()) {
    adopt(std::move(ready));
    return real_->shutdown();
  }
  // Not connected: there is no stream to mark. The peer, if it waits for this connection,
  // hears of the failure through the failure notices (core/net/failure_notice.h).
  failed_ = AbortedError(connector_->describe() + " was shut down after a failure on this rank");
  connector_.reset();
}

std::string LazyEndpoint::describe() const {
  if (real_) return real_->describe();
  if (connector_) return connector_->describe();
  return failed_.message();
}

uint64_t LazyEndpoint::bytesSent() const {
  const Endpoint* e = real_ptr_.load(std::memory_order_acquire);
  return e ? e->bytesSent() : 0;
}

uint64_t LazyEndpoint::bytesReceived() const {
  const Endpoint* e = real_ptr_.load(std::memory_order_acquire);
  return e ? e->bytesReceived() : 0;
}

bool LazyEndpoint::hasUnreadBytes() const {
  const Endpoint* e = real_ptr_.load(std::memory_order_acquire);
  return e && e->hasUnreadBytes();
}

}  // namespace braid
