#include "core/net/handshake_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/base/log.h"
#include "core/net/unique_id.h"

namespace braid {
namespace {

// Unauthenticated connections held at once; beyond that the oldest is dropped, so a flood can
// neither exhaust descriptors nor grow the poll set without bound.
constexpr size_t kMaxPending = 512;
// Drops logged one by one per window; the rest of the window's are summed up in one line.
constexpr int kDropLinesPerWindow = 5;
constexpr int64_t kDropWindowUs = 10'000'000;
// Out of descriptors, a stranger that has been idle this long is dropped to make room: a peer
// that knows the secret completes its handshake in milliseconds.
constexpr int kIdleStrangerMs = 250;

}  // namespace

struct HandshakeListener::Pending {
  Fd fd;
  std::string peer;
  Clock::time_point since, deadline;
  std::unique_ptr<ServerHandshake> hs;
  bool done = false;  // handed to the owner or dropped
};

HandshakeListener::HandshakeListener(std::vector<uint8_t> secret, Check check, std::string name,
                                     Serve serve)
    : secret_(std::move(secret)),
      check_(std::move(check)),
      serve_(std::move(serve)),
      name_(std::move(name)) {}

Result<std::unique_ptr<HandshakeListener>> HandshakeListener::Start(
    const sockaddr_storage& addr, const std::vector<uint8_t>& secret, Check check, std::string name,
    Serve serve, Options options) {
  std::unique_ptr<HandshakeListener> l(
      new HandshakeListener(secret, std::move(check), name, std::move(serve)));
  l->options_ = options;
  auto listener = ListenOn(addr, SOMAXCONN, options.buffers);
  if (!listener.ok()) return Status(listener.status()).prepend(name + ": ");
  l->listener_ = std::move(*listener);
  BRAID_ASSIGN_OR_RETURN(l->address_, LocalAddress(l->listener_.get()));
  l->wake_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!l->wake_.valid()) return SystemError(SocketErrnoMessage(name + ": eventfd", errno));
  l->ready_fd_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!l->ready_fd_.valid()) return SystemError(SocketErrnoMessage(name + ": eventfd", errno));
  l->spare_ = OpenSpareFd();
  // Before the thread exists: a fork() must never catch it inside OpenSSL.
  InstallCryptoForkGuard();
  // std::thread can throw (resource exhaustion); no exception may leave braid.
  try {
    l->thread_ = std::thread([p = l.get()] { p->Run(); });
  } catch (const std::exception& e) {
    return SystemError(name + ": cannot start the listener thread: " + e.what());
  }
  return l;
}

HandshakeListener::~HandshakeListener() {
  stop_.store(true);
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  LogSuppressedDrops(true);
  // shutdown, not only close: a forked child may hold copies of these descriptors.
  HangUp(listener_.get());
  for (auto& c : ready_) HangUp(c.fd.get());
}

Result<HandshakeListener::Connection> HandshakeListener::next(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (ready_.empty()) {
    if (deadline.aborted())
      return AbortedError(name_ + ": aborted while waiting for an authenticated connection");
    if (deadline.expired())
      return TimeoutError(name_ + ": no authenticated connection arrived before the deadline");
    // In slices of remainingMs(), so that an abortable deadline is seen within kAbortCheckMs;
    // +1 so that a deadline due in under 1 ms does not spin.
    ready_cv_.wait_for(lock, std::chrono::milliseconds(deadline.remainingMs() + 1));
  }
  Connection c = std::move(ready_.front());
  ready_.pop_front();
  return c;
}

std::optional<HandshakeListener::Connection> HandshakeListener::tryNext() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_.empty()) {
    // Quiet until the thread queues the next one (it rings after queueing: never missed).
    uint64_t v;
    (void)!::read(ready_fd_.get(), &v, sizeof(v));
    return std::nullopt;
  }
  Connection c = std::move(ready_.front());
  ready_.pop_front();
  return c;
}

void HandshakeListener::LogSuppressedDrops(bool now_anyway) {
  if (drops_not_logged_ == 0) return;
  const int64_t now = NowMicros();
  if (!now_anyway && now - drop_window_start_us_ < kDropWindowUs) return;
  BRAID_WARN(
      "%s: dropped %llu more connections in the last %.0f s (strangers; not logged one by "
      "one)",
      name_.c_str(), static_cast<unsigned long long>(drops_not_logged_),
      static_cast<double>(now - drop_window_start_us_) / 1e6);
  drops_not_logged_ = 0;
  drop_window_start_us_ = now;
  drop_lines_in_window_ = 0;
}

void HandshakeListener::Drop(Pending& p, const std::string& why) {
  // The only place a stranger is reported: a line each for the first few of a window.
  LogSuppressedDrops(false);
  const int64_t now = NowMicros();
  if (now - drop_window_start_us_ >= kDropWindowUs) {
    drop_window_start_us_ = now;
    drop_lines_in_window_ = 0;
  }
  if (drop_lines_in_window_ < kDropLinesPerWindow) {
    ++drop_lines_in_window_;
    BRAID_WARN("%s: dropped connection from %s: %s%s", name_.c_str(), p.peer.c_str(), why.c_str(),
               drop_lines_in_window_ == kDropLinesPerWindow
                   ? " (further drops in the next 10 s are counted, not logged)"
                   : "");
  } else {
    ++drops_not_logged_;
  }
  dropped_.fetch_add(1);  // before the peer can see it
  HangUp(p.fd.get());
  p.fd = Fd();  // the descriptor is free at once (it may be what an accept is waiting for)
  p.done = true;
}

void HandshakeListener::Drive(Pending& p) {
  if (p.done) return;
  // The server's proof leaves and its connection is queued under one hold of mu_ (sends here
  // are non-blocking): a peer that has read the proof, and an owner that learns of it and then
  // calls tryNext(), find the connection queued. A rank that shuts down right after a peer
  // connected must find that connection to mark it (lazy_endpoint.h), or the peer would read a
  // closed socket and blame a crash. check_ and serve_ run outside the lock (the owner's code;
  // serve_ may wait), so a listener with serve_ gives no such promise.
  std::unique_lock<std::mutex> lock(mu_);
  HandshakeState s = p.hs->drive(p.fd.get());
  if (s == HandshakeState::kVerified) {
    lock.unlock();
    std::string why = check_ ? check_(p.hs->hello()) : "";
    lock.lock();
    if (why.empty()) {
      p.hs->accept();
      p.hs->drive(p.fd.get());
    } else {
      p.hs->reject(RemoteError("authenticated, but " + why));
    }
    s = p.hs->state();
  }
  if (s != HandshakeState::kDone) {
    lock.unlock();
    if (s == HandshakeState::kFailed) Drop(p, p.hs->error().message());
    return;
  }
  if (serve_) {
    lock.unlock();
    if (serve_(p.hs->hello(), p.fd.get())) {
      HangUp(p.fd.get());
      p.fd = Fd();
      p.done = true;
      return;
    }
    lock.lock();
  }
  if (ready_.size() < options_.max_ready) {
    ready_.push_back({std::move(p.fd), p.hs->hello(), p.peer});
    p.done = true;
  }
  lock.unlock();
  if (p.done) {
    ready_cv_.notify_all();
    uint64_t one = 1;
    (void)!::write(ready_fd_.get(), &one, sizeof(one));
    return;
  }
  Drop(p, "authenticated, but " + std::to_string(options_.max_ready) +
              " connections are already waiting to be taken");
}

void HandshakeListener::AcceptNew(std::vector<Pending>& pending) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage peer{};
    int err = 0;
    auto r = AcceptConnection(listener_.get(), &peer, options_.buffers, &err);
    if (!r.ok()) {
      if (IsFdExhaustion(err)) {
        Pending* idle = nullptr;
        auto cutoff = Clock::now() - std::chrono::milliseconds(kIdleStrangerMs);
        for (auto& p : pending)
          if (!p.done && p.since <= cutoff && (!idle || p.since < idle->since)) idle = &p;
        if (idle) {
          Drop(*idle, "dropped to make room: this process is out of file descriptors");
          continue;
        }
      }
      if (NowMicros() - last_fd_warning_us_ > 10'000'000) {
        last_fd_warning_us_ = NowMicros();
        BRAID_WARN("%s: %s", name_.c_str(), r.status().message().c_str());
      }
      // Tell the peer why rather than leave it queued; else wait a little instead of spinning on
      // a listener that stays readable.
      if (IsFdExhaustion(err)) out_of_fds_.store(err, std::memory_order_relaxed);
      if (IsFdExhaustion(err) && RefuseForLackOfFds(listener_.get(), &spare_, err)) continue;
      paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    if (!r->valid()) return;
    size_t live = 0;
    Pending* oldest = nullptr;
    for (auto& p : pending) {
      if (p.done) continue;
      ++live;
      if (!oldest || p.since < oldest->since) oldest = &p;
    }
    if (live >= kMaxPending && oldest) Drop(*oldest, "too many unauthenticated connections");
    Pending p;
    p.fd = std::move(*r);
    p.peer = FormatAddress(peer);
    p.since = Clock::now();
    p.deadline = p.since + std::chrono::milliseconds(kHandshakeTimeoutMs);
    p.hs = std::make_unique<ServerHandshake>(secret_);
    pending.push_back(std::move(p));
    Drive(pending.back());  // the greeting fits in the socket buffer: send it now
  }
}

void HandshakeListener::Run() {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    auto now = Clock::now();
    for (auto& p : pending)
      if (!p.done && now >= p.deadline)
        Drop(p, "did not complete the handshake within " + std::to_string(kHandshakeTimeoutMs) +
                    " ms");
    pending.erase(
        std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return p.done; }),
        pending.end());

    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    const bool listening = now >= paused_until_;
    if (listening) fds.push_back({listener_.get(), POLLIN, 0});
    const size_t first = fds.size();
    Clock::time_point wake = listening ? Clock::time_point::max() : paused_until_;
    for (auto& p : pending) {
      fds.push_back({p.fd.get(), p.hs->pollEvents(), 0});
      wake = std::min(wake, p.deadline);
    }
    LogSuppressedDrops(false);
    if (drops_not_logged_ > 0)  // their summary is due at the window's end
      wake = std::min(wake, now + std::chrono::microseconds(std::max<int64_t>(
                                      0, drop_window_start_us_ + kDropWindowUs - NowMicros())));
    int timeout = -1;  // nothing pending: sleep until a connection or the destructor
    if (wake != Clock::time_point::max()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
      timeout = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));  // +1: no early wake-up
    }
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      BRAID_WARN("%s: poll failed (errno %d); the listener stops", name_.c_str(), errno);
      break;
    }
    if (n == 0) continue;
    // Pending handshakes first: accepting appends to `pending`, which the indices below follow.
    const size_t count = fds.size() - first;
    for (size_t i = 0; i < count; ++i)
      if (fds[first + i].revents) Drive(pending[i]);
    if (listening && fds[1].revents) AcceptNew(pending);
  }
  for (auto& p : pending) HangUp(p.fd.get());
}

}  // namespace braid
