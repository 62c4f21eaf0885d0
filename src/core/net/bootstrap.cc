// A rank's side of the rendezvous (see bootstrap.h and bootstrap_wire.h).
#include "core/net/bootstrap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/net/bootstrap_wire.h"
#include "core/net/handshake.h"
#include "core/base/log.h"
#include "core/net/socket.h"

namespace braid {
namespace {

namespace wire = bootstrap_wire;

// Handshakes that the root closes on us are retried a few times: an overloaded root may have
// dropped us as too slow. A wrong secret fails the same way every time.
constexpr int kMaxHandshakeRetries = 3;

std::string SecondsText(int64_t ms) {
  char buf[32];
  if (ms < 10000)
    snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000.0);
  else
    snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(ms / 1000));
  return buf;
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// A wait that ended because its deadline was aborted (braidCommAbort or braidCommDestroy of a
// pending init) reports kTimeout from the socket layer; it is an abort.
Status AbortedIf(const Deadline& deadline, Status st) {
  if (!st.ok() && st.cls() == ErrorClass::kTimeout && deadline.aborted())
    return AbortedError(st.message());
  return st;
}

// Sleeps until `until`, or until `deadline` expires or is aborted, whichever comes first.
void SleepUntil(Clock::time_point until, const Deadline& deadline) {
  while (!deadline.expired()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min<int64_t>(left, deadline.remainingMs())));
  }
}

ErrorClass ClassFromWire(uint32_t v) {
  switch (v) {
    case static_cast<uint32_t>(ErrorClass::kSystem):
    case static_cast<uint32_t>(ErrorClass::kInternal):
    case static_cast<uint32_t>(ErrorClass::kInvalidArgument):
    case static_cast<uint32_t>(ErrorClass::kInvalidUsage):
    case static_cast<uint32_t>(ErrorClass::kRemote):
    case static_cast<uint32_t>(ErrorClass::kTimeout):
    case static_cast<uint32_t>(ErrorClass::kAborted):
      return static_cast<ErrorClass>(v);
    default:
      return ErrorClass::kRemote;
  }
}

class BootstrapImpl final : public Bootstrap {
 public:
  BootstrapImpl(Fd fd, int rank, int nranks, std::string root, const std::array<uint8_t, 16>& nonce)
      : fd_(std::move(fd)), rank_(rank), nranks_(nranks), root_(std::move(root)), nonce_(nonce) {}

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const std::array<uint8_t, 16>& commNonce() const override { return nonce_; }
  void setNonce(const std::array<uint8_t, 16>& n) { nonce_ = n; }

  Result<std::vector<std::string>> allGather(std::string_view mine, Deadline deadline) override {
    if (!broken_.ok()) return broken_;
    if (mine.size() > kMaxBootstrapMessage)
      return InvalidArgument("bootstrap allGather: message of " + std::to_string(mine.size()) +
                             " bytes exceeds the limit of " + std::to_string(kMaxBootstrapMessage));
    auto start = Clock::now();
    uint32_t wait_ms = wire::kWaitForever;
    if (deadline.at() != Clock::time_point::max())
      wait_ms = static_cast<uint32_t>(deadline.msLeft(static_cast<int>(1u << 30)));
    std::string frame = wire::MakeFrame(wire::kGather, wait_ms, std::string(mine));
    Status st = SendAll(fd_.get(), frame.data(), frame.size(), deadline);
    if (!st.ok()) return Broken(AbortedIf(deadline, st), start);
    auto reply = ReadFrame(deadline);
    if (!reply.ok()) return Broken(AbortedIf(deadline, reply.status()), start);
    const wire::Header& h = reply->first;
    const std::string& payload = reply->second;
    if (h.tag != wire::kReply || h.arg != static_cast<uint32_t>(nranks_))
      return Broken(
          RemoteError("unexpected message from the root (tag " + std::to_string(h.tag) + ")"),
          start);
    std::vector<std::string> out;
    out.reserve(nranks_);
    size_t pos = 0;
    for (int r = 0; r < nranks_; ++r) {
      if (payload.size() - pos < 4)
        return Broken(RemoteError("truncated reply from the root"), start);
      uint32_t n = 0;
      for (int i = 0; i < 4; ++i)
        n |= static_cast<uint32_t>(static_cast<uint8_t>(payload[pos + i])) << (8 * i);
      pos += 4;
      if (n > kMaxBootstrapMessage || payload.size() - pos < n)
        return Broken(RemoteError("malformed reply from the root"), start);
      out.emplace_back(payload.data() + pos, n);
      pos += n;
    }
    if (pos != payload.size()) return Broken(RemoteError("malformed reply from the root"), start);
    ++round_;
    return out;
  }

  // Reads one service frame; turns an error frame into its Status. Lengths are bounded by the
  // frame type before anything is allocated.
  Result<std::pair<wire::Header, std::string>> ReadFrame(Deadline deadline) {
    uint8_t hb[wire::kHeaderBytes];
    BRAID_RETURN_IF_ERROR(RecvAll(fd_.get(), hb, sizeof(hb), deadline));
    wire::Header h = wire::DecodeHeader(hb);
    uint64_t max = 0;
    switch (h.tag) {
      case wire::kRegistered:
        max = 16;
        break;
      case wire::kReply:
        max = wire::MaxReplyBytes(nranks_);
        break;
      case wire::kError:
        max = wire::kMaxErrorBytes;
        break;
      default:
        return RemoteError("unknown message from the root (tag " + std::to_string(h.tag) +
                           "): ranks and root run different braid versions?");
    }
    if (h.len > max)
      return RemoteError("oversized message from the root (" + std::to_string(h.len) + " bytes)");
    // Grown as bytes arrive, not reserved from the declared length: a length near the bound
    // (nranks x 1 MiB) must not commit gigabytes before the root has sent anything (found by
    // fuzz_bootstrap_client).
    std::string payload;
    constexpr size_t kPiece = size_t{1} << 20;
    while (payload.size() < h.len) {
      const size_t old_size = payload.size();
      const size_t n = std::min<size_t>(kPiece, static_cast<size_t>(h.len) - old_size);
      payload.resize(old_size + n);
      BRAID_RETURN_IF_ERROR(RecvAll(fd_.get(), payload.data() + old_size, n, deadline));
    }
    if (h.tag == wire::kError) {
      // Marked so Broken() passes the service's own words through unchanged. An empty report
      // still says where it came from.
      if (payload.empty()) payload = "the rendezvous root reported an error without a message";
      return Status::Error(ClassFromWire(h.arg), "\x01" + payload);
    }
    return std::make_pair(h, std::move(payload));
  }

  // Words an I/O failure for the user, and makes it sticky (the stream is out of sync now).
  Status Broken(const Status& st, Clock::time_point start) {
    std::string who = "bootstrap: rank " + std::to_string(rank_) + ": ";
    if (!st.message().empty() && st.message()[0] == '\x01') {
      // The root's message already names the problem ("bootstrap: nranks mismatch ...").
      broken_ = Status::Error(st.cls(), st.message().substr(1));
    } else if (st.cls() == ErrorClass::kAborted) {
      // Not the root's fault: this rank stopped waiting for it (and so for the other ranks).
      broken_ = AbortedError(who + "allGather round " + std::to_string(round_) + " aborted after " +
                             SecondsText(MsSince(start)) + " of waiting for the root at " + root_ +
                             " (and so for the other ranks)");
    } else if (st.cls() == ErrorClass::kTimeout) {
      broken_ =
          TimeoutError(who + "allGather round " + std::to_string(round_) + " timed out after " +
                       SecondsText(MsSince(start)) + " without an answer from the root at " +
                       root_ + " (is the process that called braidGetUniqueId still running?)");
    } else if (st.cls() == ErrorClass::kRemote) {
      broken_ =
          RemoteError(who + "the root at " + root_ + " closed the connection (" + st.message() +
                      "): the process that called braidGetUniqueId probably exited or "
                      "crashed");
    } else {
      broken_ = Status(st).prepend(who);
    }
    return broken_;
  }

 private:
  Fd fd_;
  int rank_, nranks_;
  std::string root_;
  std::array<uint8_t, 16> nonce_;
  uint64_t round_ = 0;
  Status broken_;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> Bootstrap::Connect(const UniqueIdData& id, int rank, int nranks,
                                                      Deadline deadline) {
  if (nranks < 1 || nranks > wire::kMaxRanks)
    return InvalidArgument("bootstrap: nranks " + std::to_string(nranks) + " is out of range 1.." +
                           std::to_string(wire::kMaxRanks));
  if (rank < 0 || rank >= nranks)
    return InvalidArgument("bootstrap: rank " + std::to_string(rank) + " is out of range 0.." +
                           std::to_string(nranks - 1));
  const std::string root = FormatAddress(id.root);
  const std::string who = "bootstrap: rank " + std::to_string(rank) + ": ";
  const std::vector<uint8_t> secret(id.secret.begin(), id.secret.end());
  HandshakeHello hello;
  hello.purpose = wire::kPurposeBootstrap;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.channel = 0;
  std::memcpy(hello.comm_nonce, id.nonce.data(), 16);

  auto start = Clock::now();
  int backoff_ms = 10;
  int handshake_failures = 0;
  Status last = RemoteError("no attempt");
  while (!deadline.expired()) {
    // One attempt is bounded too, so a root that comes up late is found soon after.
    Deadline attempt = deadline.within(2000);
    auto fd = ConnectWithDeadline(id.root, attempt);
    if (fd.ok()) {
      Status hs = AbortedIf(deadline, HandshakeClient(fd->get(), secret, hello, deadline));
      if (hs.ok()) {
        auto impl = std::make_unique<BootstrapImpl>(std::move(*fd), rank, nranks, root, id.nonce);
        auto reg = impl->ReadFrame(deadline);
        if (!reg.ok()) return impl->Broken(AbortedIf(deadline, reg.status()), start);
        if (reg->first.tag != wire::kRegistered || reg->second.size() != 16 ||
            reg->first.arg != static_cast<uint32_t>(nranks))
          return RemoteError(who + "unexpected answer from the root at " + root);
        std::array<uint8_t, 16> nonce;
        std::memcpy(nonce.data(), reg->second.data(), 16);
        BRAID_TRACE("bootstrap: rank %d registered with the root at %s", rank, root.c_str());
        impl->setNonce(nonce);
        return std::unique_ptr<Bootstrap>(std::move(impl));
      }
      if (hs.cls() != ErrorClass::kRemote || ++handshake_failures > kMaxHandshakeRetries) {
        if (hs.cls() == ErrorClass::kAborted)
          return AbortedError(who + "aborted while authenticating with the root at " + root);
        if (hs.cls() == ErrorClass::kTimeout)
          return TimeoutError(who + "the root at " + root + " did not complete authentication " +
                              "within the deadline");
        // A refusal for lack of file descriptors (or a local failure) is no credential matter.
        if (hs.cls() == ErrorClass::kSystem)
          return Status(hs).prepend(who + "the root at " + root + ": ");
        return Status(hs).prepend(who + "authentication with the root at " + root + " failed: ");
      }
      last = hs;
    } else {
      last = fd.status();
      if (last.cls() == ErrorClass::kSystem) return Status(last).prepend(who);
    }
    SleepUntil(Clock::now() + std::chrono::milliseconds(backoff_ms), deadline);
    backoff_ms = std::min(backoff_ms * 2, 500);
  }
  if (deadline.aborted())
    return AbortedError(who + "aborted after " + SecondsText(MsSince(start)) +
                        " of trying to reach the root at " + root +
                        " (last error: " + last.message() + ")");
  return TimeoutError(who + "root " + root + " unreachable for " + SecondsText(MsSince(start)) +
                      " (last error: " + last.message() +
                      "): is the process that called braidGetUniqueId running, and is that "
                      "address reachable from this host? (BRAID_SOCKET_IFNAME selects the "
                      "root's interface)");
}

}  // namespace braid
