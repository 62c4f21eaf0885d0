#include "core/base/failure_cause.h"

#include <cctype>
#include <cstring>

namespace braid {
namespace {

constexpr uint32_t kMagic = 0x43465242;  // "BRFC"
constexpr uint16_t kVersion = 1;

// Offsets of the wire form (FailureCause::kWireBytes in all).
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffReason = 6, kOffHasOp = 7, kOffRank = 8,
                 kOffPid = 12, kOffObserver = 16, kOffSeconds = 20, kOffSeq = 24, kOffColl = 32,
                 kOffHost = kOffColl + FailureCause::kCollBytes,
                 kOffDetail = kOffHost + FailureCause::kHostBytes,
                 kOffEnd = kOffDetail + FailureCause::kDetailBytes;
static_assert(kOffEnd <= FailureCause::kWireBytes);

template <typename T>
void Put(uint8_t* out, size_t off, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out[off + i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

template <typename T>
T Get(const uint8_t* in, size_t off) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{in[off + i]} << (8 * i);
  return static_cast<T>(v);
}

// Printable ASCII only, so a hostile peer cannot put terminal escapes or newlines in a message.
std::string Printable(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() + 1 >= max) break;
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

void PutText(uint8_t* out, size_t off, size_t max, const std::string& s) {
  const std::string t = Printable(s, max);
  std::memcpy(out + off, t.data(), t.size());  // the rest stays zero: terminated
}

std::optional<std::string> GetText(const uint8_t* in, size_t off, size_t max) {
  std::string s;
  size_t i = 0;
  for (; i < max && in[off + i] != 0; ++i) {
    const uint8_t c = in[off + i];
    if (c < 0x20 || c >= 0x7f) return std::nullopt;
    s += static_cast<char>(c);
  }
  if (i == max) return std::nullopt;  // not terminated
  for (; i < max; ++i)
    if (in[off + i] != 0) return std::nullopt;
  return s;
}

}  // namespace

std::string FailureCause::FitDetail(const std::string& text) {
  if (text.size() < kDetailBytes) return text;
  const size_t room = kDetailBytes - 7;  // (two "...")
  const auto around = [&](size_t i, size_t before) {
    const size_t from = i > before ? i - before : 0;
    std::string out = from > 0 ? "..." : "";
    out += text.substr(from, room);
    if (from + room < text.size()) out += "...";
    return out;
  };
  // An errno name ("(EMFILE") is what says why: keep the text around it.
  for (size_t i = 0; i + 3 < text.size(); ++i) {
    if (text[i] != '(' || text[i + 1] != 'E' ||
        !std::isupper(static_cast<unsigned char>(text[i + 2])) ||
        !std::isupper(static_cast<unsigned char>(text[i + 3])))
      continue;
    return around(i, 48);
  }
  // Running out of memory says so at the start of its reason (the engine's OutOfMemory), the
  // advice after it: keep the reason.
  if (const size_t i = text.find("out of memory"); i != std::string::npos) return around(i, 8);
  // Else the end, where an error usually says its reason.
  return "..." + text.substr(text.size() - (kDetailBytes - 4));
}

std::string FailureCause::describe() const {
  std::string who = "rank " + std::to_string(rank) + " (host " + (host.empty() ? "?" : host) +
                    ", pid " + std::to_string(pid) + ")";
  std::string what;
  switch (reason) {
    case Reason::kDied:
      what = "died";
      break;
    case Reason::kStalled:
      what = "stopped responding for " + std::to_string(seconds) + " s";
      break;
    case Reason::kNoProgress:
      what = "made no progress for " + std::to_string(seconds) +
             " s (it is alive: hung, or not calling this operation)";
      break;
    case Reason::kUnreachable:
      what = "became unreachable (host down or link cut?)";
      break;
    case Reason::kCorrupt:
      what = "sent corrupt data";
      break;
    case Reason::kOwnFailure:
      what = "failed";
      break;
    case Reason::kRevoked:
      what = "revoked the communicator";
      break;
    case Reason::kShutDown:
      what = "shut its streams down after a failure it did not name";
      break;
    case Reason::kAborted:
      what = "aborted the communicator (braidCommAbort)";
      break;
    case Reason::kDestroyed:
      what = "destroyed the communicator (braidCommDestroy)";
      break;
    case Reason::kLeft:
      what =
          "left the communicator (its control listener is closed: it destroyed the "
          "communicator, or its process exited)";
      break;
    case Reason::kExited:
      what = "exited without destroying the communicator";
      break;
    case Reason::kNotCalling:
      what = "has not called this operation (it is alive";
      what += detail.empty() ? ")" : "; " + detail + ")";
      break;
    case Reason::kP2pDeadlock:
      what = "is blocked in a point-to-point call waiting on rank " + std::to_string(observer) +
             ", which waits for it";
      break;
  }
  std::string op;
  if (has_op)
    op = seq == kNoSeq ? " during send/recv"
                       : (reason == Reason::kP2pDeadlock ? " in " : " during ") + coll + " #" +
                             std::to_string(seq);
  if (reason == Reason::kP2pDeadlock && has_op && seq != kNoSeq)
    op +=
        ", a collective it has not issued: a deadlock (a send must meet its receive between "
        "the same collectives on every rank)";
  std::string s = who + " " + what + op;
  if (reason == Reason::kOwnFailure && !detail.empty()) s += ": " + detail;
  return s;
}

ErrorClass FailureCause::errorClass() const {
  if (reason == Reason::kP2pDeadlock) return ErrorClass::kInvalidUsage;
  return reason == Reason::kStalled || reason == Reason::kNoProgress ||
                 reason == Reason::kNotCalling
             ? ErrorClass::kTimeout
             : ErrorClass::kRemote;
}

void FailureCause::encode(uint8_t out[kWireBytes]) const {
  std::memset(out, 0, kWireBytes);
  Put<uint32_t>(out, kOffMagic, kMagic);
  Put<uint16_t>(out, kOffVersion, kVersion);
  Put<uint8_t>(out, kOffReason, static_cast<uint8_t>(reason));
  Put<uint8_t>(out, kOffHasOp, has_op ? 1 : 0);
  Put<uint32_t>(out, kOffRank, static_cast<uint32_t>(rank));
  Put<uint32_t>(out, kOffPid, static_cast<uint32_t>(pid));
  Put<uint32_t>(out, kOffObserver, static_cast<uint32_t>(observer));
  PutText(out, kOffColl, kCollBytes, coll);
  Put<uint32_t>(out, kOffSeconds, seconds);
  Put<uint64_t>(out, kOffSeq, seq);
  PutText(out, kOffHost, kHostBytes, host);
  PutText(out, kOffDetail, kDetailBytes, detail);
}

std::optional<FailureCause> FailureCause::Decode(const uint8_t in[kWireBytes], int nranks) {
  if (Get<uint32_t>(in, kOffMagic) != kMagic || Get<uint16_t>(in, kOffVersion) != kVersion)
    return std::nullopt;
  FailureCause c;
  const uint8_t reason = Get<uint8_t>(in, kOffReason);
  if (reason < static_cast<uint8_t>(Reason::kDied) ||
      reason > static_cast<uint8_t>(Reason::kP2pDeadlock))
    return std::nullopt;
  c.reason = static_cast<Reason>(reason);
  const uint8_t has_op = Get<uint8_t>(in, kOffHasOp);
  if (has_op > 1) return std::nullopt;
  c.has_op = has_op == 1;
  c.rank = static_cast<int32_t>(Get<uint32_t>(in, kOffRank));
  c.pid = static_cast<int32_t>(Get<uint32_t>(in, kOffPid));
  c.observer = static_cast<int32_t>(Get<uint32_t>(in, kOffObserver));
  if (c.rank < 0 || c.rank >= nranks || c.observer < 0 || c.observer >= nranks || c.pid < 0)
    return std::nullopt;
  c.seconds = Get<uint32_t>(in, kOffSeconds);
  c.seq = Get<uint64_t>(in, kOffSeq);
  auto host = GetText(in, kOffHost, kHostBytes);
  auto detail = GetText(in, kOffDetail, kDetailBytes);
  auto coll = GetText(in, kOffColl, kCollBytes);
  if (!host || !detail || !coll) return std::nullopt;
  c.coll = *coll;
  for (size_t i = kOffEnd; i < kWireBytes; ++i)
    if (in[i] != 0) return std::nullopt;
  c.host = *host;
  c.detail = *detail;
  return c;
}

void CauseBoard::offer(const FailureCause& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c.weak()) {
    if (!weak_) weak_ = c;
  } else if (!strong_) {
    strong_ = c;
    strong_cv_.notify_all();
  }
}

bool CauseBoard::waitStrong(Deadline deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  return strong_cv_.wait_until(lock, deadline.at(), [&] { return strong_.has_value(); });
}

std::optional<FailureCause> CauseBoard::first() const {
  std::lock_guard<std::mutex> lock(mu_);
  return strong_ ? strong_ : weak_;
}

bool CauseBoard::hasStrong() const {
  std::lock_guard<std::mutex> lock(mu_);
  return strong_.has_value();
}

void CauseBoard::complete(int observer, bool has_op, const std::string& coll, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* c : {&strong_, &weak_}) {
    if (!*c) continue;
    if ((*c)->observer < 0) (*c)->observer = observer;
    if ((*c)->has_op || !has_op) continue;
    (*c)->has_op = true;
    (*c)->coll = coll;
    (*c)->seq = seq;
  }
}

bool CauseBoard::claimBroadcast() {
  std::lock_guard<std::mutex> lock(mu_);
  if (broadcast_claimed_) return false;
  broadcast_claimed_ = true;
  return true;
}

}  // namespace braid
