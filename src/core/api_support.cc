#include "core/api_support.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include "core/group.h"

namespace braid {
namespace {

std::mutex g_mu;
std::unordered_map<braidComm*, CommRef>& Registry() {
  static auto* r = new std::unordered_map<braidComm*, CommRef>();  // never destroyed: safe at exit
  return *r;
}

thread_local std::string t_last_error;

}  // namespace

void RegisterComm(CommRef comm) {
  std::lock_guard<std::mutex> lock(g_mu);
  braidComm* raw = comm.get();
  Registry()[raw] = std::move(comm);
}

CommRef UnregisterComm(braidComm_t comm) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Registry().find(comm);
  if (it == Registry().end()) return nullptr;
  CommRef ref = std::move(it->second);
  Registry().erase(it);
  return ref;
}

CommRef LookupComm(braidComm_t comm) {
  if (!comm) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Registry().find(comm);
  return it == Registry().end() ? nullptr : it->second;
}

Result<CommRef> UsableComm(braidComm_t comm) {
  if (!comm) return InvalidArgument("the communicator is NULL");
  CommRef ref = LookupComm(comm);
  if (!ref)
    return InvalidUsage(
        "the communicator handle is not live: it was destroyed or aborted, or never initialised");
  switch (ref->state()) {
    case braidComm::State::kInitializing:
      return InvalidUsage(
          ref->where() +
          ": init is still in progress (non-blocking communicator or open group): poll "
          "braidCommGetAsyncError until it returns braidSuccess");
    case braidComm::State::kFailed: {
      Status st = InvalidUsage("the communicator's init failed: " + ref->asyncError().message());
      return st;
    }
    default:
      break;
  }
  return ref;
}

braidResult_t Fail(braidComm* comm, const Status& st) {
  t_last_error = st.message();
  if (comm) comm->setLastError(st.message());
  return st.code();
}

braidResult_t Fail(const Status& st) {
  return Fail(nullptr, st);
}

const char* ThreadLastError() {
  return t_last_error.c_str();
}

braidResult_t RunOperation(const CommRef& comm, std::shared_ptr<Operation> op,
                           braidRequest_t* request) {
  if (InGroup()) {
    GroupAddCollective(comm, op, request == nullptr);
    if (request) *request = new braidRequest{op};
    return braidSuccess;
  }
  if (request) {
    comm->submit(op);
    *request = new braidRequest{std::move(op)};
    return braidSuccess;
  }
  if (!comm->config().inline_blocking || !comm->runInline(*op)) {
    comm->submit(op);
    op->wait(Deadline::Never(), comm->config().spin_us);
  }
  if (!op->status().ok()) return Fail(comm.get(), op->status());
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
  return braidCommInitRankConfig(child, nranks, id, rank, config);
}

Status RunInternal(const CommRef& comm, OpDesc desc) {
  auto op = std::make_shared<Operation>(std::move(desc));
  if (!comm->runInline(*op)) {
    comm->submit(op);
    op->wait(Deadline::Never(), comm->config().spin_us);
  }
  return op->status();
}

}  // namespace braid
