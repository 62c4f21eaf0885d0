// A listener whose connections must pass the handshake (handshake.h) before its owner sees them,
// served for as long as the owner lives (spec/reliability.md item 4).
//
// A listener that only accepts when its owner needs a connection lets strangers pile up in the
// kernel's backlog: once it is full, real peers cannot even connect, and a loop that then handles
// the queue one connection at a time spends a second on every idle stranger. So a thread of its
// own accepts at all times and runs every pending handshake at once in one poll loop, each under
// its own kHandshakeTimeoutMs deadline: strangers (idle, slow, garbage, wrong secret) are dropped
// within a second however many there are, and never delay a peer that knows the secret. The
// thread sleeps in poll() while nothing is pending, so an idle listener costs no CPU.
// Authenticated connections that the owner's check accepts wait in a bounded queue for next().
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/base/status.h"

namespace braid {

struct HandshakeListenerOptions {
  SocketBuffers buffers;  // of the listener and every accepted connection
  // Authenticated connections the owner has not taken yet (only holders of the secret can fill
  // it); beyond it they are dropped.
  size_t max_ready = 64;
};

class HandshakeListener {
 public:
  // An authenticated connection, positioned right after the handshake (non-blocking).
  struct Connection {
    Fd fd;
    HandshakeHello hello;
    std::string peer;  // "10.0.0.2:4711"
  };
  // Decides on an authenticated hello, on the listener's thread: "" accepts the connection,
  // anything else is why it is refused (logged; the connection is closed).
  using Check = std::function<std::string(const HandshakeHello&)>;
  // Serves a short exchange itself, on the listener's thread, right after the handshake (e.g. a
  // failure notice: a fixed-size record and a one-byte answer). Returns true when it handled
  // the connection, which is then closed; false queues it for next() as usual. It must bound
  // its own waits (the listener serves nothing else meanwhile).
  using Serve = std::function<bool(const HandshakeHello&, int fd)>;

  using Options = HandshakeListenerOptions;
  // Listens on `addr` (port 0 = ephemeral; never the wildcard) and starts serving. `name` starts
  // every log line ("rank 3/8 control listener").
  static Result<std::unique_ptr<HandshakeListener>> Start(const sockaddr_storage& addr,
                                                          const std::vector<uint8_t>& secret,
                                                          Check check, std::string name,
                                                          Serve serve = nullptr,
                                                          Options options = Options());
  // Stops the thread and closes the listener and every connection it still holds.
  ~HandshakeListener();
  HandshakeListener(const HandshakeListener&) = delete;
  HandshakeListener& operator=(const HandshakeListener&) = delete;

  const sockaddr_storage& address() const { return address_; }
  // The oldest authenticated connection not yet taken, waiting for one until `deadline`
  // (TimeoutError then; AbortedError within kAbortCheckMs once an abortable deadline is aborted).
  Result<Connection> next(Deadline deadline);
  // The oldest one, or none, without waiting.
  std::optional<Connection> tryNext();
  // Readable while a connection may be ready for tryNext() (an eventfd, for an owner that sleeps
  // in poll() on descriptors of its own: a spurious wake-up is possible, a missed one is not).
  int readyFd() const { return ready_fd_.get(); }
  // Connections dropped without being handed out (strangers, refused checks), for tests.
  uint64_t dropped() const { return dropped_.load(); }
  // The errno (EMFILE, ENFILE) of the last accept that failed for lack of file descriptors, 0 if
  // none did: connections this process could not take (their peers were told why). An owner that
  // waits for a peer's connection fails on it instead of waiting out its deadline.
  int outOfDescriptors() const { return out_of_fds_.load(std::memory_order_relaxed); }

 private:
  struct Pending;
  HandshakeListener(std::vector<uint8_t> secret, Check check, std::string name, Serve serve);
  void Run();
  void AcceptNew(std::vector<Pending>& pending);
  void Drive(Pending& p);
  void Drop(Pending& p, const std::string& why);
  // The drops not logged one by one, in one line, once their window is over (or `now_anyway`).
  void LogSuppressedDrops(bool now_anyway);

  std::vector<uint8_t> secret_;
  Check check_;
  Serve serve_;
  std::string name_;
  Fd listener_;
  sockaddr_storage address_{};
  Options options_;
  Fd wake_;      // eventfd: the destructor rings it to stop the thread
  Fd ready_fd_;  // eventfd: rung when a connection is queued for the owner
  Fd spare_;     // kept for RefuseForLackOfFds
  Clock::time_point paused_until_{};
  int64_t last_fd_warning_us_ = 0;
  // Drops are logged one line each up to kDropLinesPerWindow per window, then counted (a flood of
  // strangers leaves a few lines, not one per connection).
  int64_t drop_window_start_us_ = 0;
  int drop_lines_in_window_ = 0;
  uint64_t drops_not_logged_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<int> out_of_fds_{0};
  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::deque<Connection> ready_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace braid
