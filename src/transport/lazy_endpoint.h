// Connections made when a schedule first needs them (BRAID_LAZY_CONNECT, transport.h).
//
// A transport that connects lazily hands the communicator a LazyEndpoint per (peer, channel)
// at init and opens nothing. The first call that touches the endpoint (a send, a receive, an
// arm before the engine sleeps) drives its PeerConnector one non-blocking step at a time from
// the engine's own loop; once the connection is up, every call goes straight to the real
// endpoint. So a communicator of N ranks whose schedules talk to k neighbours holds k
// connections, not N - 1, and nothing in the engine knows the difference: a connection that is
// not up yet looks like a stream that has no room and no bytes.
//
// Both ends of a pair use the endpoint in the same operation (every transfer has a sender and a
// receiver), so whichever side connects finds the other driving its side in time; a peer that
// never calls the operation is the engine's stall, as for any stream. A connection that cannot
// be made is an error of the call that needed it, naming the peer.
#pragma once

#include <poll.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "transport/transport.h"

namespace braid {

// One pending connection to one (peer, channel), made by the transport that knows how.
class PeerConnector {
 public:
  virtual ~PeerConnector() = default;
  // Moves the connection on without blocking: the endpoint once it is up, null while it is
  // pending, an error (naming the peer) when it cannot be made.
  virtual Result<std::unique_ptr<Endpoint>> progress() = 0;
  // Appends what to sleep on while it is pending (sockets it waits for).
  virtual void arm(std::vector<pollfd>& fds) = 0;
  // The endpoint if the connection is complete on this side already (the peer made it, or this
  // rank's attempt finished), without starting or moving anything; null otherwise. For a
  // shutdown: the peer must hear of it on a connection it holds, as it would on one made at init.
  virtual std::unique_ptr<Endpoint> takeReady() = 0;
  // "tcp to rank 3 on host h (10.0.0.3:5123), channel 1, not connected yet (...)"
  virtual std::string describe() const = 0;
};

class LazyEndpoint final : public Endpoint {
 public:
  explicit LazyEndpoint(std::unique_ptr<PeerConnector> connector);
  ~LazyEndpoint() override;

  Result<size_t> send(const void* data, size_t len) override;
  Result<size_t> sendv(std::span<const iovec> parts) override;
  bool cork(std::span<const iovec> parts, uint64_t* end) override;
  Status flush() override;
  void settle(int64_t max_ms) override {
    if (real_) real_->settle(max_ms);
  }
  uint64_t flushedThrough() const override;
  Result<size_t> recv(void* data, size_t len) override;
  Result<std::span<const std::byte>> peek(size_t max) override;
  void consume(size_t len) override;
  bool arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) override;
  void disarm(std::span<const pollfd> polled) override;
  void shutdown() override;
  std::string describe() const override;
  bool hasUnreadBytes() const override;
  uint64_t bytesSent() const override;  // the connection's (0 before it is up)
  uint64_t bytesReceived() const override;

  // Whether the connection is up (safe from any thread).
  bool connected() const override { return real_ptr_.load(std::memory_order_acquire) != nullptr; }

 private:
  // Drives the connector once; OK with real_ set when up, OK with it null while pending, the
  // connection's error (sticky) when it cannot be made.
  Status connect();
  // Makes `ep` (the connector's, once up) the endpoint every call goes to; drops the connector.
  void adopt(std::unique_ptr<Endpoint> ep);
  // Whether this receive must read nothing (the first after the connection came up, when no send
  // preceded it); clears the hold.
  bool holdRead();

  std::unique_ptr<PeerConnector> connector_;
  std::unique_ptr<Endpoint> real_;
  // real_.get(), published for hasUnreadBytes() and connected() on other threads.
  std::atomic<Endpoint*> real_ptr_{nullptr};
  Status failed_;
  bool armed_real_ = false;  // the last arm() went to real_ (disarm() goes there too)
  bool hold_reads_ = false;  // see holdRead()
};

}  // namespace braid
