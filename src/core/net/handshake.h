// The authenticated handshake every braid TCP connection starts with (bootstrap and data).
//
// server -> client : "BRDH" u16 version, 32-byte nonce_s
// client -> server : 32-byte nonce_c, fixed-size hello (purpose, rank, nranks, channel),
//                    HMAC-SHA256(secret, "braid-c" | nonce_s | nonce_c | hello)
// server -> client : HMAC-SHA256(secret, "braid-s" | nonce_c | nonce_s | hello)
// All messages have fixed sizes, so nothing read before authentication is a length; a wrong MAC
// closes the connection. Fresh nonces on both sides defeat replays. Comparison is constant-time.
//
// A server that cannot serve the connection because its process is out of file descriptors
// sends a refusal in place of the greeting, of the greeting's size: "BRDR" u16 version,
// u32 errno (EMFILE / ENFILE), u32 its open-file limit (0 = unknown), zeros. The client fails at
// once with a SystemError that says which limit to raise, instead of waiting out its deadline or
// suspecting its credentials. (It is unauthenticated: a fake server can only refuse, which it can
// do anyway by closing.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/base/clock.h"
#include "core/net/socket.h"
#include "core/base/status.h"

namespace braid {

struct HandshakeHello {
  uint32_t purpose = 0;  // 1 = bootstrap, 2 = tcp data
  int32_t rank = -1;
  int32_t nranks = 0;
  int32_t channel = 0;
  uint8_t comm_nonce[16] = {};  // which communicator (the unique id's nonce)
};

// OpenSSL and fork(): a process may fork (a launcher, a test harness, a data loader) while a
// braid thread such as the rendezvous service is inside OpenSSL; the child would inherit a held
// OpenSSL lock and deadlock in its first handshake. So every braid call into libcrypto runs
// under CryptoLock, and a pthread_atfork handler holds the same lock across fork().
class CryptoLock {
 public:
  CryptoLock();
  ~CryptoLock();
  CryptoLock(const CryptoLock&) = delete;
  CryptoLock& operator=(const CryptoLock&) = delete;
};
// Installs the fork handler once; entry points call it before they start threads.
void InstallCryptoForkGuard();

// Sizes on the wire (all fixed).
inline constexpr size_t kHandshakeNonceBytes = 32;
inline constexpr size_t kHandshakeMacBytes = 32;
inline constexpr size_t kHandshakeHelloBytes = 32;
inline constexpr size_t kHandshakeGreetingBytes = 4 + 2 + kHandshakeNonceBytes;
inline constexpr size_t kHandshakeClientBytes =
    kHandshakeNonceBytes + kHandshakeHelloBytes + kHandshakeMacBytes;
// How long a listener gives an unauthenticated connection to finish its part of the handshake
// before dropping it (spec/reliability.md item 4: bogus connections go within 1 s).
inline constexpr int kHandshakeTimeoutMs = 1000;

enum class HandshakeState {
  kWantWrite,  // output() holds bytes to send
  kWantRead,   // wantInput() more bytes are needed
  kVerified,   // server only: the client proved the secret; hello() is authentic; call accept()
  kDone,
  kFailed,  // error() says why; close the connection
};

// The server's side as a non-blocking state machine, so one poll loop can run many
// handshakes at once (a slow or hostile client never blocks the others). Either drive it on a
// socket with drive(), or feed it bytes by hand (output()/wrote(), wantInput()/feed()).
// Never reads beyond the handshake: bytes the client sends afterwards stay in the socket.
class ServerHandshake {
 public:
  explicit ServerHandshake(const std::vector<uint8_t>& secret);
  // Sends and receives what the socket allows right now (MSG_DONTWAIT), returns the new state.
  HandshakeState drive(int fd);
  HandshakeState state() const { return state_; }
  // POLLIN / POLLOUT for the current state (0 when kVerified/kDone/kFailed).
  short pollEvents() const;

  const std::vector<uint8_t>& output() const { return out_; }
  void wrote(size_t n);
  size_t wantInput() const;
  void feed(const uint8_t* data, size_t n);  // n <= wantInput()

  const HandshakeHello& hello() const { return hello_; }
  // After kVerified: queues the server's proof (then kWantWrite .. kDone).
  void accept();
  // After kVerified: refuses the client (kFailed with `why`); nothing more is sent.
  void reject(Status why);
  const Status& error() const { return error_; }

 private:
  void fail(Status st);
  std::vector<uint8_t> secret_;
  uint8_t nonce_s_[kHandshakeNonceBytes] = {};
  std::vector<uint8_t> out_;
  uint8_t in_[kHandshakeClientBytes] = {};
  size_t in_len_ = 0;
  HandshakeHello hello_;
  HandshakeState state_ = HandshakeState::kWantWrite;
  bool proof_queued_ = false;
  Status error_;
};

// The client's side, same shape (no kVerified state: it ends in kDone once the server proved
// the secret).
class ClientHandshake {
 public:
  ClientHandshake(const std::vector<uint8_t>& secret, const HandshakeHello& hello);
  HandshakeState drive(int fd);
  HandshakeState state() const { return state_; }
  short pollEvents() const;

  const std::vector<uint8_t>& output() const { return out_; }
  void wrote(size_t n);
  size_t wantInput() const;
  void feed(const uint8_t* data, size_t n);
  const Status& error() const { return error_; }
  // After kFailed: whether the peer closed or reset the connection (often transient: a busy
  // listener drops slow handshakes) rather than failing a check (final).
  bool closedByPeer() const { return closed_by_peer_; }
  // After kFailed: the server refused the connection because its process or host ran out of
  // file descriptors (error() says which and what to raise): the server's failure, not ours.
  bool refusedForLackOfFds() const { return refused_for_fds_; }

 private:
  void fail(Status st);
  std::vector<uint8_t> secret_;
  bool closed_by_peer_ = false;
  bool refused_for_fds_ = false;
  HandshakeHello hello_;
  uint8_t nonce_c_[kHandshakeNonceBytes] = {};
  uint8_t expected_mac_[kHandshakeMacBytes] = {};
  std::vector<uint8_t> out_;
  uint8_t in_[kHandshakeGreetingBytes] = {};
  size_t in_len_ = 0;
  bool greeting_done_ = false;
  HandshakeState state_ = HandshakeState::kWantRead;
  Status error_;
};

// For a listener whose accept() fails with EMFILE/ENFILE (`err`): the connection stays queued,
// and its peer would wait in vain. Closes `spare` (a descriptor the listener keeps for this, from
// OpenSpareFd) for a moment to accept one pending connection, sends it the refusal and closes it,
// then re-opens the spare. False when nothing was refused (none pending, or no spare).
bool RefuseForLackOfFds(int listen_fd, Fd* spare, int err);
Fd OpenSpareFd();

// Blocking (poll-based, bounded by deadline) handshakes on a connected socket.
Status HandshakeClient(int fd, const std::vector<uint8_t>& secret, const HandshakeHello& hello,
                       Deadline deadline);
Result<HandshakeHello> HandshakeServer(int fd, const std::vector<uint8_t>& secret,
                                       Deadline deadline);

}  // namespace braid
