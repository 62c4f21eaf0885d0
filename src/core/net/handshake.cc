#include "core/net/handshake.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "core/base/status.h"

namespace braid {
namespace {

std::mutex& CryptoMutex() {
  static std::mutex mu;
  return mu;
}

constexpr uint8_t kGreetingMagic[4] = {'B', 'R', 'D', 'H'};
constexpr uint8_t kRefusalMagic[4] = {'B', 'R', 'D', 'R'};
constexpr uint16_t kHandshakeVersion = 1;
constexpr size_t kMinSecretBytes = 16;

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// What the client reports for a server's refusal (see handshake.h).
Status RefusalStatus(uint32_t err, uint32_t limit) {
  std::string why;
  if (err == EMFILE) {
    why = "its process has run out of file descriptors (EMFILE";
    if (limit > 0) why += ", limit " + std::to_string(limit) + " open files";
    why +=
        "): raise the open-file limit of that process with 'ulimit -n' (RLIMIT_NOFILE) before it "
        "starts, e.g. ulimit -n 65536";
  } else if (err == ENFILE) {
    why =
        "its host has run out of file descriptors (ENFILE: the system-wide table is full): raise "
        "fs.file-max (sysctl) there or stop what holds so many files";
  } else {
    why = ErrnoMessage("its accept", static_cast<int>(err));
  }
  return SystemError("the listener refused the connection: " + why);
}

void EncodeHello(const HandshakeHello& h, uint8_t* out) {
  Put32(out, h.purpose);
  Put32(out + 4, static_cast<uint32_t>(h.rank));
  Put32(out + 8, static_cast<uint32_t>(h.nranks));
  Put32(out + 12, static_cast<uint32_t>(h.channel));
  std::memcpy(out + 16, h.comm_nonce, 16);
}

HandshakeHello DecodeHello(const uint8_t* in) {
  HandshakeHello h;
  h.purpose = Get32(in);
  h.rank = static_cast<int32_t>(Get32(in + 4));
  h.nranks = static_cast<int32_t>(Get32(in + 8));
  h.channel = static_cast<int32_t>(Get32(in + 12));
  std::memcpy(h.comm_nonce, in + 16, 16);
  return h;
}

// HMAC-SHA256(secret, label | a | b | hello). The labels keep a client's MAC from ever being
// valid as a server's (reflection).
bool Mac(const std::vector<uint8_t>& secret, const char* label, const uint8_t* a, const uint8_t* b,
         const uint8_t* hello, uint8_t out[kHandshakeMacBytes]) {
  uint8_t msg[7 + 2 * kHandshakeNonceBytes + kHandshakeHelloBytes];
  std::memcpy(msg, label, 7);
  std::memcpy(msg + 7, a, kHandshakeNonceBytes);
  std::memcpy(msg + 7 + kHandshakeNonceBytes, b, kHandshakeNonceBytes);
  std::memcpy(msg + 7 + 2 * kHandshakeNonceBytes, hello, kHandshakeHelloBytes);
  unsigned int len = 0;
  CryptoLock lock;
  const unsigned char* r = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg,
                                sizeof(msg), out, &len);
  return r != nullptr && len == kHandshakeMacBytes;
}

// Shared non-blocking I/O loop of both machines.
template <typename M>
HandshakeState Drive(M& m, int fd) {
  for (;;) {
    HandshakeState s = m.state();
    if (s == HandshakeState::kWantWrite) {
      const auto& out = m.output();
      ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        m.wrote(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return s;
      if (n < 0 && errno == EINTR) continue;
      m.failIo(errno);
      return m.state();
    }
    if (s == HandshakeState::kWantRead) {
      uint8_t buf[kHandshakeClientBytes];
      // Exactly what the step needs: bytes after the handshake belong to the caller.
      size_t want = m.wantInput();
      ssize_t n = ::recv(fd, buf, want, MSG_DONTWAIT);
      if (n > 0) {
        m.feed(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        m.failIo(0);
        return m.state();
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) return s;
      if (errno == EINTR) continue;
      m.failIo(errno);
      return m.state();
    }
    return s;
  }
}

short EventsFor(HandshakeState s) {
  if (s == HandshakeState::kWantWrite) return POLLOUT;
  if (s == HandshakeState::kWantRead) return POLLIN;
  return 0;
}

Status IoStatus(int err, const char* when) {
  if (err == 0) return RemoteError(std::string("the peer closed the connection ") + when);
  if (err == ECONNRESET || err == EPIPE)
    return RemoteError(std::string("the peer reset the connection ") + when);
  return SystemError(ErrnoMessage(std::string("socket I/O ") + when, err));
}

// Runs a machine on `fd` until it is done, failed or the deadline passes.
template <typename M, typename OnVerified>
Status RunBlocking(M& m, int fd, Deadline deadline, OnVerified on_verified) {
  for (;;) {
    HandshakeState s = m.drive(fd);
    if (s == HandshakeState::kVerified) {
      on_verified();
      continue;
    }
    if (s == HandshakeState::kDone) return Status::Ok();
    if (s == HandshakeState::kFailed) return m.error();
    pollfd p{fd, m.pollEvents(), 0};
    int r = ::poll(&p, 1, deadline.remainingMs());
    if (r < 0 && errno != EINTR) return SystemError(ErrnoMessage("poll", errno));
    if (r == 0 && deadline.expired())
      return TimeoutError("handshake timed out: the peer did not complete authentication");
  }
}

}  // namespace

void InstallCryptoForkGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    // prepare: wait until no braid thread is inside libcrypto; parent and child: release.
    pthread_atfork([] { CryptoMutex().lock(); }, [] { CryptoMutex().unlock(); },
                   [] { CryptoMutex().unlock(); });
  });
}

CryptoLock::CryptoLock() {
  InstallCryptoForkGuard();
  CryptoMutex().lock();
}

CryptoLock::~CryptoLock() {
  CryptoMutex().unlock();
}

// ---------------------------------------------------------------- server

ServerHandshake::ServerHandshake(const std::vector<uint8_t>& secret) : secret_(secret) {
  if (secret_.size() < kMinSecretBytes) {
    fail(InvalidArgument("handshake: the secret is shorter than 16 bytes"));
    return;
  }
  int ok;
  {
    CryptoLock lock;
    ok = RAND_bytes(nonce_s_, sizeof(nonce_s_));
  }
  if (ok != 1) {
    fail(SystemError("handshake: OpenSSL RAND_bytes failed"));
    return;
  }
  out_.assign(kGreetingMagic, kGreetingMagic + 4);
  out_.push_back(static_cast<uint8_t>(kHandshakeVersion));
  out_.push_back(static_cast<uint8_t>(kHandshakeVersion >> 8));
  out_.insert(out_.end(), nonce_s_, nonce_s_ + sizeof(nonce_s_));
}

void ServerHandshake::fail(Status st) {
  state_ = HandshakeState::kFailed;
  error_ = std::move(st);
  out_.clear();
}

short ServerHandshake::pollEvents() const {
  return EventsFor(state_);
}

void ServerHandshake::wrote(size_t n) {
  if (state_ != HandshakeState::kWantWrite) return;
  out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(std::min(n, out_.size())));
  if (out_.empty()) state_ = proof_queued_ ? HandshakeState::kDone : HandshakeState::kWantRead;
}

size_t ServerHandshake::wantInput() const {
  return state_ == HandshakeState::kWantRead ? kHandshakeClientBytes - in_len_ : 0;
}

void ServerHandshake::feed(const uint8_t* data, size_t n) {
  if (state_ != HandshakeState::kWantRead) return;
  n = std::min(n, wantInput());
  std::memcpy(in_ + in_len_, data, n);
  in_len_ += n;
  if (in_len_ < kHandshakeClientBytes) return;
  const uint8_t* nonce_c = in_;
  const uint8_t* hello = in_ + kHandshakeNonceBytes;
  const uint8_t* mac = hello + kHandshakeHelloBytes;
  uint8_t expected[kHandshakeMacBytes];
  if (!Mac(secret_, "braid-c", nonce_s_, nonce_c, hello, expected)) {
    fail(InternalError("handshake: HMAC-SHA256 failed"));
    return;
  }
  if (CRYPTO_memcmp(expected, mac, kHandshakeMacBytes) != 0) {
    // Nothing of the message is interpreted: it is not authentic.
    fail(RemoteError("authentication failed (wrong secret, garbage or a replayed message)"));
    return;
  }
  hello_ = DecodeHello(hello);
  state_ = HandshakeState::kVerified;
}

void ServerHandshake::accept() {
  if (state_ != HandshakeState::kVerified) return;
  uint8_t proof[kHandshakeMacBytes];
  uint8_t hello[kHandshakeHelloBytes];
  EncodeHello(hello_, hello);
  if (!Mac(secret_, "braid-s", in_, nonce_s_, hello, proof)) {
    fail(InternalError("handshake: HMAC-SHA256 failed"));
    return;
  }
  out_.assign(proof, proof + sizeof(proof));
  proof_queued_ = true;
  state_ = HandshakeState::kWantWrite;
}

void ServerHandshake::reject(Status why) {
  if (state_ == HandshakeState::kVerified) fail(std::move(why));
}

// A local class has the member function's access: Drive() sees the machine through it.
HandshakeState ServerHandshake::drive(int fd) {
  struct Adapter {
    ServerHandshake& m;
    HandshakeState state() const { return m.state_; }
    const std::vector<uint8_t>& output() const { return m.out_; }
    void wrote(size_t n) { m.wrote(n); }
    size_t wantInput() const { return m.wantInput(); }
    void feed(const uint8_t* p, size_t n) { m.feed(p, n); }
    void failIo(int err) {
      const char* when = m.in_len_ > 0 ? "in the middle of its handshake message"
                                       : "before sending its handshake message";
      m.fail(IoStatus(err, when));
    }
  } a{*this};
  return Drive(a, fd);
}

// ---------------------------------------------------------------- client

ClientHandshake::ClientHandshake(const std::vector<uint8_t>& secret, const HandshakeHello& hello)
    : secret_(secret), hello_(hello) {
  if (secret_.size() < kMinSecretBytes) {
    fail(InvalidArgument("handshake: the secret is shorter than 16 bytes"));
    return;
  }
  int ok;
  {
    CryptoLock lock;
    ok = RAND_bytes(nonce_c_, sizeof(nonce_c_));
  }
  if (ok != 1) fail(SystemError("handshake: RAND_bytes failed"));
}

void ClientHandshake::fail(Status st) {
  state_ = HandshakeState::kFailed;
  error_ = std::move(st);
  out_.clear();
}

short ClientHandshake::pollEvents() const {
  return EventsFor(state_);
}

void ClientHandshake::wrote(size_t n) {
  if (state_ != HandshakeState::kWantWrite) return;
  out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(std::min(n, out_.size())));
  if (out_.empty()) {
    state_ = HandshakeState::kWantRead;
    in_len_ = 0;
  }
}

size_t ClientHandshake::wantInput() const {
  if (state_ != HandshakeState::kWantRead) return 0;
  return (greeting_done_ ? kHandshakeMacBytes : kHandshakeGreetingBytes) - in_len_;
}

void ClientHandshake::feed(const uint8_t* data, size_t n) {
  if (state_ != HandshakeState::kWantRead) return;
  n = std::min(n, wantInput());
  std::memcpy(in_ + in_len_, data, n);
  in_len_ += n;
  if (!greeting_done_) {
    if (in_len_ < kHandshakeGreetingBytes) return;
    if (std::memcmp(in_, kRefusalMagic, 4) == 0) {
      refused_for_fds_ = true;
      fail(RefusalStatus(Get32(in_ + 6), Get32(in_ + 10)));
      return;
    }
    if (std::memcmp(in_, kGreetingMagic, 4) != 0) {
      fail(RemoteError("the peer is not a braid endpoint (unexpected greeting)"));
      return;
    }
    uint16_t version = static_cast<uint16_t>(in_[4] | (in_[5] << 8));
    if (version != kHandshakeVersion) {
      fail(InvalidUsage("the peer speaks handshake version " + std::to_string(version) +
                        ", this library version " + std::to_string(kHandshakeVersion) +
                        ": every rank must run the same braid"));
      return;
    }
    const uint8_t* nonce_s = in_ + 6;
    uint8_t hello[kHandshakeHelloBytes];
    EncodeHello(hello_, hello);
    uint8_t mac[kHandshakeMacBytes];
    if (!Mac(secret_, "braid-c", nonce_s, nonce_c_, hello, mac) ||
        !Mac(secret_, "braid-s", nonce_c_, nonce_s, hello, expected_mac_)) {
      fail(InternalError("handshake: HMAC-SHA256 failed"));
      return;
    }
    out_.assign(nonce_c_, nonce_c_ + sizeof(nonce_c_));
    out_.insert(out_.end(), hello, hello + sizeof(hello));
    out_.insert(out_.end(), mac, mac + sizeof(mac));
    greeting_done_ = true;
    in_len_ = 0;
    state_ = HandshakeState::kWantWrite;
    return;
  }
  if (in_len_ < kHandshakeMacBytes) return;
  if (CRYPTO_memcmp(in_, expected_mac_, kHandshakeMacBytes) != 0) {
    fail(RemoteError("the peer failed to prove it knows the secret: it is not part of this job"));
    return;
  }
  state_ = HandshakeState::kDone;
}

HandshakeState ClientHandshake::drive(int fd) {
  struct Adapter {
    ClientHandshake& m;
    HandshakeState state() const { return m.state_; }
    const std::vector<uint8_t>& output() const { return m.out_; }
    void wrote(size_t n) { m.wrote(n); }
    size_t wantInput() const { return m.wantInput(); }
    void feed(const uint8_t* p, size_t n) { m.feed(p, n); }
    void failIo(int err) {
      // After our message the usual reason is that the server did not accept our proof.
      const char* when = m.greeting_done_
                             ? "after our handshake message: it rejected our credentials (ranks "
                               "given different unique ids?) or dropped us as too slow"
                             : "before completing its greeting";
      m.closed_by_peer_ = err == 0 || err == ECONNRESET || err == EPIPE;
      m.fail(IoStatus(err, when));
    }
  } a{*this};
  return Drive(a, fd);
}

// ---------------------------------------------------------------- refusal

Fd OpenSpareFd() {
  return Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

bool RefuseForLackOfFds(int listen_fd, Fd* spare, int err) {
  if (!spare->valid()) return false;
  *spare = Fd();
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    uint8_t msg[kHandshakeGreetingBytes] = {};
    std::memcpy(msg, kRefusalMagic, 4);
    msg[4] = static_cast<uint8_t>(kHandshakeVersion);
    msg[5] = static_cast<uint8_t>(kHandshakeVersion >> 8);
    Put32(msg + 6, static_cast<uint32_t>(err));
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 0xffffffffu)
      Put32(msg + 10, static_cast<uint32_t>(rl.rlim_cur));
    // A new connection's send buffer is empty: the few bytes go out at once. The client sends
    // nothing before the greeting, so closing cannot reset the connection under them.
    (void)!::send(fd, msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }
  *spare = OpenSpareFd();
  return fd >= 0;
}

// ---------------------------------------------------------------- blocking wrappers

Status HandshakeClient(int fd, const std::vector<uint8_t>& secret, const HandshakeHello& hello,
                       Deadline deadline) {
  ClientHandshake m(secret, hello);
  return RunBlocking(m, fd, deadline, [] {});
}

Result<HandshakeHello> HandshakeServer(int fd, const std::vector<uint8_t>& secret,
                                       Deadline deadline) {
  ServerHandshake m(secret);
  Status st = RunBlocking(m, fd, deadline, [&] { m.accept(); });
  if (!st.ok()) return st;
  return m.hello();
}

}  // namespace braid
