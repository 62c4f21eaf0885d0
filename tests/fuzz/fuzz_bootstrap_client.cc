// Fuzzes a rank's side of the rendezvous (src/core/net/bootstrap.cc): everything Bootstrap::Connect
// and Bootstrap::allGather decode from the root's frames (bootstrap_wire.h). The decoding lives
// inside the real socket code, so the real functions run against a fake root on loopback: it
// completes the authenticated handshake (so the rank gets past it, as from a real root) and then
// sends the fuzz input verbatim and closes, so no run waits for a deadline.
//
// Input: byte 0 -> nranks (1..8, or 4096), byte 1 -> this rank, byte 2 -> allGather rounds
// (0..3), then the bytes the root sends after the handshake.
// Invariants: a reference decoder written from bootstrap_wire.h predicts which calls succeed and
// what they return; no length read from the wire allocates beyond its frame type's bound (ASan's
// malloc limit, -rss_limit_mb, reports it); nothing hangs (-timeout).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/net/bootstrap.h"
#include "core/net/bootstrap_wire.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"

using namespace braid;
namespace wire = bootstrap_wire;

namespace {

// Group sizes: small ones keep runs cheap (a reply may be nranks x 1 MiB); 4096 lets a header
// ask for more than the fuzzer's malloc limit (-rss_limit_mb), which must not be allocated.
constexpr int kNranks[16] = {1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 6, 7, 8, 4096};

struct Root {
  Fd listener;
  UniqueIdData id;
};

const Root& FakeRoot() {
  static Root* root = [] {
    auto* r = new Root;
    auto listener = ListenOn(LoopbackInterface().addr, 16);
    if (!listener.ok()) std::abort();
    r->listener = std::move(*listener);
    auto addr = LocalAddress(r->listener.get());
    if (!addr.ok()) std::abort();
    r->id.root = *addr;
    for (size_t i = 0; i < r->id.secret.size(); ++i) r->id.secret[i] = static_cast<uint8_t>(7 * i);
    for (size_t i = 0; i < r->id.nonce.size(); ++i) r->id.nonce[i] = static_cast<uint8_t>(i + 1);
    return r;
  }();
  return *root;
}

// The fake root's side of one connection: handshake, the fuzz bytes, EOF, then drain whatever
// the rank sends until it closes.
void ServeOnce(const Root& root, const std::string& bytes) {
  Deadline deadline = Deadline::After(5000);
  Fd conn;
  while (!conn.valid() && !deadline.expired()) {
    pollfd p{root.listener.get(), POLLIN, 0};
    poll(&p, 1, deadline.remainingMs());
    auto r = AcceptConnection(root.listener.get(), nullptr);
    if (!r.ok()) return;
    conn = std::move(*r);
  }
  if (!conn.valid()) return;
  const std::vector<uint8_t> secret(root.id.secret.begin(), root.id.secret.end());
  auto hello = HandshakeServer(conn.get(), secret, deadline);
  if (!hello.ok()) return;
  if (!bytes.empty() && !SendAll(conn.get(), bytes.data(), bytes.size(), deadline).ok()) return;
  shutdown(conn.get(), SHUT_WR);
  char sink[4096];
  while (!deadline.expired()) {
    pollfd p{conn.get(), POLLIN, 0};
    if (poll(&p, 1, deadline.remainingMs()) <= 0) continue;
    ssize_t n = recv(conn.get(), sink, sizeof(sink), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
}

// Reference decoder: the frame rules of bootstrap_wire.h / BootstrapImpl::ReadFrame.
struct Frame {
  wire::Header h;
  std::string payload;
};

std::optional<Frame> NextFrame(const std::string& s, size_t* pos, int nranks) {
  if (s.size() - *pos < wire::kHeaderBytes) return std::nullopt;
  Frame f;
  f.h = wire::DecodeHeader(reinterpret_cast<const uint8_t*>(s.data() + *pos));
  uint64_t max;
  if (f.h.tag == wire::kRegistered)
    max = 16;
  else if (f.h.tag == wire::kReply)
    max = wire::MaxReplyBytes(nranks);
  else if (f.h.tag == wire::kError)
    max = wire::kMaxErrorBytes;
  else
    return std::nullopt;
  if (f.h.len > max || f.h.len > s.size() - *pos - wire::kHeaderBytes) return std::nullopt;
  f.payload = s.substr(*pos + wire::kHeaderBytes, f.h.len);
  *pos += wire::kHeaderBytes + f.h.len;
  if (f.h.tag == wire::kError) return std::nullopt;
  return f;
}

std::optional<std::vector<std::string>> ParseReply(const Frame& f, int nranks) {
  if (f.h.tag != wire::kReply || f.h.arg != static_cast<uint32_t>(nranks)) return std::nullopt;
  std::vector<std::string> out;
  size_t pos = 0;
  for (int r = 0; r < nranks; ++r) {
    if (f.payload.size() - pos < 4) return std::nullopt;
    uint32_t n;
    std::memcpy(&n, f.payload.data() + pos, 4);  // little endian host (x86-64, aarch64)
    pos += 4;
    if (n > kMaxBootstrapMessage || f.payload.size() - pos < n) return std::nullopt;
    out.push_back(f.payload.substr(pos, n));
    pos += n;
  }
  if (pos != f.payload.size()) return std::nullopt;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int nranks = kNranks[data[0] % 16];
  const int rank = data[1] % nranks;
  const int rounds = data[2] % 4;
  const std::string stream(reinterpret_cast<const char*>(data + 3), size - 3);
  const Root& root = FakeRoot();

  std::thread server(ServeOnce, std::cref(root), std::cref(stream));
  auto bs = Bootstrap::Connect(root.id, rank, nranks, Deadline::After(5000));

  size_t pos = 0;
  auto reg = NextFrame(stream, &pos, nranks);
  const bool expect_ok = reg && reg->h.tag == wire::kRegistered && reg->payload.size() == 16 &&
                         reg->h.arg == static_cast<uint32_t>(nranks);
  if (bs.ok() != expect_ok) std::abort();
  if (bs.ok()) {
    Bootstrap& b = **bs;
    if (b.rank() != rank || b.nranks() != nranks) std::abort();
    if (std::memcmp(b.commNonce().data(), reg->payload.data(), 16) != 0) std::abort();
    bool broken = false;
    for (int round = 0; round < rounds; ++round) {
      auto got = b.allGather("rank " + std::to_string(rank), Deadline::After(5000));
      std::optional<std::vector<std::string>> want;
      if (!broken) {
        auto f = NextFrame(stream, &pos, nranks);
        if (f) want = ParseReply(*f, nranks);
      }
      if (got.ok() != want.has_value()) std::abort();
      if (!got.ok()) {
        if (got.status().message().empty()) std::abort();
        broken = true;  // a broken stream stays broken (the rank's calls fail from now on)
        continue;
      }
      if (*got != *want) std::abort();
    }
  } else if (bs.status().message().empty()) {
    std::abort();
  }
  bs = InternalError("closed");  // closes the connection, so the fake root sees EOF
  server.join();
  return 0;
}
