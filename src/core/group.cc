#include "core/group.h"

#include <thread>
#include <vector>

#include "core/log.h"

namespace braid {
namespace {

struct PendingInit {
  CommRef comm;
  UniqueIdData id;
  int rank, nranks;
  CommOptions opts;
};

struct PendingCollective {
  CommRef comm;
  std::shared_ptr<Operation> op;
  bool blocking;
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

}  // namespace

bool InGroup() {
  return t_group.depth > 0;
}

void GroupAddCollective(const CommRef& comm, std::shared_ptr<Operation> op, bool blocking) {
  t_group.collectives.push_back({comm, std::move(op), blocking});
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

extern "C" braidResult_t braidGroupStart(void) {
  ++t_group.depth;
  return braidSuccess;
}

extern "C" braidResult_t braidGroupEnd(void) {
  if (t_group.depth == 0)
    return Fail(InvalidUsage("braidGroupEnd without a matching braidGroupStart"));
  if (--t_group.depth > 0) return braidSuccess;
  GroupState g = std::move(t_group);
  t_group = GroupState{};

  Status first;
  auto note = [&](braidComm* comm, const Status& st) {
    if (!st.ok() && first.ok()) {
      first = st;
      Fail(comm, st);
    }
  };

  // Inits run concurrently: one thread may be initialising several ranks of one communicator,
  // and each needs the others to make progress.
  if (!g.inits.empty()) {
    std::vector<Status> results(g.inits.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < g.inits.size(); ++i)
      threads.emplace_back([&, i] {
        auto& in = g.inits[i];
        results[i] = in.comm->init(in.id, in.rank, in.nranks, in.opts);
        if (results[i].ok()) {
          in.comm->setState(braidComm::State::kReady);
        } else {
          in.comm->setAsyncError(results[i]);
          in.comm->setState(braidComm::State::kFailed);
        }
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < g.inits.size(); ++i) note(g.inits[i].comm.get(), results[i]);
  }

  // Collectives in call order, then each communicator's sends and receives as one operation.
  std::vector<std::pair<CommRef, std::shared_ptr<Operation>>> to_wait;
  for (auto& c : g.collectives) {
    if (c.comm->state() != braidComm::State::kReady) {
      c.op->complete(InvalidUsage(c.comm->where() + ": communicator not ready"));
      continue;
    }
    c.comm->submit(c.op);
    if (c.blocking) to_wait.emplace_back(c.comm, c.op);
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
    for (auto* r : p.requests) r->op = op;
    if (p.comm->state() != braidComm::State::kReady) {
      op->complete(InvalidUsage(p.comm->where() + ": communicator not ready"));
    } else {
      p.comm->submit(op);
    }
    to_wait.emplace_back(p.comm, op);
  }
  for (auto& [comm, op] : to_wait) {
    op->wait(Deadline::Never(), comm->config().spin_us);
    note(comm.get(), op->status());
  }
  return first.ok() ? braidSuccess : first.code();
}
