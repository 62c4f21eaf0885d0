// Fuzzes the rendezvous service (src/core/net/rendezvous.cc), the root's side of the bootstrap: the
// hello a rank authenticates with and every frame a rank sends afterwards (bootstrap_wire.h).
// The frame parser is inside the service's poll loop, so the real service runs (StartRendezvous
// on loopback) and a client that knows the secret authenticates with a fuzzed hello, sends the
// fuzz input as its frames, half-closes, and reads every answer until the service hangs up.
// (What unauthenticated strangers send is fuzz_handshake's mode 1.)
//
// Input: byte 0 -> nranks (mostly 1, also 2, 3 and out-of-range values), byte 1 -> rank,
// byte 2 -> purpose / communicator nonce (mostly right), then the frames.
// Invariants: for a single-rank job a reference model predicts the service's answers exactly
// (registered, one reply per complete gather frame, an error for a bad tag or length and then
// nothing); otherwise every answer is a well-formed frame and an error frame is the last one; the
// service thread ends (no leaked thread or fd); nothing crashes, leaks or hangs.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

struct Frame {
  wire::Header h;
  std::string payload;
};

// Splits what the service sent into frames; false when it is not a sequence of whole frames.
bool SplitFrames(const std::string& s, std::vector<Frame>* out) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (s.size() - pos < wire::kHeaderBytes) return false;
    Frame f;
    f.h = wire::DecodeHeader(reinterpret_cast<const uint8_t*>(s.data() + pos));
    pos += wire::kHeaderBytes;
    if (f.h.len > s.size() - pos) return false;
    f.payload = s.substr(pos, f.h.len);
    pos += f.h.len;
    out->push_back(std::move(f));
  }
  return true;
}

std::string U32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// What the service answers a registered rank of a 1-rank job that sends `in`.
std::vector<Frame> ExpectedSingleRank(const std::string& in, const std::string& nonce) {
  std::vector<Frame> out;
  out.push_back({{wire::kRegistered, 1, nonce.size()}, nonce});
  size_t pos = 0;
  while (in.size() - pos >= wire::kHeaderBytes) {
    wire::Header h = wire::DecodeHeader(reinterpret_cast<const uint8_t*>(in.data() + pos));
    if (h.tag != wire::kGather || h.len > kMaxBootstrapMessage) {
      out.push_back({{wire::kError, static_cast<uint32_t>(ErrorClass::kRemote), 0}, ""});
      return out;
    }
    if (in.size() - pos - wire::kHeaderBytes < h.len) return out;  // cut short by our EOF
    std::string payload = U32(static_cast<uint32_t>(h.len)) +
                          in.substr(pos + wire::kHeaderBytes, static_cast<size_t>(h.len));
    out.push_back({{wire::kReply, 1, payload.size()}, payload});
    pos += wire::kHeaderBytes + static_cast<size_t>(h.len);
  }
  return out;
}

void WaitForServicesToEnd() {
  // The service ends once its ranks are gone or at its arrival deadline; the per-input -timeout
  // reports one that never does.
  while (RendezvousServicesRunning() > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  // Mostly a valid 1-rank job (fast and fully predicted); the rest waits for the arrival deadline.
  // (A valid kMaxRanks job is left out: its per-rank tables make every run take half a second.)
  static const int32_t kNranks[16] = {
      1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 0, -1, wire::kMaxRanks + 1, INT32_MIN};
  const int32_t nranks = kNranks[data[0] % 16];
  // nranks - 1 wraps for INT32_MIN on purpose (computed unsigned: no UB in the harness).
  const int32_t last = static_cast<int32_t>(static_cast<uint32_t>(nranks) - 1u);
  const int32_t kRanks[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, -1, last, INT32_MAX};
  const int32_t rank = kRanks[data[1] % 16];
  // 0-12 right, 13 zero nonce (accepted), 14 wrong purpose, 15 another communicator's nonce.
  const int who = data[2] % 16;
  const std::string frames(reinterpret_cast<const char*>(data + 3), size - 3);

  const bool authentic = who <= 13;
  const bool in_range = nranks >= 1 && nranks <= wire::kMaxRanks && rank >= 0 && rank < nranks;
  const bool single = authentic && in_range && nranks == 1;

  RendezvousOptions o;
  o.listen_address = "127.0.0.1:0";
  // A 1-rank job never reaches its arrival deadline (our rank arrives); everything else waits
  // for it, so it is short there to keep the fuzzer fast (our handshake may lose that race).
  o.timeout_ms = single ? 10000 : 15;
  auto id = StartRendezvous(o);
  if (!id.ok()) std::abort();

  HandshakeHello hello;
  hello.purpose = who == 14 ? 2 : wire::kPurposeBootstrap;
  hello.rank = rank;
  hello.nranks = nranks;
  if (who != 13) std::memcpy(hello.comm_nonce, id->nonce.data(), 16);
  if (who == 15) hello.comm_nonce[3] ^= 0x40;

  Deadline deadline = Deadline::After(8000);
  auto fd = ConnectWithDeadline(id->root, deadline);
  Status hs = fd.status();
  if (fd.ok()) {
    const std::vector<uint8_t> secret(id->secret.begin(), id->secret.end());
    hs = HandshakeClient(fd->get(), secret, hello, deadline);
  }
  if (hs.ok() && !authentic) std::abort();  // a wrong purpose or communicator is refused
  // Elsewhere the 15 ms arrival deadline may end the service before we connect or complete the
  // handshake.
  if (!hs.ok() && single) std::abort();
  if (!hs.ok()) {
    fd = Fd();
    WaitForServicesToEnd();
    return 0;
  }

  // The fuzz input as our frames. A rank keeps its connection open while it waits for answers
  // (the service drops what it queued for a rank that hung up), so this one reads until the
  // predicted answers are in (1-rank job) or until the service hangs up: after an error frame, or
  // at its arrival deadline.
  if (!frames.empty()) (void)SendAll(fd->get(), frames.data(), frames.size(), deadline);
  std::vector<Frame> want;
  size_t want_bytes = SIZE_MAX;  // read to EOF
  if (single) {
    want = ExpectedSingleRank(
        frames, std::string(reinterpret_cast<const char*>(id->nonce.data()), id->nonce.size()));
    if (want.back().h.tag != wire::kError) {
      want_bytes = 0;
      for (const Frame& f : want) want_bytes += wire::kHeaderBytes + f.payload.size();
    }
  }
  std::string got;
  char buf[65536];
  bool eof = false;
  while (got.size() < want_bytes && !eof) {
    if (deadline.expired()) std::abort();  // the service neither answered nor hung up
    pollfd p{fd->get(), POLLIN, 0};
    if (poll(&p, 1, deadline.remainingMs()) <= 0) continue;
    ssize_t n = recv(fd->get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0)
      got.append(buf, static_cast<size_t>(n));
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
      eof = true;
  }
  // Whatever else is already there is an answer the model did not predict.
  for (ssize_t n; !eof && (n = recv(fd->get(), buf, sizeof(buf), MSG_DONTWAIT)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  *fd = Fd();

  std::vector<Frame> answers;
  if (!SplitFrames(got, &answers)) std::abort();
  for (size_t i = 0; i < answers.size(); ++i) {
    const uint32_t tag = answers[i].h.tag;
    if (tag != wire::kRegistered && tag != wire::kReply && tag != wire::kError) std::abort();
    if (tag == wire::kError && i + 1 != answers.size()) std::abort();
    if (tag == wire::kRegistered && (i != 0 || answers[i].payload.size() != 16)) std::abort();
  }
  if (!in_range && (answers.size() != 1 || answers[0].h.tag != wire::kError)) std::abort();
  if (single) {
    if (want.size() != answers.size()) std::abort();
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i].h.tag != answers[i].h.tag || want[i].h.arg != answers[i].h.arg) std::abort();
      // An error's text is for people; its class and position are what is checked.
      if (want[i].h.tag != wire::kError && want[i].payload != answers[i].payload) std::abort();
    }
  }
  WaitForServicesToEnd();
  return 0;
}
