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
// Pending unauthenticated connections held at once; beyond that the oldest is dropped.
constexpr size_t kMaxStrangers = 512;
// A connect that the peer's listener refused or reset is retried (backoff) this many times.
constexpr int kMaxHandshakeRetries = 5;
// Out of descriptors, a stranger that has been idle this long is dropped to make room: a peer
// completes its handshake in milliseconds.
constexpr int kIdleStrangerMs = 250;
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
  TcpInstance(const TransportContext& ctx, Fd listener, std::string address)
      : ctx_(ctx),
        listener_(std::move(listener)),
        spare_(OpenSpareFd()),
        address_(std::move(address)) {
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
    HangUp(listener_.get());
    for (auto& [key, fd] : stash_) HangUp(fd.get());
    for (auto& in : incoming_) HangUp(in.fd.get());
  }

  Status finishConnect() override {
    // Lazy: the listener serves the connections schedules make later, for the communicator's
    // life; connections that arrived early wait in the stash for their endpoint.
    if (ctx_.lazy_connect) return Status::Ok();
    // shutdown, not only close: a forked child may hold a copy of the listener.
    HangUp(listener_.get());
    listener_ = Fd();
    spare_ = Fd();
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
  struct Incoming {
    Fd fd;
    std::string from;
    Clock::time_point since, deadline;
    std::unique_ptr<ServerHandshake> hs;
    bool dead = false;
  };

  TcpPeer peerOf(int rank, int channel) const {
    const auto& blobs = blobs_;
    TcpPeer p;
    p.rank = rank;
    p.channel = channel;
    if (static_cast<size_t>(rank) < ctx_.ranks.size()) {
      p.host = ctx_.ranks[rank].hostname;
      p.pid = ctx_.ranks[rank].pid;
    }
    p.causes = ctx_.causes;
    if (static_cast<size_t>(rank) < blobs.size()) p.address = tcp::BlobAddress(blobs[rank]);
    return p;
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
  void driveIncoming(Incoming& in);
  void acceptNew(std::vector<Incoming>& incoming);
  // Lazy connections (lazy_endpoint.h): one (peer, channel) each; the listener and the incoming
  // handshakes are shared, so each step also moves every other pending connection on.
  class Connector;
  Result<std::unique_ptr<Endpoint>> stepLazy(Outgoing* o, int peer, int channel);
  // The endpoint of a lazy connection complete on this side (its handshake done, or the peer's
  // authenticated connection waiting in the stash); null otherwise.
  std::unique_ptr<Endpoint> takeLazy(Outgoing* o, int peer, int channel);
  void armLazy(Outgoing* o, std::vector<pollfd>& fds);

  // What each polled descriptor is, for pollOnce's dispatch.
  struct FdOwner {
    enum Kind { kListener, kOut, kIn } kind;
    size_t index;  // into the outgoing or incoming list
  };
  // The descriptors of the listener (unless paused), the outgoing connections in progress and
  // the incoming handshakes, with their owners when `owners` is not null.
  void collectFds(std::span<Outgoing> outgoing, const std::vector<Incoming>& incoming,
                  std::vector<pollfd>& fds, std::vector<FdOwner>* owners) const;
  // One round of connecting: polls those for up to timeout_ms, drives what is ready (a failed
  // outgoing connection lands in fatal_), then drops handshakes past their deadline. Only a
  // failure of poll itself is an error.
  Status pollOnce(std::span<Outgoing> outgoing, std::vector<Incoming>& incoming, int timeout_ms);

  void drop(Incoming& in, const std::string& why) {
    BRAID_WARN("tcp: rank %d: dropped connection from %s: %s", ctx_.rank, in.from.c_str(),
               why.c_str());
    HangUp(in.fd.get());
    in.dead = true;
  }

  TransportContext ctx_;
  Fd listener_;
  Fd spare_;  // for RefuseForLackOfFds while the listener is open
  int64_t last_fd_warning_us_ = 0;
  std::string address_;
  std::vector<std::string> blobs_;  // of the current connect(), for messages
  uint8_t nonce_[16] = {};
  // Authenticated incoming connections by (rank, channel), until connect() hands them out.
  // Connections for a later connect() call may arrive early.
  std::map<std::pair<int, int>, Fd> stash_;
  std::vector<std::pair<int, int>> taken_;  // (rank, channel) already handed out
  Clock::time_point listener_paused_until_{};
  Status fatal_;  // a failure of an outgoing connection that ends connect() (or a lazy step)
  // Lazy connections are driven by whichever thread uses an endpoint (the engine's, the link
  // calibration's at init): one at a time.
  std::mutex lazy_mu_;
  std::vector<Incoming> incoming_;  // handshakes in progress on the listener (lazy)
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
  auto fd = StartConnect(o.addr, kSocketBuffers);
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
      if (ctx_.causes) {
        FailureCause c;
        c.reason = FailureCause::Reason::kDied;
        c.rank = o.peer;
        c.pid = peerOf(o.peer, 0).pid;
        c.host = peerOf(o.peer, 0).host;
        ctx_.causes->offer(c);
      }
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
      fatal_ = st.cls() == ErrorClass::kSystem
                   ? Status(st).prepend("connecting to " + where + ": ")
                   : Status(st).prepend("authentication with " + where + " failed: ");
    }
  }
}

void TcpInstance::acceptNew(std::vector<Incoming>& incoming) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage peer{};
    int err = 0;
    auto r = AcceptConnection(listener_.get(), &peer, kSocketBuffers, &err);
    if (!r.ok()) {
      // Out of descriptors: make room by dropping an idle stranger, else tell the connecting
      // peer why it cannot be served (it then fails at once, naming the limit to raise).
      if (IsFdExhaustion(err)) {
        Incoming* idle = nullptr;
        auto cutoff = Clock::now() - std::chrono::milliseconds(kIdleStrangerMs);
        for (auto& in : incoming)
          if (!in.dead && in.since <= cutoff && (!idle || in.since < idle->since)) idle = &in;
        if (idle) {
          drop(*idle, "dropped to make room: this process is out of file descriptors");
          idle->fd = Fd();  // free the descriptor now, for the accept that needs it
          continue;
        }
      }
      if (NowMicros() - last_fd_warning_us_ > 10'000'000) {
        last_fd_warning_us_ = NowMicros();
        BRAID_WARN("tcp: rank %d: %s", ctx_.rank, r.status().message().c_str());
      }
      if (IsFdExhaustion(err) && RefuseForLackOfFds(listener_.get(), &spare_, err)) continue;
      // Retry shortly instead of spinning on a listener that stays readable.
      listener_paused_until_ = Clock::now() + std::chrono::milliseconds(50);
      return;
    }
    if (!r->valid()) return;
    size_t live = 0;
    Incoming* oldest = nullptr;
    for (auto& in : incoming) {
      if (in.dead) continue;
      ++live;
      if (!oldest || in.deadline < oldest->deadline) oldest = &in;
    }
    if (live >= kMaxStrangers && oldest) drop(*oldest, "too many pending connections");
    Incoming in;
    in.fd = std::move(*r);
    in.from = FormatAddress(peer);
    in.since = Clock::now();
    in.deadline = in.since + std::chrono::milliseconds(kHandshakeTimeoutMs);
    in.hs = std::make_unique<ServerHandshake>(ctx_.secret);
    incoming.push_back(std::move(in));
    driveIncoming(incoming.back());
  }
}

void TcpInstance::driveIncoming(Incoming& in) {
  if (in.dead) return;
  HandshakeState s = in.hs->drive(in.fd.get());
  if (s == HandshakeState::kVerified) {
    const HandshakeHello& h = in.hs->hello();
    std::pair<int, int> key{h.rank, h.channel};
    std::string why;
    if (h.purpose != kPurposeTcpData)
      why = "authenticated, but not a tcp data connection (purpose " + std::to_string(h.purpose) +
            ")";
    else if (std::memcmp(h.comm_nonce, nonce_, sizeof(nonce_)) != 0)
      why = "authenticated, but for another communicator";
    else if (h.nranks != ctx_.nranks || h.rank < 0 || h.rank >= ctx_.rank)
      why = "authenticated, but rank " + std::to_string(h.rank) + " of " +
            std::to_string(h.nranks) + " may not connect to rank " + std::to_string(ctx_.rank);
    else if (h.channel < 0 || h.channel >= ctx_.nchannels)
      why = "authenticated, but channel " + std::to_string(h.channel) + " is out of range";
    else if (stash_.count(key) || std::find(taken_.begin(), taken_.end(), key) != taken_.end())
      why = "duplicate connection for rank " + std::to_string(h.rank) + " channel " +
            std::to_string(h.channel) + " (a replay?)";
    if (!why.empty()) {
      in.hs->reject(RemoteError(why));
    } else {
      in.hs->accept();
      s = in.hs->drive(in.fd.get());
    }
    s = in.hs->state();
  }
  if (s == HandshakeState::kFailed) return drop(in, in.hs->error().message());
  if (s == HandshakeState::kDone) {
    const HandshakeHello& h = in.hs->hello();
    SetLiveness(in.fd.get());
    stash_[{h.rank, h.channel}] = std::move(in.fd);
    in.dead = true;  // moved into the stash; not an error
  }
}

Status TcpInstance::connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                            Deadline deadline,
                            std::vector<std::vector<std::unique_ptr<Endpoint>>>* out) {
  const std::string who = "tcp: rank " + std::to_string(ctx_.rank) + ": ";
  if (static_cast<int>(blobs.size()) != ctx_.nranks)
    return InvalidArgument(who + "connect() needs one blob per rank");
  if (!listener_.valid())
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
  std::vector<Incoming> incoming;
  // Handshakes still pending when this call returns end with it (strangers, or real peers
  // that connected for a later call: they retry).
  struct HangUpPending {
    std::vector<Incoming>& v;
    ~HangUpPending() {
      for (auto& in : v) HangUp(in.fd.get());
    }
  } hang_up_pending{incoming};
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
    if (now < listener_paused_until_) wake = std::min(wake, listener_paused_until_);
    for (const auto& in : incoming)
      if (!in.dead) wake = std::min(wake, in.deadline);
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    int timeout = static_cast<int>(std::clamp<int64_t>(wait_ms + 1, 0, 1000));
    // An abortable deadline (a pending init that braidCommAbort may stop) is looked at again
    // within kAbortCheckMs.
    timeout = std::min(timeout, deadline.remainingMs(timeout) + 1);
    BRAID_RETURN_IF_ERROR(pollOnce(outgoing, incoming, timeout).prepend(who));
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
  fatal_ = Status::Ok();
  auto now = Clock::now();
  if (o && o->state == Outgoing::kIdle && now >= o->retry_at) startOutgoing(*o);
  if (fatal_.ok())
    BRAID_RETURN_IF_ERROR(
        pollOnce(o ? std::span<Outgoing>(o, 1) : std::span<Outgoing>(), incoming_, 0).prepend(who));
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
  }
  return ep;  // (LazyEndpoint gives it its transport)
}

void TcpInstance::armLazy(Outgoing* o, std::vector<pollfd>& fds) {
  collectFds(o ? std::span<Outgoing>(o, 1) : std::span<Outgoing>(), incoming_, fds, nullptr);
}

void TcpInstance::collectFds(std::span<Outgoing> outgoing, const std::vector<Incoming>& incoming,
                             std::vector<pollfd>& fds, std::vector<FdOwner>* owners) const {
  auto add = [&](int fd, short events, FdOwner owner) {
    fds.push_back({fd, events, 0});
    if (owners) owners->push_back(owner);
  };
  if (listener_.valid() && Clock::now() >= listener_paused_until_)
    add(listener_.get(), POLLIN, {FdOwner::kListener, 0});
  for (size_t k = 0; k < outgoing.size(); ++k) {
    const Outgoing& o = outgoing[k];
    if (o.state == Outgoing::kConnecting)
      add(o.fd.get(), POLLOUT, {FdOwner::kOut, k});
    else if (o.state == Outgoing::kHandshake)
      add(o.fd.get(), o.hs->pollEvents(), {FdOwner::kOut, k});
  }
  for (size_t k = 0; k < incoming.size(); ++k)
    if (!incoming[k].dead)
      add(incoming[k].fd.get(), incoming[k].hs->pollEvents(), {FdOwner::kIn, k});
}

Status TcpInstance::pollOnce(std::span<Outgoing> outgoing, std::vector<Incoming>& incoming,
                             int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<FdOwner> owners;
  collectFds(outgoing, incoming, fds, &owners);
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0 && errno != EINTR) return SystemError(ErrnoMessage("poll", errno));
  for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
    if (!fds[k].revents) continue;
    const FdOwner& w = owners[k];
    if (w.kind == FdOwner::kListener)
      acceptNew(incoming);  // (may append to `incoming`: the owners' indexes stay valid)
    else if (w.kind == FdOwner::kOut)
      driveOutgoing(outgoing[w.index], fds[k].revents);
    else
      driveIncoming(incoming[w.index]);
  }
  // Handshakes are timed from their accept. A lazy one may have gone on while nobody stepped
  // (no endpoint was pending): it was driven above, before it is judged here.
  const auto now = Clock::now();
  for (auto& in : incoming)
    if (!in.dead && now >= in.deadline)
      drop(in,
           "did not complete the handshake within " + std::to_string(kHandshakeTimeoutMs) + " ms");
  incoming.erase(
      std::remove_if(incoming.begin(), incoming.end(), [](const Incoming& in) { return in.dead; }),
      incoming.end());
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
    auto listener = ListenOn(itf.addr, SOMAXCONN, kSocketBuffers);
    if (!listener.ok()) return Status(listener.status()).prepend("tcp: ");
    BRAID_ASSIGN_OR_RETURN(sockaddr_storage bound, LocalAddress(listener->get()));
    BRAID_TRACE("tcp: rank %d listening on %s (%s)", ctx.rank, FormatAddress(bound).c_str(),
                itf.ifname.c_str());
    return std::unique_ptr<TransportInstance>(
        std::make_unique<TcpInstance>(ctx, std::move(*listener), FormatAddress(bound)));
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
