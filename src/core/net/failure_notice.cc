#include "core/net/failure_notice.h"

#include <poll.h>

#include <cerrno>
#include <memory>

#include "core/base/log.h"
#include "core/net/socket.h"

namespace braid {
namespace {

// One conversation with one rank's control listener, driven without blocking so that all of
// them run at once: a stopped rank costs the deadline once, not once per rank.
struct Call {
  int rank = -1;
  Fd fd;
  std::unique_ptr<ClientHandshake> hs;
  enum class Stage { kHandshake, kAnswer, kDone } stage = Stage::kHandshake;
  bool answered = false;
  bool connected = false;  // the connect completed (the handshake runs)
  bool refused = false;    // nobody listens there any more: the rank left the communicator
  bool no_socket = false;  // this process could not open the socket (out of descriptors)
  // The answer: the ack byte, then `extra` bytes (an issued-calls count: 8; a wait state: 9; a
  // cause: 1 + record).
  size_t extra = 0;
  uint8_t answer[1 + 1 + FailureCause::kWireBytes] = {};
  size_t got = 0;
};

// Runs `calls` until each is done or `deadline`: the handshake, then `payload` (may be empty),
// then the one-byte answer.
void RunCalls(std::vector<Call>& calls, const uint8_t* payload, size_t payload_len,
              Deadline deadline) {
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  for (;;) {
    fds.clear();
    index.clear();
    for (size_t i = 0; i < calls.size(); ++i) {
      Call& c = calls[i];
      if (c.stage == Call::Stage::kDone) continue;
      short ev = c.stage == Call::Stage::kHandshake ? c.hs->pollEvents() : POLLIN;
      fds.push_back({c.fd.get(), ev, 0});
      index.push_back(i);
    }
    if (fds.empty() || deadline.expired()) return;
    int n = ::poll(fds.data(), fds.size(), deadline.remainingMs());
    if (n < 0 && errno != EINTR) return;
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Call& c = calls[index[k]];
      if (c.stage == Call::Stage::kHandshake) {
        if (!c.connected) {
          const int err = ConnectError(c.fd.get());
          if (err == ECONNREFUSED) {
            c.refused = true;
            c.stage = Call::Stage::kDone;
            continue;
          }
          c.connected = err == 0;
        }
        HandshakeState s = c.hs->drive(c.fd.get());
        if (s == HandshakeState::kFailed) c.stage = Call::Stage::kDone;
        if (s != HandshakeState::kDone) continue;
        // A fresh connection's send buffer takes the whole record at once.
        if (payload_len > 0 &&
            ::send(c.fd.get(), payload, payload_len, MSG_NOSIGNAL | MSG_DONTWAIT) !=
                static_cast<ssize_t>(payload_len)) {
          c.stage = Call::Stage::kDone;
          continue;
        }
        c.stage = Call::Stage::kAnswer;
        continue;
      }
      ssize_t r = ::recv(c.fd.get(), c.answer + c.got, 1 + c.extra - c.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r > 0) c.got += static_cast<size_t>(r);
      if (r > 0 && c.got < 1 + c.extra) continue;
      c.answered = c.got == 1 + c.extra && c.answer[0] == 1;
      c.stage = Call::Stage::kDone;
    }
  }
}

Call StartCall(const ControlPeers& peers, int rank, uint32_t purpose) {
  Call c;
  c.rank = rank;
  auto fd = StartConnect((*peers.addrs)[rank]);
  if (!fd.ok()) {
    // Refused at once (a listener on this host): nobody listens there any more.
    c.refused = fd.status().message().find("refused") != std::string::npos;
    c.no_socket = fd.status().cls() == ErrorClass::kSystem && !c.refused;
    c.stage = Call::Stage::kDone;
    return c;
  }
  c.fd = std::move(*fd);
  HandshakeHello hello;
  hello.purpose = purpose;
  hello.rank = peers.rank;
  hello.nranks = peers.nranks;
  c.hs = std::make_unique<ClientHandshake>(*peers.secret, hello);
  return c;
}

}  // namespace

void SendFailureNotices(const ControlPeers& peers, const FailureCause& cause,
                        const std::vector<bool>& skip, Deadline deadline) {
  uint8_t record[FailureCause::kWireBytes];
  cause.encode(record);
  std::vector<Call> calls;
  for (int r = 0; r < peers.nranks; ++r) {
    if (r == peers.rank || (static_cast<size_t>(r) < skip.size() && skip[r])) continue;
    calls.push_back(StartCall(peers, r, kFailureNoticePurpose));
  }
  RunCalls(calls, record, sizeof(record), deadline);
  // Calls that could not even open a socket (this process is out of descriptors: maybe the
  // failure being announced) go one at a time, on the descriptors the others freed.
  for (Call& c : calls) c.fd = Fd();
  for (Call& c : calls) {
    if (!c.no_socket || deadline.expired()) continue;
    std::vector<Call> one;
    one.push_back(StartCall(peers, c.rank, kFailureNoticePurpose));
    RunCalls(one, record, sizeof(record), deadline);
    c.answered = one[0].answered;
  }
  for (const Call& c : calls)
    if (!c.answered)
      BRAID_INFO("rank %d: rank %d did not take the failure notice in time", peers.rank, c.rank);
}

bool ProbeAlive(const ControlPeers& peers, int rank, Deadline deadline) {
  return Probe(peers, rank, deadline) == ProbeResult::kAnswered;
}

ProbeResult Probe(const ControlPeers& peers, int rank, Deadline deadline) {
  if (rank < 0 || rank >= peers.nranks || rank == peers.rank) return ProbeResult::kSilent;
  std::vector<Call> calls;
  calls.push_back(StartCall(peers, rank, kLivenessProbePurpose));
  RunCalls(calls, nullptr, 0, deadline);
  if (calls[0].answered) return ProbeResult::kAnswered;
  return calls[0].refused ? ProbeResult::kRefused : ProbeResult::kSilent;
}

std::vector<std::optional<uint64_t>> AskIssuedCalls(const ControlPeers& peers,
                                                    const std::vector<int>& ranks,
                                                    Deadline deadline) {
  std::vector<Call> calls;
  for (int r : ranks) {
    calls.push_back(r >= 0 && r < peers.nranks && r != peers.rank
                        ? StartCall(peers, r, kIssuedCallsPurpose)
                        : Call{});
    calls.back().extra = 8;
    if (r < 0 || r >= peers.nranks || r == peers.rank) calls.back().stage = Call::Stage::kDone;
  }
  RunCalls(calls, nullptr, 0, deadline);
  std::vector<std::optional<uint64_t>> out;
  for (const Call& c : calls) {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(c.answer[1 + b]) << (8 * b);
    out.push_back(c.answered && v != kIssuedCallsUnknown ? std::optional<uint64_t>(v)
                                                         : std::nullopt);
  }
  return out;
}

std::optional<WaitState> AskWaitState(const ControlPeers& peers, int rank, Deadline deadline) {
  if (rank < 0 || rank >= peers.nranks || rank == peers.rank) return std::nullopt;
  std::vector<Call> calls;
  calls.push_back(StartCall(peers, rank, kWaitStatePurpose));
  calls[0].extra = 9;
  RunCalls(calls, nullptr, 0, deadline);
  const Call& c = calls[0];
  if (!c.answered) return std::nullopt;
  WaitState w;
  for (int b = 0; b < 8; ++b) w.issued |= static_cast<uint64_t>(c.answer[1 + b]) << (8 * b);
  if (w.issued == kIssuedCallsUnknown || c.answer[9] > 1) return std::nullopt;
  w.p2p_blocked_on_asker = c.answer[9] == 1;
  return w;
}

CauseAnswer AskCause(const ControlPeers& peers, int rank, Deadline deadline) {
  CauseAnswer a;
  if (rank < 0 || rank >= peers.nranks || rank == peers.rank) return a;
  std::vector<Call> calls;
  calls.push_back(StartCall(peers, rank, kCausePurpose));
  calls[0].extra = 1 + FailureCause::kWireBytes;
  RunCalls(calls, nullptr, 0, deadline);
  const Call& c = calls[0];
  if (c.refused) a.result = ProbeResult::kRefused;
  if (!c.answered) return a;
  a.result = ProbeResult::kAnswered;
  if (c.answer[1] == 1) {
    auto cause = FailureCause::Decode(c.answer + 2, peers.nranks);
    if (cause && !cause->weak()) a.cause = cause;
  }
  return a;
}

bool ServeFailureControl(const HandshakeHello& hello, int fd, int nranks, CauseBoard* board,
                         const std::function<uint64_t()>& issued_calls,
                         const std::function<bool(int)>& p2p_blocked_on) {
  const uint8_t ack = 1;
  const Deadline deadline = Deadline::After(kFailureNoticeMs);
  if (hello.purpose == kCausePurpose) {
    uint8_t answer[1 + 1 + FailureCause::kWireBytes] = {ack};
    if (board && board->hasStrong()) {
      if (auto c = board->first(); c && !c->weak() && c->observer >= 0) {
        answer[1] = 1;
        c->encode(answer + 2);
      }
    }
    (void)SendAll(fd, answer, sizeof(answer), deadline);
    return true;
  }
  if (hello.purpose == kLivenessProbePurpose) {
    (void)SendAll(fd, &ack, 1, deadline);
    return true;
  }
  if (hello.purpose == kIssuedCallsPurpose) {
    const uint64_t v = issued_calls ? issued_calls() : kIssuedCallsUnknown;
    uint8_t answer[9] = {ack};
    for (int b = 0; b < 8; ++b) answer[1 + b] = static_cast<uint8_t>(v >> (8 * b));
    (void)SendAll(fd, answer, sizeof(answer), deadline);
    return true;
  }
  if (hello.purpose == kWaitStatePurpose) {
    const uint64_t v = issued_calls ? issued_calls() : kIssuedCallsUnknown;
    uint8_t answer[10] = {ack};
    for (int b = 0; b < 8; ++b) answer[1 + b] = static_cast<uint8_t>(v >> (8 * b));
    // (The asker's rank is the one its handshake names: the handshake proves it holds the
    // communicator's secret, the trust every control-plane message rests on.)
    answer[9] = p2p_blocked_on && hello.rank >= 0 && hello.rank < nranks &&
                p2p_blocked_on(static_cast<int>(hello.rank));
    (void)SendAll(fd, answer, sizeof(answer), deadline);
    return true;
  }
  if (hello.purpose != kFailureNoticePurpose) return false;
  // The sender writes the record right after its handshake: it is here, or nearly.
  uint8_t record[FailureCause::kWireBytes];
  if (!RecvAll(fd, record, sizeof(record), deadline).ok()) return true;
  auto cause = FailureCause::Decode(record, nranks);
  // A notice speaks for its sender only: the observer must be the authenticated rank.
  if (!cause || cause->observer != hello.rank || cause->weak()) {
    BRAID_WARN("control listener: dropped a malformed failure notice from rank %d", hello.rank);
    return true;
  }
  if (board) board->offer(*cause);
  (void)SendAll(fd, &ack, 1, deadline);
  return true;
}

}  // namespace braid
