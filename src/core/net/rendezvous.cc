// The rendezvous service behind braidGetUniqueId (see bootstrap.h): one thread, one poll loop,
// every connection non-blocking, so strangers can never hold up real ranks.
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/net/bootstrap.h"
#include "core/net/bootstrap_wire.h"
#include "core/net/handshake.h"
#include "core/base/log.h"
#include "core/net/socket.h"

namespace braid {
namespace {

namespace wire = bootstrap_wire;

std::atomic<int> g_running{0};

// Services are detached threads. At exit, one still finishing (its ranks just left) would race
// the process's static destructors and OpenSSL's cleanup (seen as a double free after the last
// test of a binary passed): an atexit handler stops the services of the process that started
// them and waits for them, at most kExitDrainMs. Forked children inherit the handler but not
// the threads, hence the pid.
std::atomic<bool> g_stop{false};
std::atomic<pid_t> g_owner{0};
constexpr int kExitDrainMs = 1500;
// The longest a service sleeps in poll(), so that it sees g_stop in time.
constexpr int kMaxPollMs = 100;

void DrainServicesAtExit() {
  if (getpid() != g_owner.load()) return;
  g_stop.store(true);
  (void)WaitRendezvousServices(0, kExitDrainMs);
}

// Unauthenticated connections held at once; beyond that the oldest is dropped (a flood of idle
// connections must not exhaust fds or starve real ranks).
constexpr size_t kMaxUnauthenticated = 512;
// How long a connection that was sent an error may take to read it before it is closed.
constexpr int kLingerMs = 2000;
// Real ranks are authenticated; what they send is framed and bounded, read in slices.
constexpr size_t kReadSlice = 256 * 1024;
// Out of descriptors, a stranger that has been idle this long is dropped to make room: a rank
// completes its handshake in milliseconds, so one that is still at it may be a rank.
constexpr int kIdleStrangerMs = 250;

std::string SecondsText(int64_t ms) {
  char buf[32];
  if (ms < 10000)
    snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000.0);
  else
    snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(ms / 1000));
  return buf;
}

class Service {
 public:
  Service(Fd listener, const UniqueIdData& id, int64_t timeout_ms)
      : listener_(std::move(listener)),
        id_(id),
        secret_(id.secret.begin(), id.secret.end()),
        timeout_ms_(timeout_ms),
        arrival_(timeout_ms > 0 ? Deadline::After(timeout_ms) : Deadline::Never()),
        name_(FormatAddress(id.root)),
        spare_(OpenSpareFd()) {}

  ~Service() {
    for (auto& c : conns_) HangUp(c->fd.get());
    HangUp(listener_.get());
  }
  void Run();

 private:
  enum class State { kHandshake, kRank, kClosing };
  struct OutChunk {
    std::shared_ptr<const std::string> data;
    size_t off = 0;
  };
  struct Conn {
    Fd fd;
    std::string peer;
    State state = State::kHandshake;
    Clock::time_point since;     // accepted at
    Clock::time_point deadline;  // handshake or linger limit
    std::unique_ptr<ServerHandshake> hs;
    int rank = -1;
    uint8_t hdr[wire::kHeaderBytes] = {};
    size_t hdr_got = 0;
    wire::Header h;
    std::string payload;
    size_t payload_got = 0;
    std::deque<OutChunk> out;
    bool write_shut = false;
    bool dead = false;
  };

  void AcceptNew();
  void OnEvents(Conn& c, short revents);
  void OnAuthenticated(Conn& c);
  void ReadFrames(Conn& c);
  void OnGather(Conn& c);
  void OnRankClosed(Conn& c);
  void Flush(Conn& c);
  void Drop(Conn& c, const std::string& why);
  void Queue(Conn& c, std::shared_ptr<const std::string> frame);
  void SendError(Conn& c, const Status& st);
  void FailAll(const Status& st);
  void CheckRound();
  void OnTimers();
  void EvictOldestStranger();
  bool EvictIdleStranger();
  bool Finished() const;
  std::string Missing() const;
  std::string RankName(int r) const;

  Fd listener_;
  UniqueIdData id_;
  std::vector<uint8_t> secret_;
  int64_t timeout_ms_;
  Deadline arrival_;
  std::string name_;
  Fd spare_;  // for RefuseForLackOfFds
  int64_t last_fd_warning_us_ = 0;
  Clock::time_point listener_paused_until_{};
  std::vector<std::unique_ptr<Conn>> conns_;

  // Ranks, once the first one told us nranks.
  int nranks_ = -1;
  int first_rank_ = -1;
  std::string first_peer_;
  std::vector<Conn*> rank_conn_;  // non-owning; null when not (or no longer) connected
  std::vector<std::string> rank_peer_;
  std::vector<char> registered_, closed_;
  std::vector<std::optional<std::string>> pending_;
  std::vector<Clock::time_point> wait_until_;
  int registered_count_ = 0, closed_count_ = 0;
  uint64_t round_ = 0;
  std::optional<Status> failed_;
  bool deadline_reported_ = false;
};

std::string Service::RankName(int r) const {
  if (r >= 0 && r < nranks_ && !rank_peer_[r].empty())
    return "rank " + std::to_string(r) + " (" + rank_peer_[r] + ")";
  return "rank " + std::to_string(r);
}

// "ranks 3, 7 never connected; rank 1 (10.0.0.2:4711) has not reached this round"
std::string Service::Missing() const {
  std::vector<int> never, gone, late;
  for (int r = 0; r < nranks_; ++r) {
    if (pending_[r]) continue;
    if (!registered_[r])
      never.push_back(r);
    else if (closed_[r])
      gone.push_back(r);
    else
      late.push_back(r);
  }
  auto list = [](const std::vector<int>& v, const Service* s, bool with_peer) {
    std::string out = v.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < v.size() && i < 16; ++i) {
      out += (i ? ", " : "") + std::to_string(v[i]);
      if (with_peer && !s->rank_peer_[v[i]].empty()) out += " (" + s->rank_peer_[v[i]] + ")";
    }
    if (v.size() > 16) out += " and " + std::to_string(v.size() - 16) + " more";
    return out;
  };
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (!never.empty()) add(list(never, this, false) + " never connected to the root");
  if (!gone.empty()) add(list(gone, this, true) + " closed the connection (exited or crashed?)");
  if (!late.empty()) add(list(late, this, true) + " connected but did not reach this step");
  return out;
}

void Service::Queue(Conn& c, std::shared_ptr<const std::string> frame) {
  c.out.push_back({std::move(frame), 0});
}

void Service::Drop(Conn& c, const std::string& why) {
  // Logged once per connection: this is the only place a stranger is reported.
  BRAID_WARN("bootstrap root %s: dropped connection from %s: %s", name_.c_str(), c.peer.c_str(),
             why.c_str());
  c.dead = true;
}

void Service::SendError(Conn& c, const Status& st) {
  std::string msg = st.message().substr(0, wire::kMaxErrorBytes);
  Queue(c, std::make_shared<const std::string>(
               wire::MakeFrame(wire::kError, static_cast<uint32_t>(st.cls()), msg)));
  c.state = State::kClosing;
  c.deadline = Clock::now() + std::chrono::milliseconds(kLingerMs);
}

void Service::FailAll(const Status& st) {
  if (failed_) return;
  failed_ = st;
  BRAID_WARN("bootstrap root %s: %s", name_.c_str(), st.message().c_str());
  for (auto& c : conns_)
    if (c->state == State::kRank && !c->dead) SendError(*c, st);
  std::fill(pending_.begin(), pending_.end(), std::nullopt);
}

void Service::EvictOldestStranger() {
  Conn* oldest = nullptr;
  for (auto& c : conns_)
    if (c->state == State::kHandshake && !c->dead && (!oldest || c->deadline < oldest->deadline))
      oldest = c.get();
  if (oldest) Drop(*oldest, "too many unauthenticated connections at once");
}

bool Service::EvictIdleStranger() {
  Conn* idle = nullptr;
  auto cutoff = Clock::now() - std::chrono::milliseconds(kIdleStrangerMs);
  for (auto& c : conns_)
    if (c->state == State::kHandshake && !c->dead && c->since <= cutoff &&
        (!idle || c->since < idle->since))
      idle = c.get();
  if (!idle) return false;
  Drop(*idle, "dropped to make room: this process is out of file descriptors");
  HangUp(idle->fd.get());
  idle->fd = Fd();  // free the descriptor now, for the accept that needs it
  return true;
}

void Service::AcceptNew() {
  for (int i = 0; i < 128; ++i) {
    sockaddr_storage peer{};
    int err = 0;
    auto r = AcceptConnection(listener_.get(), &peer, {}, &err);
    if (!r.ok()) {
      // Out of descriptors: make room by dropping an idle stranger, else tell the connecting
      // peer why it cannot be served (a rank then fails at once, naming the limit to raise),
      // rather than leave it queued until its deadline.
      if (IsFdExhaustion(err) && EvictIdleStranger()) continue;
      int64_t now = NowMicros();
      if (now - last_fd_warning_us_ > 10'000'000) {
        last_fd_warning_us_ = now;
        BRAID_WARN("bootstrap root %s: %s", name_.c_str(), r.status().message().c_str());
      }
      if (IsFdExhaustion(err) && RefuseForLackOfFds(listener_.get(), &spare_, err)) continue;
      // Pause accepting briefly instead of spinning on a listener that stays readable.
      listener_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    if (!r->valid()) return;
    size_t strangers = 0;
    for (auto& c : conns_) strangers += c->state == State::kHandshake && !c->dead;
    if (strangers >= kMaxUnauthenticated) EvictOldestStranger();
    auto c = std::make_unique<Conn>();
    c->fd = std::move(*r);
    c->peer = FormatAddress(peer);
    c->since = Clock::now();
    c->deadline = c->since + std::chrono::milliseconds(kHandshakeTimeoutMs);
    c->hs = std::make_unique<ServerHandshake>(secret_);
    // Registered before it runs: if the handshake and the rank's first frames are handled in
    // this very call and something then fails every rank (FailAll), this rank must be among
    // those told (found by fuzz_rendezvous: it waited for an answer that never came).
    conns_.push_back(std::move(c));
    // Start at once: the greeting usually fits in the socket buffer.
    OnEvents(*conns_.back(), POLLOUT);
  }
}

void Service::OnAuthenticated(Conn& c) {
  HandshakeHello h = c.hs->hello();
  c.hs.reset();
  c.state = State::kRank;
  c.rank = -1;
  if (failed_) {
    SendError(c, *failed_);
    return;
  }
  if (h.nranks < 1 || h.nranks > wire::kMaxRanks || h.rank < 0 || h.rank >= h.nranks) {
    SendError(c, InvalidArgument("bootstrap: rank " + std::to_string(h.rank) + " of " +
                                 std::to_string(h.nranks) + " is out of range"));
    return;
  }
  if (nranks_ < 0) {
    nranks_ = h.nranks;
    first_rank_ = h.rank;
    first_peer_ = c.peer;
    rank_conn_.assign(nranks_, nullptr);
    rank_peer_.assign(nranks_, "");
    registered_.assign(nranks_, 0);
    closed_.assign(nranks_, 0);
    pending_.assign(nranks_, std::nullopt);
    wait_until_.assign(nranks_, Clock::time_point::max());
  }
  if (h.nranks != nranks_) {
    Status st = InvalidUsage("bootstrap: nranks mismatch: rank " + std::to_string(h.rank) + " (" +
                             c.peer + ") says nranks=" + std::to_string(h.nranks) + " but rank " +
                             std::to_string(first_rank_) + " (" + first_peer_ + ") said nranks=" +
                             std::to_string(nranks_) + ": every rank must pass the same nranks");
    SendError(c, st);
    FailAll(st);
    return;
  }
  if (registered_[h.rank]) {
    Status st = InvalidUsage("bootstrap: rank " + std::to_string(h.rank) + " joined twice (from " +
                             rank_peer_[h.rank] + " and " + c.peer +
                             "): two processes were given the same rank");
    SendError(c, st);
    FailAll(st);
    return;
  }
  c.rank = h.rank;
  rank_conn_[c.rank] = &c;
  rank_peer_[c.rank] = c.peer;
  registered_[c.rank] = 1;
  ++registered_count_;
  if (registered_count_ == nranks_) arrival_ = Deadline::Never();
  std::string nonce(reinterpret_cast<const char*>(id_.nonce.data()), id_.nonce.size());
  Queue(c, std::make_shared<const std::string>(
               wire::MakeFrame(wire::kRegistered, static_cast<uint32_t>(nranks_), nonce)));
  BRAID_TRACE("bootstrap root %s: rank %d registered from %s", name_.c_str(), c.rank,
              c.peer.c_str());
}

void Service::OnGather(Conn& c) {
  int r = c.rank;
  if (pending_[r]) {
    FailAll(RemoteError("bootstrap: rank " + std::to_string(r) + " (" + c.peer +
                        ") sent two contributions for one allGather round (a braid bug or a "
                        "version mismatch between ranks)"));
    return;
  }
  pending_[r] = std::move(c.payload);
  c.payload.clear();
  uint32_t wait_ms = c.h.arg;
  if (wait_ms == wire::kWaitForever) {
    wait_until_[r] = Clock::time_point::max();
  } else {
    // Answer before the rank gives up, so its error names the missing ranks; the margin is
    // generous because on an overloaded machine threads wake hundreds of ms late.
    int64_t margin = std::clamp<int64_t>(wait_ms / 5, 10, 1000);
    int64_t ms = std::max<int64_t>(0, static_cast<int64_t>(wait_ms) - margin);
    wait_until_[r] = Clock::now() + std::chrono::milliseconds(ms);
  }
  CheckRound();
}

void Service::CheckRound() {
  if (failed_ || nranks_ < 0) return;
  bool any = false, all = true;
  for (int r = 0; r < nranks_; ++r) {
    any = any || pending_[r].has_value();
    all = all && pending_[r].has_value();
  }
  if (!any) return;
  if (!all) {
    // A rank that closed can never contribute: fail now rather than at the deadline.
    for (int r = 0; r < nranks_; ++r)
      if (!pending_[r] && closed_[r])
        FailAll(RemoteError("bootstrap: " + RankName(r) +
                            " closed its connection to the root before allGather round " +
                            std::to_string(round_) + ": it probably exited or crashed"));
    return;
  }
  std::string payload;
  size_t total = 0;
  for (int r = 0; r < nranks_; ++r) total += 4 + pending_[r]->size();
  payload.reserve(total);
  for (int r = 0; r < nranks_; ++r) {
    uint32_t n = static_cast<uint32_t>(pending_[r]->size());
    for (int i = 0; i < 4; ++i) payload.push_back(static_cast<char>(n >> (8 * i)));
    payload += *pending_[r];
    pending_[r].reset();
    wait_until_[r] = Clock::time_point::max();
  }
  auto frame = std::make_shared<const std::string>(
      wire::MakeFrame(wire::kReply, static_cast<uint32_t>(nranks_), payload));
  for (int r = 0; r < nranks_; ++r)
    if (rank_conn_[r]) Queue(*rank_conn_[r], frame);
  ++round_;
}

void Service::OnRankClosed(Conn& c) {
  c.dead = true;
  if (c.rank < 0) return;
  int r = c.rank;
  rank_conn_[r] = nullptr;
  closed_[r] = 1;
  ++closed_count_;
  if (pending_[r]) {
    // It gave up while waiting (its own deadline or an abort): nobody can finish this round.
    FailAll(RemoteError("bootstrap: " + RankName(r) + " left during allGather round " +
                        std::to_string(round_) + " (its deadline passed or it was aborted)"));
    return;
  }
  CheckRound();
}

void Service::ReadFrames(Conn& c) {
  for (;;) {
    if (c.hdr_got < wire::kHeaderBytes) {
      ssize_t n =
          ::recv(c.fd.get(), c.hdr + c.hdr_got, wire::kHeaderBytes - c.hdr_got, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return OnRankClosed(c);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return OnRankClosed(c);
        return;
      }
      c.hdr_got += static_cast<size_t>(n);
      if (c.hdr_got < wire::kHeaderBytes) continue;
      c.h = wire::DecodeHeader(c.hdr);
      // Bound every length before allocating.
      if (c.h.tag != wire::kGather || c.h.len > kMaxBootstrapMessage) {
        Status st =
            RemoteError("bootstrap: rank " + std::to_string(c.rank) + " (" + c.peer +
                        ") sent an invalid message (tag " + std::to_string(c.h.tag) + ", length " +
                        std::to_string(c.h.len) + "): ranks run different braid versions?");
        SendError(c, st);
        FailAll(st);
        return;
      }
      c.payload.assign(static_cast<size_t>(c.h.len), '\0');
      c.payload_got = 0;
    }
    if (c.payload_got < c.payload.size()) {
      size_t want = std::min(kReadSlice, c.payload.size() - c.payload_got);
      ssize_t n = ::recv(c.fd.get(), c.payload.data() + c.payload_got, want, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return OnRankClosed(c);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return OnRankClosed(c);
        return;
      }
      c.payload_got += static_cast<size_t>(n);
      if (c.payload_got < c.payload.size()) continue;
    }
    c.hdr_got = 0;
    OnGather(c);
    if (c.state != State::kRank || c.dead) return;
  }
}

void Service::Flush(Conn& c) {
  while (!c.out.empty()) {
    auto& o = c.out.front();
    ssize_t n = ::send(c.fd.get(), o.data->data() + o.off, o.data->size() - o.off,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      o.off += static_cast<size_t>(n);
      if (o.off == o.data->size()) c.out.pop_front();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // The peer is gone.
    if (c.state == State::kRank) return OnRankClosed(c);
    c.dead = true;
    return;
  }
  if (c.state == State::kClosing && !c.write_shut) {
    // Half-close and wait for the peer to close: closing with unread input would reset the
    // connection and could destroy the error message before the rank reads it.
    ::shutdown(c.fd.get(), SHUT_WR);
    c.write_shut = true;
  }
}

void Service::OnEvents(Conn& c, short revents) {
  if (c.dead) return;
  if (c.state == State::kHandshake) {
    HandshakeState s = c.hs->drive(c.fd.get());
    if (s == HandshakeState::kVerified) {
      const HandshakeHello& h = c.hs->hello();
      bool zero = std::all_of(h.comm_nonce, h.comm_nonce + 16, [](uint8_t b) { return b == 0; });
      if (h.purpose != wire::kPurposeBootstrap ||
          (!zero && std::memcmp(h.comm_nonce, id_.nonce.data(), 16) != 0)) {
        c.hs->reject(RemoteError("authenticated, but for purpose " + std::to_string(h.purpose) +
                                 " or another communicator"));
      } else {
        c.hs->accept();
        s = c.hs->drive(c.fd.get());
      }
      s = c.hs->state();
    }
    if (s == HandshakeState::kFailed) return Drop(c, c.hs->error().message());
    if (s == HandshakeState::kDone) {
      OnAuthenticated(c);
      Flush(c);
      // A rank may have sent its first frame right behind the handshake.
      if (c.state == State::kRank && !c.dead) ReadFrames(c);
    }
    return;
  }
  if (c.state == State::kRank) {
    if (revents & POLLOUT) Flush(c);
    if (!c.dead && c.state == State::kRank && (revents & (POLLIN | POLLHUP | POLLERR)))
      ReadFrames(c);
    if (!c.dead && !c.out.empty()) Flush(c);
    return;
  }
  // kClosing: flush the error, then discard input until the peer closes.
  Flush(c);
  if (c.dead) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    char sink[4096];
    for (int i = 0; i < 64; ++i) {
      ssize_t n = ::recv(c.fd.get(), sink, sizeof(sink), MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        if (c.rank >= 0 && rank_conn_.size() > static_cast<size_t>(c.rank) &&
            rank_conn_[c.rank] == &c)
          OnRankClosed(c);
        c.dead = true;
      }
      break;
    }
  }
}

void Service::OnTimers() {
  auto now = Clock::now();
  for (auto& c : conns_) {
    if (c->dead) continue;
    if (c->state == State::kHandshake && now >= c->deadline)
      Drop(*c,
           "did not complete the handshake within " + std::to_string(kHandshakeTimeoutMs) + " ms");
    else if (c->state == State::kClosing && now >= c->deadline)
      c->dead = true;
  }
  if (!failed_ && nranks_ > 0) {
    for (int r = 0; r < nranks_; ++r) {
      if (pending_[r] && now >= wait_until_[r]) {
        FailAll(TimeoutError("bootstrap: allGather round " + std::to_string(round_) +
                             " timed out: " + Missing() + " (rank " + std::to_string(r) +
                             " stopped waiting)"));
        break;
      }
    }
  }
  if (arrival_.expired() && !deadline_reported_) {
    deadline_reported_ = true;
    if (nranks_ < 0) {
      BRAID_WARN("bootstrap root %s: no rank connected within %s; the service stops", name_.c_str(),
                 SecondsText(timeout_ms_).c_str());
    } else if (!failed_) {
      FailAll(TimeoutError("bootstrap: not every rank connected to the root " + name_ + " within " +
                           SecondsText(timeout_ms_) + ": " + Missing()));
    }
  }
}

bool Service::Finished() const {
  for (const auto& c : conns_)
    if (!c->dead && c->state != State::kHandshake) return false;
  if (deadline_reported_) return true;
  // Every rank came and is gone (success), or was told of the failure and is gone.
  return nranks_ > 0 && registered_count_ == nranks_;
}

void Service::Run() {
  std::vector<pollfd> fds;
  std::vector<Conn*> owners;
  for (;;) {
    if (g_stop.load(std::memory_order_relaxed)) break;  // the process exits
    OnTimers();
    for (auto& c : conns_) {
      if (!c->dead) continue;
      if (c->rank >= 0 && rank_conn_[c->rank] == c.get()) rank_conn_[c->rank] = nullptr;
      HangUp(c->fd.get());
    }
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                [](const std::unique_ptr<Conn>& c) { return c->dead; }),
                 conns_.end());
    if (Finished()) break;

    fds.clear();
    owners.clear();
    auto now = Clock::now();
    if (!deadline_reported_ && now >= listener_paused_until_) {
      fds.push_back({listener_.get(), POLLIN, 0});
      owners.push_back(nullptr);
    }
    Clock::time_point wake = now + std::chrono::milliseconds(1000);
    if (!arrival_.expired()) wake = std::min(wake, arrival_.at());
    if (listener_paused_until_ > now) wake = std::min(wake, listener_paused_until_);
    for (auto& c : conns_) {
      short ev = 0;
      if (c->state == State::kHandshake) {
        ev = c->hs->pollEvents();
        wake = std::min(wake, c->deadline);
      } else {
        ev = POLLIN;
        if (!c->out.empty()) ev |= POLLOUT;
        if (c->state == State::kClosing) wake = std::min(wake, c->deadline);
      }
      fds.push_back({c->fd.get(), ev, 0});
      owners.push_back(c.get());
    }
    for (int r = 0; r < nranks_; ++r)
      if (pending_[r]) wake = std::min(wake, wait_until_[r]);
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
    // Round up so a timer that is due in < 1 ms does not spin.
    int timeout = static_cast<int>(std::clamp<int64_t>(wait + 1, 0, kMaxPollMs));
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      BRAID_WARN("bootstrap root %s: poll failed (errno %d); the service stops", name_.c_str(),
                 errno);
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (!owners[i]) {
        AcceptNew();
      } else {
        OnEvents(*owners[i], fds[i].revents);
      }
    }
  }
  BRAID_INFO("bootstrap root %s: service finished after %llu allGather rounds", name_.c_str(),
             static_cast<unsigned long long>(round_));
}

}  // namespace

std::array<uint8_t, 32> DeriveSecret(const std::vector<uint8_t>& configured) {
  std::array<uint8_t, 32> out{};
  if (configured.size() == out.size()) {
    std::copy(configured.begin(), configured.end(), out.begin());
  } else {
    CryptoLock lock;
    SHA256(configured.data(), configured.size(), out.data());
  }
  return out;
}

int RendezvousServicesRunning() {
  return g_running.load();
}

bool WaitRendezvousServices(int at_most, int64_t ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (g_running.load() > at_most && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return g_running.load() <= at_most;
}

Result<UniqueIdData> StartRendezvous(const RendezvousOptions& options) {
  // Before the service thread exists: a fork() must never catch it inside OpenSSL.
  InstallCryptoForkGuard();
  sockaddr_storage addr{};
  if (!options.listen_address.empty()) {
    BRAID_ASSIGN_OR_RETURN(addr, ParseHostPort(options.listen_address));
  } else {
    BRAID_ASSIGN_OR_RETURN(InterfaceAddress itf, SelectInterface(options.ifname));
    addr = itf.addr;
  }
  UniqueIdData id;
  BRAID_RETURN_IF_ERROR(RandomizeUniqueId(&id));
  if (!options.fixed_secret.empty()) id.secret = DeriveSecret(options.fixed_secret);
  auto listener = ListenOn(addr, SOMAXCONN);
  if (!listener.ok()) return Status(listener.status()).prepend("bootstrap root: ");
  BRAID_ASSIGN_OR_RETURN(id.root, LocalAddress(listener->get()));
  auto service = std::make_unique<Service>(std::move(*listener), id, options.timeout_ms);
  g_owner.store(getpid());
  g_running.fetch_add(1);
  // std::thread can throw (resource exhaustion); no exception may leave braid.
  try {
    std::thread([s = std::move(service)]() mutable {
      s->Run();
      s.reset();  // closes the listener before the count says the service is gone
      g_running.fetch_sub(1);
    }).detach();
  } catch (const std::exception& e) {
    g_running.fetch_sub(1);
    return SystemError(std::string("bootstrap root: cannot start the service thread: ") + e.what());
  }
  BRAID_INFO("bootstrap root listening on %s", FormatAddress(id.root).c_str());
  // Registered after the logger and OpenSSL are set up (above), so that it runs before their
  // teardown at exit (atexit handlers and static destructors run in reverse order).
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(DrainServicesAtExit); });
  return id;
}

}  // namespace braid
