#include "core/runtime/group.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/board_schedules.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/simulator.h"
#include "core/runtime/active_op.h"
#include "core/base/log.h"

namespace braid {
namespace {

struct PendingInit {
  CommRef comm;
  UniqueIdData id;
  int rank, nranks;
  CommOptions opts;
};

// A blocking call is recorded as its description alone: a group that runs on the board never
// needs an Operation for it (one allocation, a mutex and a condition variable per call, which
// cost more than the call itself there: -m 8 in docs/performance.md). The Operation is made when
// the group goes to the engine (operation()).
struct PendingCollective {
  CommRef comm;
  OpDesc desc;                    // blocking calls only (a request's call lives in its op)
  std::shared_ptr<Operation> op;  // the request's; for a blocking call, made on first use
  bool blocking;

  const OpDesc& call() const { return op ? op->desc() : desc; }
  const std::shared_ptr<Operation>& operation() {
    if (!op) op = std::make_shared<Operation>(std::move(desc));
    return op;
  }
};

struct PendingP2P {
  CommRef comm;
  std::vector<P2PCall> calls;
  std::vector<braidRequest*> requests;  // filled with the fused operation
};

struct GroupState {
  int depth = 0;
  std::vector<PendingInit> inits;
  std::vector<PendingCollective> collectives;
  std::vector<PendingP2P> p2p;  // one entry per communicator, in first-use order
};

thread_local GroupState t_group;
// The group braidGroupEnd is running: swapped with t_group when the outermost level closes and
// cleared when done, so that both keep their vectors' capacity from group to group (a group of
// eight small calls would otherwise allocate four times as its vector grows).
thread_local GroupState t_closing;

// Each send to self must meet a receive from self of the same size, in order.
Status CheckSelfPairs(const std::vector<P2PCall>& calls, int rank) {
  std::vector<uint64_t> sends, recvs;
  for (const auto& c : calls)
    if (c.peer == rank) (c.is_send ? sends : recvs).push_back(c.count * DataTypeSize(c.dtype));
  if (sends.size() != recvs.size())
    return InvalidUsage(
        std::to_string(sends.size()) + " send(s) to self but " + std::to_string(recvs.size()) +
        " receive(s) from self in one group: each send to self needs a matching receive in the "
        "same group");
  for (size_t i = 0; i < sends.size(); ++i)
    if (sends[i] != recvs[i])
      return InvalidUsage("send to self of " + std::to_string(sends[i]) +
                          " bytes matched with a receive of " + std::to_string(recvs[i]) +
                          " bytes");
  return Status::Ok();
}

// Predicted seconds of collective `d` on `comm`: the simulator's time for the algorithm the
// engine would run, on the tuner's link model, after the call agreement the engine runs first:
// on a communicator with a board, one post on it (the board's own schedules carry theirs);
// otherwise, when BRAID_VERIFY_CALLS is on, a dissemination barrier (which is all a barrier then
// runs), unless the call carries its agreement in its data.
Result<double> CollectiveSeconds(const braidComm& comm, const OpDesc& d) {
  const LinkModel& model = comm.tuner().model();
  const CollArgs a = CollArgsFor(comm, d);
  const Algorithm* algo = AlgorithmFor(comm, d, a);
  if (!algo && d.kind != CollKind::kBarrier)
    return InternalError("no algorithm can serve " + DescribeCall(d));
  double seconds = 0;
  if (comm.board() && algo && algo != &BoardAlgorithm()) {
    // The board's agreement: one post seen by every peer (BoardAgreementSchedule).
    CollArgs b = a;
    b.kind = CollKind::kBarrier;
    b.dtype = DataType::kUint8;
    b.count = 0;
    BRAID_ASSIGN_OR_RETURN(seconds, SimulateSeconds(BoardAlgorithm(), b, model));
    double data = 0;
    BRAID_ASSIGN_OR_RETURN(data, SimulateSeconds(*algo, a, model));
    return seconds + data;
  }
  const bool agreement = !comm.board() && comm.config().verify_calls && comm.nranks() > 1 &&
                         !CarriesAgreement(comm, d, algo, a);
  if (agreement) {
    CollArgs b;
    b.kind = CollKind::kBarrier;
    b.dtype = DataType::kUint8;
    b.nranks = comm.nranks();
    b.layout = &comm.layout();
    BRAID_ASSIGN_OR_RETURN(seconds, SimulateSeconds(DisseminationAlgorithm(), b, model));
    if (d.kind == CollKind::kBarrier) return seconds;
  }
  if (!algo) return InternalError("no algorithm can serve " + DescribeCall(d));
  double data = 0;
  BRAID_ASSIGN_OR_RETURN(data, SimulateSeconds(*algo, a, model));
  return seconds + data;
}

// Predicted seconds of one rank's fused point-to-point calls: alpha + bytes / beta per message
// on the link class to its peer. The engine posts them all at once, so messages on different
// ports (send or receive, per link class) overlap and those on one port serialise, as in the
// simulator; sends and receives to self are local copies and cost nothing.
double P2PSeconds(const braidComm& comm, const std::vector<P2PCall>& calls) {
  const LinkModel& model = comm.tuner().model();
  double port[kNumLinkClasses][2] = {};
  for (const P2PCall& c : calls) {
    if (c.peer == comm.rank()) continue;
    const LinkClass cls = LinkClassBetween(&comm.layout(), comm.rank(), c.peer);
    const LinkParams& link = model.of(cls);
    port[static_cast<int>(cls)][c.is_send ? 0 : 1] +=
        link.alpha_s + static_cast<double>(c.count * DataTypeSize(c.dtype)) / link.beta_bytes_s;
  }
  double busiest = 0;
  for (const auto& p : port) busiest = std::max({busiest, p[0], p[1]});
  return busiest;
}

// Closes one level of the calling thread's group. Returns the recorded calls when it was the
// outermost level (t_closing, until the ClosedGroup guard clears it), else null.
GroupState* CloseLevel() {
  if (--t_group.depth > 0) return nullptr;
  std::swap(t_group, t_closing);  // t_closing was cleared: t_group starts empty
  return &t_closing;
}

// Clears the closed group when braidGroupEnd returns (its references and operations go; the
// capacity stays).
struct ClosedGroup {
  GroupState& g;
  ~ClosedGroup() {
    g.depth = 0;
    g.inits.clear();
    g.collectives.clear();
    g.p2p.clear();
  }
};

// Runs the group's communicator inits, concurrently: one thread may be initialising several
// ranks of one communicator, and each needs the others to make progress.
template <typename Note>
void RunInits(std::vector<PendingInit>& inits, Note&& note) {
  if (inits.empty()) return;
  std::vector<Status> results(inits.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < inits.size(); ++i)
    threads.emplace_back([&, i] {
      auto& in = inits[i];
      results[i] = in.comm->init(in.id, in.rank, in.nranks, in.opts);
      if (results[i].ok()) {
        in.comm->setState(braidComm::State::kReady);
      } else {
        in.comm->setAsyncError(results[i]);
        in.comm->setState(braidComm::State::kFailed);
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < inits.size(); ++i) note(inits[i].comm.get(), results[i]);
}

}  // namespace

bool InGroup() {
  return t_group.depth > 0;
}

void GroupAddCollective(const CommRef& comm, std::shared_ptr<Operation> op, bool blocking) {
  t_group.collectives.push_back({comm, OpDesc{}, std::move(op), blocking});
}

void GroupAddBlockingCollective(CommRef comm, OpDesc desc) {
  t_group.collectives.push_back({std::move(comm), std::move(desc), nullptr, true});
}

void GroupAddP2P(const CommRef& comm, const P2PCall& call, braidRequest* request) {
  for (auto& p : t_group.p2p) {
    if (p.comm == comm) {
      p.calls.push_back(call);
      if (request) p.requests.push_back(request);
      return;
    }
  }
  PendingP2P p{comm, {call}, {}};
  if (request) p.requests.push_back(request);
  t_group.p2p.push_back(std::move(p));
}

void GroupAddInit(const CommRef& comm, const UniqueIdData& id, int rank, int nranks,
                  const CommOptions& opts) {
  t_group.inits.push_back({comm, id, rank, nranks, opts});
}

}  // namespace braid

using namespace braid;

// braidGroupEnd on the board (Engine::runBoardCalls): a group of blocking collectives of one
// communicator, without point-to-point calls, each of which runs on the board, runs them on this
// thread in call order, calls of one post posted together (one wait for the peers, not one per
// call). Ranks that group their small calls differently, or not at all, still meet. True when it
// ran the group.
template <typename Note>
bool RunOnBoardIfSmall(GroupState& g, Note& note) {
  if (g.collectives.empty() || !g.p2p.empty()) return false;
  const CommRef& comm = g.collectives[0].comm;
  if (comm->state() != braidComm::State::kReady) return false;
  for (const auto& c : g.collectives)
    if (c.comm != comm || !c.blocking) return false;
  // Reused from group to group, like the group's own vectors.
  thread_local std::vector<const OpDesc*> calls;
  thread_local std::vector<Status> results;
  calls.clear();
  for (const auto& c : g.collectives) calls.push_back(&c.call());
  // A mismatch fails its call alone; the others run.
  results.assign(calls.size(), Status());
  if (!comm->runBoardCalls(calls, results.data())) return false;
  for (size_t i = 0; i < calls.size(); ++i) {
    // An operation exists only if something made one (nothing does for a blocking call now).
    if (g.collectives[i].op) g.collectives[i].op->complete(results[i]);
    note(comm.get(), results[i]);
  }
  return true;
}

// braidGroupEnd's fast path: true when it ran the group (every operation is then complete).
template <typename Note>
bool RunInlineIfAlone(GroupState& g, Note& note) {
  if (g.collectives.empty() && g.p2p.empty()) return false;
  const CommRef& comm = g.collectives.empty() ? g.p2p[0].comm : g.collectives[0].comm;
  if (comm->state() != braidComm::State::kReady || g.p2p.size() > 1) return false;
  for (const auto& c : g.collectives)
    if (c.comm != comm || !c.blocking) return false;
  if (!g.p2p.empty()) {
    const auto& p = g.p2p[0];
    if (p.comm != comm || !p.requests.empty() || !CheckSelfPairs(p.calls, comm->rank()).ok())
      return false;
  }
  std::vector<std::shared_ptr<Operation>> ops;
  for (auto& c : g.collectives) ops.push_back(c.operation());
  if (!g.p2p.empty()) {
    OpDesc d;
    d.kind = CollKind::kSendRecv;
    d.dtype = DataType::kUint8;
    d.p2p = g.p2p[0].calls;
    ops.push_back(std::make_shared<Operation>(std::move(d)));
  }
  if (!comm->runInline(ops)) return false;
  for (const auto& op : ops) note(comm.get(), op->status());
  return true;
}

extern "C" braidResult_t braidGroupStart(void) {
  ++t_group.depth;
  return braidSuccess;
}

extern "C" braidResult_t braidGroupEnd(void) {
  if (t_group.depth == 0)
    return Fail(InvalidUsage("braidGroupEnd without a matching braidGroupStart"));
  GroupState* closed = CloseLevel();
  if (!closed) return braidSuccess;
  GroupState& g = *closed;
  ClosedGroup clear_on_return{g};

  Status first;
  auto note = [&](braidComm* comm, const Status& st) {
    if (!st.ok() && first.ok()) {
      first = st;
      Fail(comm, st);
    }
  };
  RunInits(g.inits, note);

  // One communicator, every call blocking, nothing else running: the caller drives the whole
  // group itself, all operations in flight at once (no hand-off to the progress thread and back,
  // which costs more than a small collective on a busy machine).
  if (RunOnBoardIfSmall(g, note) || RunInlineIfAlone(g, note))
    return first.ok() ? braidSuccess : first.code();

  // Collectives in call order, then each communicator's sends and receives as one operation.
  std::vector<std::pair<CommRef, std::shared_ptr<Operation>>> to_wait;
  for (auto& c : g.collectives) {
    const std::shared_ptr<Operation>& op = c.operation();
    if (c.comm->state() != braidComm::State::kReady) {
      op->complete(InvalidUsage(c.comm->where() + ": communicator not ready"));
      continue;
    }
    c.comm->submit(op);
    if (c.blocking) to_wait.emplace_back(c.comm, op);
  }
  for (auto& p : g.p2p) {
    // Usage errors of the group itself fail here, before anything runs, and leave the
    // communicator healthy.
    Status usage = CheckSelfPairs(p.calls, p.comm->rank());
    if (!usage.ok()) {
      usage.prepend(p.comm->where() + ": ");
      for (auto* r : p.requests) {
        r->op = std::make_shared<Operation>(OpDesc{});
        r->op->complete(usage);
      }
      note(p.comm.get(), usage);
      continue;
    }
    OpDesc d;
    d.kind = CollKind::kSendRecv;
    d.dtype = DataType::kUint8;
    d.p2p = std::move(p.calls);
    auto op = std::make_shared<Operation>(std::move(d));
    for (auto* r : p.requests) {
      r->op = op;
      r->comm = p.comm;
    }
    if (p.comm->state() != braidComm::State::kReady) {
      op->complete(InvalidUsage(p.comm->where() + ": communicator not ready"));
    } else {
      p.comm->submit(op);
    }
    to_wait.emplace_back(p.comm, op);
  }
  for (auto& [comm, op] : to_wait) {
    comm->waitFor(*op, Deadline::Never(), /*held=*/true);  // drives its loop meanwhile
    note(comm.get(), op->status());
  }
  return first.ok() ? braidSuccess : first.code();
}

extern "C" braidResult_t braidGroupSimulateEnd(double* seconds) {
  if (!seconds) return Fail(InvalidArgument("braidGroupSimulateEnd: seconds is NULL"));
  if (t_group.depth == 0)
    return Fail(InvalidUsage("braidGroupSimulateEnd without a matching braidGroupStart"));
  *seconds = 0;
  GroupState* closed = CloseLevel();
  if (!closed) return braidSuccess;
  GroupState& g = *closed;
  ClosedGroup clear_on_return{g};

  Status first;
  auto note = [&](braidComm* comm, const Status& st) {
    if (!st.ok() && first.ok()) {
      first = st;
      Fail(comm, st);
    }
  };
  // Inits are not simulated: the communicators they create must exist afterwards (and the
  // group's collectives are estimated on them).
  RunInits(g.inits, note);

  // Nothing else runs: each recorded operation is estimated, then completed unrun, so that a
  // request the caller holds reports it instead of waiting forever.
  auto discard = [](const CommRef& comm) {
    return InvalidUsage(comm->where() +
                        ": not run: its group ended with braidGroupSimulateEnd, which only "
                        "estimates the group's time");
  };
  double total = 0;
  for (auto& c : g.collectives) {
    if (c.comm->state() != braidComm::State::kReady) {
      Status st = InvalidUsage(c.comm->where() + ": communicator not ready");
      if (c.op) c.op->complete(st);
      note(c.comm.get(), st);
      continue;
    }
    auto t = CollectiveSeconds(*c.comm, c.call());
    if (c.op) c.op->complete(discard(c.comm));
    if (!t.ok()) {
      Status st = t.status();
      note(c.comm.get(), st.prepend(c.comm->where() + ": braidGroupSimulateEnd: "));
      continue;
    }
    total += *t;
  }
  for (auto& p : g.p2p) {
    Status st = CheckSelfPairs(p.calls, p.comm->rank());
    if (st.ok() && p.comm->state() != braidComm::State::kReady)
      st = InvalidUsage(p.comm->where() + ": communicator not ready");
    else if (st.ok())
      total += P2PSeconds(*p.comm, p.calls);
    else
      st.prepend(p.comm->where() + ": ");
    auto op = std::make_shared<Operation>(OpDesc{});
    op->complete(st.ok() ? discard(p.comm) : st);
    for (auto* r : p.requests) r->op = op;
    note(p.comm.get(), st);
  }
  *seconds = total;
  return first.ok() ? braidSuccess : first.code();
}
