// Fuzzes the authenticated handshake (src/core/net/handshake.cc), the first bytes every braid TCP
// listener reads from anyone who connects (spec/reliability.md items 4 and 5).
//
// Input: byte 0 picks a mode, byte 1 a chunk size (how the bytes are cut into reads), the rest is
// mode-specific:
//   0  hostile server: the rest is what a server sends to a ClientHandshake, fed by hand;
//   1  hostile client: the rest is what a client sends to a ServerHandshake, fed by hand;
//   2  man in the middle: an honest client and server with secrets chosen by byte 2, a hello of
//      32 bytes, then (offset, xor) byte pairs that corrupt the relayed transcript;
//   3  over a socketpair: the rest is written to one end and HandshakeServer (byte 2 even) or
//      HandshakeClient (odd) runs on the other, as the bootstrap and tcp listeners call them.
// Invariants: without the secret nothing authenticates (a forged MAC is a bug); an untouched
// exchange with equal secrets succeeds and the server sees exactly the client's hello; any
// corrupted byte fails it; the blocking wrappers never read past the handshake.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/socket.h"

using namespace braid;

namespace {

// Payloads beyond this add nothing (every message is fixed-size) and could fill a socketpair.
constexpr size_t kMaxPayload = 4096;

std::vector<uint8_t> Secret(uint8_t seed, size_t n = 32) {
  std::vector<uint8_t> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<uint8_t>(seed * 37 + i);
  return s;
}

bool Finished(HandshakeState s) {
  return s == HandshakeState::kDone || s == HandshakeState::kFailed;
}

// Drives one machine against a fixed byte stream from the peer; returns the final state.
// `step` caps every read, so the fuzzer also explores messages split across reads.
template <typename M>
HandshakeState FeedStream(M& m, const uint8_t* in, size_t n, size_t step) {
  size_t pos = 0;
  for (int guard = 0; guard < 10000; ++guard) {
    HandshakeState s = m.state();
    if (s == HandshakeState::kWantWrite) {
      if (m.output().empty()) std::abort();  // kWantWrite must have something to send
      m.wrote(std::min(m.output().size(), step));
      continue;
    }
    if (s != HandshakeState::kWantRead) return s;
    size_t want = m.wantInput();
    if (want == 0 || want > kHandshakeClientBytes) std::abort();
    if (pos == n) return s;
    size_t k = std::min({want, step, n - pos});
    m.feed(in + pos, k);
    pos += k;
  }
  std::abort();  // no progress: a state machine loop
}

HandshakeHello HelloFrom(const uint8_t* p) {
  HandshakeHello h;
  std::memcpy(&h.purpose, p, 4);
  std::memcpy(&h.rank, p + 4, 4);
  std::memcpy(&h.nranks, p + 8, 4);
  std::memcpy(&h.channel, p + 12, 4);
  std::memcpy(h.comm_nonce, p + 16, 16);
  return h;
}

bool SameHello(const HandshakeHello& a, const HandshakeHello& b) {
  return a.purpose == b.purpose && a.rank == b.rank && a.nranks == b.nranks &&
         a.channel == b.channel && std::memcmp(a.comm_nonce, b.comm_nonce, 16) == 0;
}

void HostileServer(const uint8_t* p, size_t n, size_t step) {
  uint8_t h[32] = {};
  ClientHandshake c(Secret(1), HelloFrom(h));
  HandshakeState s = FeedStream(c, p, n, step);
  // The client's proof of the server's MAC covers a fresh client nonce: unforgeable.
  if (s == HandshakeState::kDone) std::abort();
  if (s == HandshakeState::kFailed && c.error().message().empty()) std::abort();
}

void HostileClient(const uint8_t* p, size_t n, size_t step) {
  ServerHandshake srv(Secret(1));
  HandshakeState s = FeedStream(srv, p, n, step);
  if (s == HandshakeState::kVerified || s == HandshakeState::kDone) std::abort();
  if (s == HandshakeState::kFailed && srv.error().message().empty()) std::abort();
}

// Relays bytes between an honest pair, xoring transcript bytes named by the input.
void ManInTheMiddle(const uint8_t* p, size_t n, size_t step) {
  if (n < 1 + 32) return;
  const uint8_t secrets = p[0] % 3;
  const HandshakeHello hello = HelloFrom(p + 1);
  std::vector<uint8_t> flip(kHandshakeGreetingBytes + kHandshakeClientBytes + kHandshakeMacBytes);
  bool corrupted = false;
  for (size_t i = 33; i + 1 < n; i += 2) {
    size_t at = p[i] % flip.size();
    flip[at] ^= p[i + 1];
  }
  for (uint8_t f : flip) corrupted = corrupted || f != 0;

  std::vector<uint8_t> server_secret = Secret(1), client_secret = Secret(1);
  if (secrets == 1) client_secret = Secret(2);
  if (secrets == 2) server_secret = client_secret = Secret(1, 8);  // too short: refused
  ServerHandshake srv(server_secret);
  ClientHandshake cli(client_secret, hello);

  size_t off = 0;  // transcript offset, for `flip`
  auto relay = [&](auto& from, auto& to) {
    size_t k = 0;
    std::vector<uint8_t> bytes = from.output();
    from.wrote(bytes.size());
    for (size_t i = 0; i < bytes.size(); i += k) {
      uint8_t chunk[kHandshakeClientBytes];
      k = std::min({step, bytes.size() - i, sizeof(chunk)});
      for (size_t j = 0; j < k; ++j) chunk[j] = bytes[i + j] ^ flip[(off + j) % flip.size()];
      off += k;
      if (to.state() != HandshakeState::kWantRead) return;
      if (k > to.wantInput()) std::abort();  // a peer never sends more than the step needs
      to.feed(chunk, k);
    }
  };
  for (int round = 0; round < 8; ++round) {
    if (srv.state() == HandshakeState::kVerified) srv.accept();
    if (srv.state() == HandshakeState::kWantWrite && cli.state() == HandshakeState::kWantRead)
      relay(srv, cli);
    else if (cli.state() == HandshakeState::kWantWrite && srv.state() == HandshakeState::kWantRead)
      relay(cli, srv);
  }
  const bool both = srv.state() == HandshakeState::kDone && cli.state() == HandshakeState::kDone;
  if (secrets == 0 && !corrupted) {
    if (!both) std::abort();
    if (!SameHello(srv.hello(), hello)) std::abort();  // hello encoding round trip
  } else if (both) {
    std::abort();  // authenticated across different secrets or a tampered transcript
  }
  if (secrets == 2 && (srv.state() != HandshakeState::kFailed || !Finished(cli.state())))
    std::abort();
}

// The blocking wrappers over a socketpair: the rest of the input is all the peer ever sends.
void OverSocket(const uint8_t* p, size_t n) {
  if (n < 1) return;
  const bool as_server = p[0] % 2 == 0;
  ++p;
  --n;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  Fd mine(fds[0]), theirs(fds[1]);
  if (n && send(theirs.get(), p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) std::abort();
  shutdown(theirs.get(), SHUT_WR);  // then EOF: no run waits for its deadline

  size_t consumed;
  if (as_server) {
    auto r = HandshakeServer(mine.get(), Secret(1), Deadline::After(5000));
    if (r.ok()) std::abort();
    consumed = std::min(n, kHandshakeClientBytes);
  } else {
    uint8_t h[32] = {};
    Status st = HandshakeClient(mine.get(), Secret(1), HelloFrom(h), Deadline::After(5000));
    if (st.ok()) std::abort();
    const bool greeting_ok = n >= kHandshakeGreetingBytes && std::memcmp(p, "BRDH\x01\x00", 6) == 0;
    consumed = std::min(n, kHandshakeGreetingBytes);
    if (greeting_ok) consumed += std::min(n - consumed, kHandshakeMacBytes);
  }
  // Bytes after the handshake belong to the caller: they must still be in the socket.
  size_t left = 0;
  uint8_t buf[kMaxPayload];
  for (;;) {
    ssize_t r = recv(mine.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (r <= 0) break;
    left += static_cast<size_t>(r);
  }
  if (consumed + left != n) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > kMaxPayload) return 0;
  const uint8_t mode = data[0] % 4;
  const size_t step = data[1] == 0 ? kHandshakeClientBytes : data[1];
  const uint8_t* p = data + 2;
  const size_t n = size - 2;
  switch (mode) {
    case 0:
      HostileServer(p, n, step);
      break;
    case 1:
      HostileClient(p, n, step);
      break;
    case 2:
      ManInTheMiddle(p, n, step);
      break;
    default:
      OverSocket(p, n);
      break;
  }
  return 0;
}
