#include "transport/tcp/tcp_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/handshake_listener.h"
#include "core/base/log.h"
#include "core/net/socket.h"
#include "core/net/unique_id.h"
#include "transport/lazy_endpoint.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/transport.h"

namespace braid {
namespace {

constexpr uint32_t kPurposeTcpData = 2;
constexpr const char* kBlobPrefix = "tcp1 ";
// Socket buffers (the kernel doubles both). The receive buffer holds a bandwidth-delay product
// of a fast LAN link, so a sender does not stall while its peer is busy reducing. The send
// buffer is smaller: it bounds how far a sender runs ahead of what its peer has taken, and the
// less it runs ahead the more of the kernel's copy is still in cache when the peer reads it.
// Measured over loopback (2 cores, docs/performance.md "Socket buffers"): 512 KiB against the 4
// MiB of both before, 2-rank all-gather 1.05-1.33x faster at 1-256 MiB, all-reduce 1.02-1.24x,
// 4-rank reduce-scatter 1.15-1.28x from 4 MiB; a 512 KiB receive buffer was 0.7x on all-reduce.
// Its 1 MiB in flight per stream still covers 100 Gb/s at an 80 us round trip.
constexpr SocketBuffers kSocketBuffers{.send_bytes = 512 << 10, .recv_bytes = 4 << 20};
// A connect that the peer's listener refused or reset is retried (backoff) this many times.
constexpr int kMaxHandshakeRetries = 5;
// A lazy connection refused this many times in a row is a peer that is gone: its listener lives
// as long as its communicator (the first refusals may be a full backlog).
constexpr int kMaxLazyRefusals = 4;

std::string SecondsText(int64_t ms) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

// Detect a dead host or a cut link without waiting for the kernel's default (minutes):
// keepalive probes on idle connections, TCP_USER_TIMEOUT on unacknowledged data.
void SetLiveness(int fd) {
  int on = 1, idle = 5, intvl = 1, cnt = 4;
  unsigned int user_timeout_ms = 10000;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

Result<sockaddr_storage> ParseBlob(const std::string& blob) {
  return tcp::DecodeBlob(blob);
}

class TcpInstance final : public TransportInstance {
 public:
  explicit TcpInstance(const TransportContext& ctx) : ctx_(ctx) {
    // The communicator's identity inside the handshake: a hash of its tag, which every rank
    // has (no need for the raw nonce here).
    uint8_t digest[SHA256_DIGEST_LENGTH];
    std::string tag = "braid-tcp|" + ctx_.comm_tag;
    {
      CryptoLock lock;
      SHA256(reinterpret_cast<const uint8_t*>(tag.data()), tag.size(), digest);
    }
    std::memcpy(nonce_, digest, sizeof(nonce_));
  }

  // Listens on `addr`: a HandshakeListener, whose thread accepts and authenticates at all times
  // (a stranger is dropped within its 1 s handshake limit whether or not this rank is
  // connecting), with the checks of a data connection for this communicator.
  Status listen(const sockaddr_storage& addr) {
    auto check = [this](const HandshakeHello& h) -> std::string {
      if (h.purpose != kPurposeTcpData)
        return "not a tcp data connection (purpose " + std::to_string(h.purpose) + ")";
      if (std::memcmp(h.comm_nonce, nonce_, sizeof(nonce_)) != 0) return "for another communicator";
      if (h.nranks != ctx_.nranks || h.rank < 0 || h.rank >= ctx_.rank)
        return "rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks) +
               " may not connect to rank " + std::to_string(ctx_.rank);
      if (h.channel < 0 || h.channel >= ctx_.nchannels)
        return "channel " + std::to_string(h.channel) + " is out of range";
      return "";
    };
    HandshakeListener::Options options;
    options.buffers = kSocketBuffers;
    // Every lower rank's channels may arrive before this rank takes them (lazily, or early).
    options.max_ready = static_cast<size_t>(std::max(1, ctx_.rank)) *
                        static_cast<size_t>(std::max(1, ctx_.nchannels));
    BRAID_ASSIGN_OR_RETURN(
        listener_,
        HandshakeListener::Start(addr, ctx_.secret, check,
                                 "tcp: rank " + std::to_string(ctx_.rank) + " data listener",
                                 nullptr, options));
    address_ = FormatAddress(listener_->address());
    return Status::Ok();
  }
  const std::string& address() const { return address_; }
  // Outgoing connections leave from `addr` (the named interface's) too, not from whichever
  // address the routing table gives the peer: where a host routes by source (several NICs on
  // one subnet, as the emulated cluster's --nics), that is what keeps them on this rank's NIC.
  void bindOutgoingTo(const sockaddr_storage& addr) { source_ = addr; }

  std::string localBlob() const override { return tcp::EncodeBlob(address_); }
  const char* name() const override { return "tcp"; }

  bool canConnect(int peer, const std::vector<std::string>& blobs) const override {
    if (peer < 0 || static_cast<size_t>(peer) >= blobs.size() ||
        static_cast<size_t>(ctx_.rank) >= blobs.size())
      return false;
    // Symmetric: both sides look at both blobs.
    return ParseBlob(blobs[peer]).ok() && ParseBlob(blobs[ctx_.rank]).ok();
  }

  Status connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                 Deadline deadline,
                 std::vector<std::vector<std::unique_ptr<Endpoint>>>* out) override;

  ~TcpInstance() override {
    listener_.reset();
    for (auto& [key, fd] : stash_) HangUp(fd.get());
  }

  Status finishConnect() override {
    std::lock_guard<std::mutex> lock(lazy_mu_);
    finished_ = true;
    // Lazy: the listener serves the connections schedules make later, until every lower rank's
    // have arrived (closeListenerWhenAllArrived); connections that arrived early wait in the
    // stash for their endpoint. A rank no lower rank connects to over tcp closes it now.
    if (ctx_.lazy_connect) {
      closeListenerWhenAllArrived();
      return Status::Ok();
    }
    listener_.reset();
    if (!stash_.empty())
      BRAID_WARN("tcp: rank %d: %zu authenticated connections were never used", ctx_.rank,
                 stash_.size());
    for (auto& [key, fd] : stash_) HangUp(fd.get());
    stash_.clear();
    return Status::Ok();
  }

 private:
  struct Outgoing {
    int peer = -1, channel = 0, index = 0;
    sockaddr_storage addr{};
    enum { kIdle, kConnecting, kHandshake, kDone } state = kIdle;
    Fd fd;
    std::unique_ptr<ClientHandshake> hs;
    Clock::time_point retry_at{};
    int backoff_ms = 10;
    int handshake_failures = 0;
    int refusals = 0;  // in a row (lazy connections only: see kMaxLazyRefusals)
    std::string last_error = "no attempt yet";
  };

  TcpPeer peerOf(int rank, int channel) const {
    const auto& blobs = blobs_;
    TcpPeer p;
    p.rank = rank;
    p.channel = channel;
    if (static_cast<size_t>(rank) < ctx_.ranks.size()) {
      p.host = ctx_.ranks[rank].hostname;
      p.pid = ctx_.ranks[rank].pid;
      p.same_host = static_cast<size_t>(ctx_.rank) < ctx_.ranks.size() &&
                    ctx_.ranks[rank].host_id == ctx_.ranks[ctx_.rank].host_id;
    }
    p.causes = ctx_.causes;
    if (static_cast<size_t>(rank) < blobs.size()) p.address = tcp::BlobAddress(blobs[rank]);
    return p;
  }
  // Tells the communicator's cause board (if any) that `peer` failed for `reason`.
  void offerPeerCause(int peer, FailureCause::Reason reason, std::string detail) const {
    if (!ctx_.causes) return;
    const TcpPeer p = peerOf(peer, 0);
    FailureCause c;
    c.reason = reason;
    c.rank = peer;
    c.pid = p.pid;
    c.host = p.host;
    c.detail = std::move(detail);
    ctx_.causes->offer(c);
  }
  std::string peerName(int rank) const {
    TcpPeer p = peerOf(rank, 0);
    std::string s = "rank " + std::to_string(rank);
    if (!p.host.empty()) s += " on host " + p.host;
    if (!p.address.empty()) s += " (" + p.address + ")";
    return s;
  }

  void startOutgoing(Outgoing& o);
  void driveOutgoing(Outgoing& o, short revents);
  // Moves every authenticated connection the listener has ready into the stash (a duplicate of
  // one stashed or handed out is closed: a replay).
  void takeArrived();
  // Lazy: closes the listener once every lower-ranked tcp peer's channels arrived (nobody else
  // may connect: it only served strangers from then on).
  void closeListenerWhenAllArrived();
  // Lazy connections (lazy_endpoint.h): one (peer, channel) each; the listener and the incoming
  // handshakes are shared, so each step also moves every other pending connection on.
  class Connector;
  Result<std::unique_ptr<Endpoint>> stepLazy(Outgoing* o, int peer, int channel);
  // The endpoint of a lazy connection complete on this side (its handshake done, or the peer's
  // authenticated connection waiting in the stash); null otherwise.
  std::unique_ptr<Endpoint> takeLazy(Outgoing* o, int peer, int channel);
  void armLazy(Outgoing* o, std::vector<pollfd>& fds);

  // The descriptors of the outgoing connections in progress and, while it is open, the
  // listener's ready fd (owner index -1).
  void collectFds(std::span<Outgoing> outgoing, std::vector<pollfd>& fds,
                  std::vector<int>* owners) const;
  // One round of connecting: polls those for up to timeout_ms, drives what is ready (a failed
  // outgoing connection lands in fatal_) and stashes what arrived. Only a failure of poll itself
  // is an error.
  Status pollOnce(std::span<Outgoing> outgoing, int timeout_ms);

  TransportContext ctx_;
  // Incoming connections: accepted and authenticated by its thread (null once closed).
  std::unique_ptr<HandshakeListener> listener_;
  size_t lower_peers_ = 0;  // lazy: tcp peers of lower rank (they connect to this rank)
  bool finished_ = false;   // finishConnect() was called
  std::string address_;
  std::optional<sockaddr_storage> source_;  // bindOutgoingTo
  std::vector<std::string> blobs_;          // of the current connect(), for messages
  uint8_t nonce_[16] = {};
  // Authenticated incoming connections by (rank, channel), until connect() hands them out.
  // Connections for a later connect() call may arrive early.
  std::map<std::pair<int, int>, Fd> stash_;
  std::vector<std::pair<int, int>> taken_;  // (rank, channel) already handed out
  Status fatal_;  // a failure of an outgoing connection that ends connect() (or a lazy step)
  // Lazy connections are driven by whichever thread uses an endpoint (the engine's, the link
  // calibration's at init): one at a time.
  std::mutex lazy_mu_;
};

class TcpInstance::Connector final : public PeerConnector {
 public:
  Connector(TcpInstance* inst, int peer, int channel, const sockaddr_storage* addr)
      : inst_(inst), peer_(peer), channel_(channel) {
    if (addr) {  // this rank connects; else it waits for the peer's connection
      out_.emplace();
      out_->peer = peer;
      out_->channel = channel;
      out_->addr = *addr;
    }
  }
  Result<std::unique_ptr<Endpoint>> progress() override {
    std::lock_guard<std::mutex> lock(inst_->lazy_mu_);
    return inst_->stepLazy(out_ ? &*out_ : nullptr, peer_, channel_);
  }
  void arm(std::vector<pollfd>& fds) override {
    std::lock_guard<std::mutex> lock(inst_->lazy_mu_);
    inst_->armLazy(out_ ? &*out_ : nullptr, fds);
  }
  std::unique_ptr<Endpoint> takeReady() override {
    std::lock_guard<std::mutex> lock(inst_->lazy_mu_);
    // The peer's connection may wait in the listener's queue still (its handshake ended after
    // this rank last drove the listener).
    if (!out_) inst_->takeArrived();
    return inst_->takeLazy(out_ ? &*out_ : nullptr, peer_, channel_);
  }
  std::string describe() const override {
    std::string s = "tcp to " + inst_->peerName(peer_) + " channel " + std::to_string(channel_) +
                    ", not connected yet (";
    if (!out_) return s + "waiting for it to connect)";
    return s + "connecting; last error: " + out_->last_error + ")";
  }

 private:
  TcpInstance* inst_;
  int peer_, channel_;
  std::optional<Outgoing> out_;
};

void TcpInstance::startOutgoing(Outgoing& o) {
  auto fd = StartConnect(o.addr, kSocketBuffers, source_ ? &*source_ : nullptr);
  if (!fd.ok()) {
    if (fd.status().cls() == ErrorClass::kSystem) {
      fatal_ = fd.status();
      return;
    }
    o.last_error = fd.status().message();
    o.retry_at = Clock::now() + std::chrono::milliseconds(o.backoff_ms);
    o.backoff_ms = std::min(o.backoff_ms * 2, 500);
    return;
  }
  o.fd = std::move(*fd);
  o.state = Outgoing::kConnecting;
}

void TcpInstance::driveOutgoing(Outgoing& o, short revents) {
  auto retry = [&](const std::string& why) {
    o.last_error = why;
    HangUp(o.fd.get());
    o.fd = Fd();
    o.hs.reset();
    o.state = Outgoing::kIdle;
    o.retry_at = Clock::now() + std::chrono::milliseconds(o.backoff_ms);
    o.backoff_ms = std::min(o.backoff_ms * 2, 500);
  };
  if (o.state == Outgoing::kConnecting) {
    if (!(revents & (POLLOUT | POLLERR | POLLHUP))) return;
    int err = ConnectError(o.fd.get());
    if (err == ECONNREFUSED && ctx_.lazy_connect && ++o.refusals >= kMaxLazyRefusals) {
      // At init its listener was up (it published the address), and it stays up as long as its
      // communicator: the process is gone.
      offerPeerCause(o.peer, FailureCause::Reason::kDied, "");
      fatal_ = RemoteError(peerName(o.peer) + " refused the connection for channel " +
                           std::to_string(o.channel) + " " + std::to_string(o.refusals) +
                           " times: it probably exited or crashed");
      return;
    }
    if (err != 0) return retry(ErrnoMessage("connect", err));
    o.refusals = 0;
    SetLiveness(o.fd.get());
    HandshakeHello hello;
    hello.purpose = kPurposeTcpData;
    hello.rank = ctx_.rank;
    hello.nranks = ctx_.nranks;
    hello.channel = o.channel;
    std::memcpy(hello.comm_nonce, nonce_, sizeof(nonce_));
    o.hs = std::make_unique<ClientHandshake>(ctx_.secret, hello);
    o.state = Outgoing::kHandshake;
  }
  if (o.state == Outgoing::kHandshake) {
    HandshakeState s = o.hs->drive(o.fd.get());
    if (s == HandshakeState::kDone) {
      o.state = Outgoing::kDone;
      o.hs.reset();
    } else if (s == HandshakeState::kFailed) {
      Status st = o.hs->error();
      // The peer closing on us is usually transient (it dropped us while overloaded); anything
      // else (not a braid peer, a peer that cannot prove the secret) is final.
      if (o.hs->closedByPeer() && ++o.handshake_failures <= kMaxHandshakeRetries)
        return retry(st.message());
      o.last_error = st.message();
      // A refusal for lack of file descriptors (or a local failure) is no credential matter.
      const std::string where = peerName(o.peer) + " channel " + std::to_string(o.channel);
      if (o.hs->refusedForLackOfFds()) {
        // The peer ran out of descriptors: its failure, which every rank should name (this
        // rank's own operation fails because of it).
        offerPeerCause(o.peer, FailureCause::Reason::kOwnFailure,
                       st.message().find("ENFILE") != std::string::npos
                           ? "its host ran out of file descriptors (ENFILE)"
                           : "it ran out of file descriptors (EMFILE): raise its 'ulimit -n'");
        fatal_ = RemoteError(where + " refused the connection: " + st.message());
        return;
      }
      fatal_ = st.cls() == ErrorClass::kSystem
                   ? Status(st).prepend("connecting to " + where + ": ")
                   : Status(st).prepend("authentication with " + where + " failed: ");
    }
  }
}

void TcpInstance::takeArrived() {
  if (!listener_) return;
  while (auto c = listener_->tryNext()) {
    std::pair<int, int> key{c->hello.rank, c->hello.channel};
    if (stash_.count(key) || std::find(taken_.begin(), taken_.end(), key) != taken_.end()) {
      BRAID_WARN(
          "tcp: rank %d: dropped connection from %s: duplicate connection for rank %d "
          "channel %d (a replay?)",
          ctx_.rank, c->peer.c_str(), key.first, key.second);
      HangUp(c->fd.get());
      continue;
    }
    SetLiveness(c->fd.get());
    stash_[key] = std::move(c->fd);
  }
}

void TcpInstance::closeListenerWhenAllArrived() {
  if (!listener_) return;
  takeArrived();
  if (stash_.size() + taken_.size() < lower_peers_ * static_cast<size_t>(ctx_.nchannels)) return;
  BRAID_TRACE("tcp: rank %d: every lower rank connected; the data listener closes", ctx_.rank);
  listener_.reset();
}

Status TcpInstance::connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                            Deadline deadline,
                            std::vector<std::vector<std::unique_ptr<Endpoint>>>* out) {
  const std::string who = "tcp: rank " + std::to_string(ctx_.rank) + ": ";
  if (static_cast<int>(blobs.size()) != ctx_.nranks)
    return InvalidArgument(who + "connect() needs one blob per rank");
  std::lock_guard<std::mutex> lock(lazy_mu_);
  if (finished_)
    return InvalidUsage(who + "connect() after finishConnect(): the listener is closed");
  blobs_ = blobs;
  out->clear();
  out->resize(peers.size());
  if (ctx_.lazy_connect) {
    // Nothing connects now: each endpoint connects when a schedule first uses it. As at init,
    // the lower rank of a pair connects and the higher one accepts.
    for (size_t i = 0; i < peers.size(); ++i) {
      const int p = peers[i];
      if (p < 0 || p >= ctx_.nranks || p == ctx_.rank)
        return InvalidArgument(who + "connect(): bad peer " + std::to_string(p));
      std::optional<sockaddr_storage> addr;
      if (p < ctx_.rank) ++lower_peers_;
      if (p > ctx_.rank) {
        auto a = ParseBlob(blobs[p]);
        if (!a.ok())
          return Status(a.status()).prepend(who + "address of rank " + std::to_string(p) + ": ");
        addr = *a;
      }
      for (int c = 0; c < ctx_.nchannels; ++c) {
        auto ep = std::make_unique<LazyEndpoint>(
            std::make_unique<Connector>(this, p, c, addr ? &*addr : nullptr));
        ep->setTransport(this);
        (*out)[i].push_back(std::move(ep));
      }
    }
    return Status::Ok();
  }
  std::vector<Outgoing> outgoing;
  std::vector<std::pair<int, int>> wanted_in;  // (peer index, channel)
  for (size_t i = 0; i < peers.size(); ++i) {
    int p = peers[i];
    if (p < 0 || p >= ctx_.nranks || p == ctx_.rank)
      return InvalidArgument(who + "connect(): bad peer " + std::to_string(p));
    (*out)[i].resize(ctx_.nchannels);
    for (int c = 0; c < ctx_.nchannels; ++c) {
      if (p > ctx_.rank) {
        Outgoing o;
        o.peer = p;
        o.channel = c;
        o.index = static_cast<int>(i);
        auto addr = ParseBlob(blobs[p]);
        if (!addr.ok())
          return Status(addr.status()).prepend(who + "address of rank " + std::to_string(p) + ": ");
        o.addr = *addr;
        outgoing.push_back(std::move(o));
      } else {
        wanted_in.emplace_back(static_cast<int>(i), c);
      }
    }
  }
  auto start = Clock::now();
  fatal_ = Status::Ok();
  auto all_in = [&] {
    for (auto [i, c] : wanted_in)
      if (!stash_.count({peers[i], c})) return false;
    return true;
  };
  auto all_out = [&] {
    for (const auto& o : outgoing)
      if (o.state != Outgoing::kDone) return false;
    return true;
  };

  while (fatal_.ok() && !(all_in() && all_out())) {
    if (deadline.expired()) {
      std::string missing;
      int listed = 0;
      auto add = [&](const std::string& s) {
        if (++listed <= 8) missing += (missing.empty() ? "" : "; ") + s;
      };
      for (const auto& o : outgoing)
        if (o.state != Outgoing::kDone)
          add("to " + peerName(o.peer) + " channel " + std::to_string(o.channel) +
              " (last error: " + o.last_error + ")");
      for (auto [i, c] : wanted_in)
        if (!stash_.count({peers[i], c}))
          add("from " + peerName(peers[i]) + " channel " + std::to_string(c) +
              " (it never connected)");
      if (listed > 8) missing += "; and " + std::to_string(listed - 8) + " more";
      const std::string waited = SecondsText(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
      // braidCommAbort or braidCommDestroy of the pending init, not a peer's fault.
      if (deadline.aborted())
        return AbortedError(who + "connect aborted after " + waited +
                            ", still waiting for: " + missing);
      return TimeoutError(who + "connections not established within " + waited + ": " + missing);
    }
    auto now = Clock::now();
    Clock::time_point wake = std::min(deadline.at(), now + std::chrono::milliseconds(1000));
    for (auto& o : outgoing)
      if (o.state == Outgoing::kIdle) {
        if (now >= o.retry_at)
          startOutgoing(o);
        else
          wake = std::min(wake, o.retry_at);
      }
    if (!fatal_.ok()) break;
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    int timeout = static_cast<int>(std::clamp<int64_t>(wait_ms + 1, 0, 1000));
    // An abortable deadline (a pending init that braidCommAbort may stop) is looked at again
    // within kAbortCheckMs.
    timeout = std::min(timeout, deadline.remainingMs(timeout) + 1);
    BRAID_RETURN_IF_ERROR(pollOnce(outgoing, timeout).prepend(who));
  }
  if (!fatal_.ok()) return Status(fatal_).prepend(who);

  for (auto& o : outgoing)
    (*out)[o.index][o.channel] =
        std::make_unique<TcpEndpoint>(std::move(o.fd), peerOf(o.peer, o.channel));
  for (auto [i, c] : wanted_in) {
    auto it = stash_.find({peers[i], c});
    (*out)[i][c] = std::make_unique<TcpEndpoint>(std::move(it->second), peerOf(peers[i], c));
    stash_.erase(it);
    taken_.emplace_back(peers[i], c);
  }
  for (auto& per_peer : *out)
    for (auto& ep : per_peer)
      if (ep) ep->setTransport(this);
  BRAID_INFO(
      "tcp: rank %d: connected to %zu peers x %d channels in %s", ctx_.rank, peers.size(),
      ctx_.nchannels,
      SecondsText(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count())
          .c_str());
  return Status::Ok();
}

Result<std::unique_ptr<Endpoint>> TcpInstance::stepLazy(Outgoing* o, int peer, int channel) {
  const std::string who = "tcp: rank " + std::to_string(ctx_.rank) + ": ";
  // The communicator failed (a cause arrived): a peer that failed with it never connects, and
  // one that waits for this rank to connect is failing too.
  if (ctx_.causes && ctx_.causes->hasStrong())
    return RemoteError(who + "gave up connecting with " + peerName(peer) + " channel " +
                       std::to_string(channel) + ": " + ctx_.causes->first()->describe());
  // This rank waits for the peer's connection, and its listener could not take a connection for
  // lack of descriptors (that peer's, likely): this rank's own failure, said now rather than
  // after the deadline (the peer was told why).
  if (!o && listener_) {
    if (const int err = listener_->outOfDescriptors(); err != 0 && !stash_.count({peer, channel}))
      return SystemError(SocketErrnoMessage(who + "waiting for " + peerName(peer) + " channel " +
                                                std::to_string(channel) +
                                                ": its connection could not be accepted",
                                            err));
  }
  fatal_ = Status::Ok();
  auto now = Clock::now();
  if (o && o->state == Outgoing::kIdle && now >= o->retry_at) startOutgoing(*o);
  if (fatal_.ok())
    BRAID_RETURN_IF_ERROR(
        pollOnce(o ? std::span<Outgoing>(o, 1) : std::span<Outgoing>(), 0).prepend(who));
  if (!fatal_.ok()) return Status(fatal_).prepend(who);
  std::unique_ptr<Endpoint> ep = takeLazy(o, peer, channel);
  if (ep)
    BRAID_TRACE("tcp: rank %d: connected to %s channel %d", ctx_.rank, peerName(peer).c_str(),
                channel);
  return ep;
}

std::unique_ptr<Endpoint> TcpInstance::takeLazy(Outgoing* o, int peer, int channel) {
  std::unique_ptr<Endpoint> ep;
  if (o && o->state == Outgoing::kDone) {
    ep = std::make_unique<TcpEndpoint>(std::move(o->fd), peerOf(peer, channel));
  } else if (!o) {
    auto it = stash_.find({peer, channel});
    if (it == stash_.end()) return ep;
    ep = std::make_unique<TcpEndpoint>(std::move(it->second), peerOf(peer, channel));
    stash_.erase(it);
    taken_.emplace_back(peer, channel);
    closeListenerWhenAllArrived();
  }
  return ep;  // (LazyEndpoint gives it its transport)
}

void TcpInstance::armLazy(Outgoing* o, std::vector<pollfd>& fds) {
  collectFds(o ? std::span<Outgoing>(o, 1) : std::span<Outgoing>(), fds, nullptr);
}

void TcpInstance::collectFds(std::span<Outgoing> outgoing, std::vector<pollfd>& fds,
                             std::vector<int>* owners) const {
  auto add = [&](int fd, short events, int owner) {
    fds.push_back({fd, events, 0});
    if (owners) owners->push_back(owner);
  };
  if (listener_) add(listener_->readyFd(), POLLIN, -1);
  for (size_t k = 0; k < outgoing.size(); ++k) {
    const Outgoing& o = outgoing[k];
    if (o.state == Outgoing::kConnecting)
      add(o.fd.get(), POLLOUT, static_cast<int>(k));
    else if (o.state == Outgoing::kHandshake)
      add(o.fd.get(), o.hs->pollEvents(), static_cast<int>(k));
  }
}

Status TcpInstance::pollOnce(std::span<Outgoing> outgoing, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> owners;
  collectFds(outgoing, fds, &owners);
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0 && errno != EINTR) return SystemError(ErrnoMessage("poll", errno));
  for (size_t k = 0; n > 0 && k < fds.size(); ++k)
    if (fds[k].revents && owners[k] >= 0)
      driveOutgoing(outgoing[static_cast<size_t>(owners[k])], fds[k].revents);
  takeArrived();
  return Status::Ok();
}

class TcpFactory final : public TransportFactory {
 public:
  const char* name() const override { return "tcp"; }
  int priority() const override { return 100; }

  Result<std::unique_ptr<TransportInstance>> create(const TransportContext& ctx) override {
    if (ctx.secret.size() < 16)
      return InvalidArgument("tcp: the communicator has no secret to authenticate connections");
    if (ctx.nchannels < 1 || ctx.rank < 0 || ctx.rank >= ctx.nranks)
      return InvalidArgument("tcp: bad context (rank " + std::to_string(ctx.rank) + " of " +
                             std::to_string(ctx.nranks) + ", " + std::to_string(ctx.nchannels) +
                             " channels)");
    InterfaceAddress itf;
    if (ctx.socket_ifname.empty() && ctx.all_on_one_host) {
      itf = LoopbackInterface();
    } else {
      BRAID_ASSIGN_OR_RETURN(itf, SelectInterface(ctx.socket_ifname));
    }
    auto inst = std::make_unique<TcpInstance>(ctx);
    if (Status st = inst->listen(itf.addr); !st.ok()) return st.prepend("tcp: ");
    // BRAID_SOCKET_IFNAME names this rank's interface: its traffic goes both ways through it.
    if (!ctx.socket_ifname.empty()) inst->bindOutgoingTo(itf.addr);
    BRAID_TRACE("tcp: rank %d listening on %s (%s)", ctx.rank, inst->address().c_str(),
                itf.ifname.c_str());
    return std::unique_ptr<TransportInstance>(std::move(inst));
  }
};

}  // namespace

TransportFactory* TcpTransportFactory() {
  static TcpFactory factory;
  return &factory;
}

namespace tcp {

std::string EncodeBlob(const std::string& host_port) {
  return kBlobPrefix + host_port;
}

Result<sockaddr_storage> DecodeBlob(const std::string& text) {
  if (text.rfind(kBlobPrefix, 0) != 0) return InvalidArgument("not a tcp transport address");
  return ParseHostPort(text.substr(std::strlen(kBlobPrefix)));
}

std::string BlobAddress(const std::string& text) {
  return text.rfind(kBlobPrefix, 0) == 0 ? text.substr(std::strlen(kBlobPrefix)) : std::string();
}

}  // namespace tcp
}  // namespace braid
