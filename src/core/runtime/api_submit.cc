#include "core/runtime/api_submit.h"

#include <string>

#include "core/runtime/api_errors.h"
#include "core/runtime/group.h"

namespace braid {

braidResult_t RunOperation(const CommRef& comm, std::shared_ptr<Operation> op,
                           braidRequest_t* request) {
  if (InGroup()) {
    GroupAddCollective(comm, op, request == nullptr);
    if (request) *request = new braidRequest{op, comm};
    return braidSuccess;
  }
  if (request) {
    comm->submit(op);
    *request = new braidRequest{std::move(op), comm};
    return braidSuccess;
  }
  if (!comm->config().inline_blocking || !comm->runInline(*op)) {
    comm->submit(op);
    comm->waitFor(*op, Deadline::Never(), /*held=*/true);
  }
  if (!op->status().ok()) return Fail(comm.get(), op->status());
  return braidSuccess;
}

braidRequest* CompletedRequest() {
  // Made once, and left to the end of the process: a request may be waited on at any time.
  static braidRequest* const done = [] {
    auto op = std::make_shared<Operation>(OpDesc{});
    op->complete(Status::Ok());
    auto* r = new braidRequest{std::move(op), {}};
    r->shared = true;
    return r;
  }();
  return done;
}

namespace {

// Engine::MakeOperation for a non-blocking call: its operation and request in one block.
struct RequestOf {
  const CommRef* comm;
  braidRequest* request = nullptr;  // made by MakeRequested
};

std::shared_ptr<Operation> MakeRequested(OpDesc&& desc, void* ctx) {
  auto* of = static_cast<RequestOf*>(ctx);
  auto block = std::make_shared<RequestedOperation>(std::move(desc));
  std::shared_ptr<Operation> op(block, &block->op);
  braidRequest* r = &block->request;
  r->op = op;
  r->comm = *of->comm;
  r->with_op = true;
  of->request = r;
  return op;
}

}  // namespace

braidResult_t RunOperation(const CommRef& comm, OpDesc desc, braidRequest_t* request) {
  if (!request || InGroup())
    return RunOperation(comm, std::make_shared<Operation>(std::move(desc)), request);
  RequestOf of{&comm};
  // On an idle engine the call starts here, and a small one whose peers have posted ends here
  // too: no operation, no request of its own. On a busy one it is submitted under the same claim.
  Status result;
  if (comm->startCall(desc, &result, &MakeRequested, &of) == CallStart::kCompleted) {
    if (result.ok()) {
      *request = CompletedRequest();
      return braidSuccess;
    }
    // Reported by braidWait or braidTest, as for a call that fails later.
    MakeRequested(std::move(desc), &of)->complete(std::move(result));
  }
  *request = of.request;
  return braidSuccess;
}

braidResult_t InitChildComm(const braidComm& parent, braidComm_t* child, int nranks,
                            const braidUniqueId& id, int rank, const braidConfig_t* config) {
  braidConfig_t inherited = BRAID_CONFIG_INITIALIZER;
  const std::string& transports = parent.config().transports;
  const std::string& algo = parent.config().algo;
  if (!config) {
    inherited.timeout_ms = parent.config().timeout_ms;
    inherited.transports = transports.empty() ? nullptr : transports.c_str();
    inherited.algorithms = algo.empty() ? nullptr : algo.c_str();
    config = &inherited;
  }
  return InitComm(child, nranks, id, rank, config, &parent.tuner().model());
}

Status RunInternal(const CommRef& comm, OpDesc desc) {
  auto op = std::make_shared<Operation>(std::move(desc));
  if (!comm->runInline(*op)) {
    comm->submit(op);
    comm->waitFor(*op, Deadline::Never(), /*held=*/true);
  }
  return op->status();
}

}  // namespace braid
