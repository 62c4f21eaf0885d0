// C API: version, errors, communicator life cycle, reduction operators, requests.
#include <cstring>
#include <thread>

#include "build_info.h"
#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/net/bootstrap.h"
#include "device/device_runtime.h"
#include "core/runtime/group.h"
#include "transport/local_board.h"
#include "core/base/log.h"

using namespace braid;

extern "C" {

braidResult_t braidGetVersion(int* version) {
  if (!version) return Fail(InvalidArgument("braidGetVersion: version is NULL"));
  *version = BRAID_VERSION_CODE;
  return braidSuccess;
}

const char* braidGetErrorString(braidResult_t result) {
  switch (result) {
    case braidSuccess:
      return "no error";
    case braidErrSystem:
      return "system error";
    case braidErrInternal:
      return "internal error";
    case braidErrInvalidArgument:
      return "invalid argument";
    case braidErrInvalidUsage:
      return "invalid usage";
    case braidErrRemote:
      return "remote error";
    case braidInProgress:
      return "operation in progress";
    case braidErrTimeout:
      return "timeout";
    case braidErrAborted:
      return "aborted";
  }
  return "unknown status code";
}

const char* braidGetLastError(braidComm_t comm) {
  thread_local std::string copy;
  if (CommRef ref = LookupComm(comm)) {
    copy = ref->lastError();
    if (!copy.empty()) return copy.c_str();
  }
  return ThreadLastError();
}

braidResult_t braidGetUniqueId(braidUniqueId* uniqueId) {
  if (!uniqueId) return Fail(InvalidArgument("braidGetUniqueId: uniqueId is NULL"));
  auto cfg = LoadConfigFromEnv();
  if (!cfg.ok()) return Fail(cfg.status());
  RendezvousOptions o;
  o.ifname = cfg->socket_ifname;
  o.timeout_ms = cfg->timeout_ms;
  auto id = StartRendezvous(o);
  if (!id.ok()) return Fail(Status(id.status()).prepend("braidGetUniqueId: "));
  EncodeUniqueId(*id, uniqueId);
  return braidSuccess;
}

braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId uniqueId,
                                      int rank, const braidConfig_t* config) {
  return InitComm(comm, nranks, uniqueId, rank, config, nullptr);
}

}  // extern "C"

namespace braid {

braidResult_t InitComm(braidComm_t* comm, int nranks, const braidUniqueId& uniqueId, int rank,
                       const braidConfig_t* config, const LinkModel* inherited_links) {
  if (!comm) return Fail(InvalidArgument("braidCommInitRank: comm is NULL"));
  *comm = nullptr;
  if (nranks < 1)
    return Fail(InvalidArgument("braidCommInitRank: nranks is " + std::to_string(nranks) +
                                ", must be >= 1"));
  if (rank < 0 || rank >= nranks)
    return Fail(InvalidArgument("braidCommInitRank: rank " + std::to_string(rank) +
                                " is outside [0, " + std::to_string(nranks) + ")"));
  auto id = DecodeUniqueId(uniqueId);
  if (!id.ok()) return Fail(Status(id.status()).prepend("braidCommInitRank: "));
  auto opts = MakeCommOptions(config);
  if (!opts.ok()) return Fail(Status(opts.status()).prepend("braidCommInitRank: "));
  if (inherited_links) opts->inherited_links = *inherited_links;
  if (device::DeviceRuntime* rt = device::ActiveDeviceRuntime())
    opts->device_context = rt->currentContext();

  auto ref = std::make_shared<braidComm>();
  if (InGroup()) {
    *comm = RegisterComm(ref);
    GroupAddInit(ref, *id, rank, nranks, *opts);
    return braidSuccess;
  }
  if (!opts->blocking) {
    braidComm_t handle = RegisterComm(ref);
    braidComm* raw = ref.get();
    UniqueIdData data = *id;
    CommOptions o = *opts;
    // The thread only touches the communicator, which joins it on destruction. Abort and destroy
    // stop it first (braidComm::abortInit), so joining it takes milliseconds, not the deadline.
    raw->initThread() = std::thread([raw, data, rank, nranks, o] {
      Status st = raw->init(data, rank, nranks, o);
      if (st.ok()) {
        raw->setState(braidComm::State::kReady);
      } else {
        raw->setAsyncError(st);
        raw->setLastError(st.message());
        raw->setState(braidComm::State::kFailed);
      }
    });
    *comm = handle;
    return braidInProgress;
  }
  Status st = ref->init(*id, rank, nranks, *opts);
  if (!st.ok()) return Fail(st);
  ref->setState(braidComm::State::kReady);
  *comm = RegisterComm(ref);
  return braidSuccess;
}

}  // namespace braid

extern "C" {

braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId uniqueId, int rank) {
  return braidCommInitRankConfig(comm, nranks, uniqueId, rank, nullptr);
}

braidResult_t braidCommFinalize(braidComm_t comm) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  Status st = (*ref)->finalize();
  return st.ok() ? braidSuccess : Fail(ref->get(), st);
}

braidResult_t braidCommDestroy(braidComm_t comm) {
  if (!comm) return Fail(InvalidArgument("braidCommDestroy: comm is NULL"));
  CommRef ref = UnregisterComm(comm);
  if (!ref)
    return Fail(
        InvalidUsage("braidCommDestroy: the communicator handle is not live (destroyed twice?)"));
  // A pending init is stopped rather than waited for: destroy returns within 2 s from any state,
  // and the communicator is released either way. (An init past its last wait completes.)
  if (ref->state() == braidComm::State::kInitializing) ref->abortInit();
  if (ref->initThread().joinable()) ref->initThread().join();
  Status st;
  if (ref->state() == braidComm::State::kReady) {
    // Errors the operations already reported do not make the release fail; operations that
    // never finish do (and are aborted).
    st = ref->drain();
    if (!st.ok()) ref->abort();
    // (Not while split views live on: they keep the root's streams, and a peer's data there may
    // be for them; use_count counts their references to the root.)
    else if (ref.use_count() == 1)
      ref->leave(FailureCause::Reason::kDestroyed);
  }
  ref->setState(braidComm::State::kDestroyed);
  ref.reset();  // frees now unless a concurrent call still holds a reference
  return st.ok() ? braidSuccess : Fail(st);
}

braidResult_t braidCommAbort(braidComm_t comm) {
  if (!comm) return Fail(InvalidArgument("braidCommAbort: comm is NULL"));
  CommRef ref = UnregisterComm(comm);
  if (!ref) return Fail(InvalidUsage("braidCommAbort: the communicator handle is not live"));
  // A pending non-blocking init stops waiting within kAbortCheckMs of abortInit(); joined here, so
  // that its thread, sockets and segments are gone when we return (and before abort() reads
  // what the init wrote). An init that completed meanwhile has its engine stopped by abort().
  ref->abortInit();
  if (ref->initThread().joinable()) ref->initThread().join();
  ref->abort();
  // Released now, unless a concurrent call (braidCommGetAsyncError ...) still holds a reference.
  ref.reset();
  return braidSuccess;
}

braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError) {
  if (!asyncError) return Fail(InvalidArgument("braidCommGetAsyncError: asyncError is NULL"));
  CommRef ref = LookupComm(comm);
  if (!ref)
    return Fail(InvalidUsage("braidCommGetAsyncError: the communicator handle is not live"));
  if (ref->state() == braidComm::State::kInitializing) {
    *asyncError = braidInProgress;
    return braidSuccess;
  }
  *asyncError = ref->asyncErrorCode();
  return braidSuccess;
}

braidResult_t braidCommCount(braidComm_t comm, int* count) {
  if (!count) return Fail(InvalidArgument("braidCommCount: count is NULL"));
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  *count = (*ref)->nranks();
  return braidSuccess;
}

braidResult_t braidCommUserRank(braidComm_t comm, int* rank) {
  if (!rank) return Fail(InvalidArgument("braidCommUserRank: rank is NULL"));
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  *rank = (*ref)->rank();
  return braidSuccess;
}

braidResult_t braidCommDescribe(braidComm_t comm, char* buf, size_t len) {
  if (!buf || len == 0) return Fail(InvalidArgument("braidCommDescribe: buf is NULL or len is 0"));
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  std::string s = (*ref)->describe();
  size_t n = std::min(len - 1, s.size());
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
  return braidSuccess;
}

braidResult_t braidCommPeerTraffic(braidComm_t comm, int peer, uint64_t* sent, uint64_t* received,
                                   char* transport, size_t len) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(Status(ref.status()).prepend("braidCommPeerTraffic: "));
  const braidComm& c = **ref;
  if (peer < 0 || peer >= c.nranks())
    return Fail(ref->get(), InvalidArgument("braidCommPeerTraffic: peer " + std::to_string(peer) +
                                            " is not a rank of this communicator (0.." +
                                            std::to_string(c.nranks() - 1) + ")"));
  if (transport && len == 0)
    return Fail(ref->get(), InvalidArgument("braidCommPeerTraffic: len is 0"));
  uint64_t out = 0, in = 0;
  std::string name = "self";
  if (peer != c.rank()) {
    name = c.transportOf(peer);
    for (int lane = 0; lane < c.nlanes(); ++lane)
      if (const Endpoint* ep = c.endpoint(peer, lane)) {
        out += ep->bytesSent();
        in += ep->bytesReceived();
      }
    // One-sided steps on the board: what the peer read of this rank's posts, and the reverse.
    if (const LocalBoard* board = c.board()) board->traffic(peer, &out, &in);
  }
  if (sent) *sent = out;
  if (received) *received = in;
  if (transport) {
    const size_t n = std::min(len - 1, name.size());
    std::memcpy(transport, name.data(), n);
    transport[n] = '\0';
  }
  return braidSuccess;
}

braidResult_t braidRedOpCreatePreMulSum(braidRedOp_t* op, const void* scalar,
                                        braidDataType_t datatype, braidComm_t comm) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  if (!op) return Fail(ref->get(), InvalidArgument("braidRedOpCreatePreMulSum: op is NULL"));
  if (!scalar)
    return Fail(ref->get(), InvalidArgument("braidRedOpCreatePreMulSum: scalar is NULL"));
  if (!IsValidDataType(datatype))
    return Fail(ref->get(), InvalidArgument("braidRedOpCreatePreMulSum: unknown datatype " +
                                            std::to_string(datatype)));
  PreMulOp p{static_cast<DataType>(datatype), {}};
  std::memcpy(p.scalar, scalar, DataTypeSize(p.dtype));
  *op = static_cast<braidRedOp_t>((*ref)->addPreMulOp(p));
  return braidSuccess;
}

braidResult_t braidRedOpDestroy(braidRedOp_t op, braidComm_t comm) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  if (static_cast<int>(op) < braidNumOps)
    return Fail(ref->get(),
                InvalidArgument("braidRedOpDestroy: op " + std::to_string(op) + " is built in"));
  if (!(*ref)->removePreMulOp(op))
    return Fail(ref->get(),
                InvalidArgument("braidRedOpDestroy: op " + std::to_string(op) +
                                " was not created on this communicator (or destroyed already)"));
  return braidSuccess;
}

braidResult_t braidTest(braidRequest_t* request, int* done) {
  if (!request || !*request || !done)
    return Fail(InvalidArgument("braidTest: request or done is NULL"));
  braidRequest* r = *request;
  if (!r->op)
    return Fail(InvalidUsage(
        "braidTest: the request's group has not ended yet (call braidGroupEnd first)"));
  if (!r->op->done()) {
    // Nobody drives its communicator's loop (a caller left it quiet): one pass here.
    if (const braid::CommRef comm = r->comm.lock()) comm->poll();
  }
  if (!r->op->done()) {
    *done = 0;
    return braidSuccess;
  }
  *done = 1;
  Status st = r->op->status();
  ReleaseRequest(r);
  *request = nullptr;
  return st.ok() ? braidSuccess : Fail(st);
}

braidResult_t braidWait(braidRequest_t* request, int64_t timeout_ms) {
  if (!request || !*request) return Fail(InvalidArgument("braidWait: request is NULL"));
  braidRequest* r = *request;
  if (!r->op)
    return Fail(InvalidUsage(
        "braidWait: the request's group has not ended yet (call braidGroupEnd first)"));
  // Not done yet: drive its communicator's loop, holding a reference so that a destroy on another
  // thread, free to proceed once the operation completes, cannot free it under this one. (Done
  // already, the common case for a window of small calls: no reference, two atomic operations
  // less.)
  if (!r->op->done()) {
    const Deadline deadline = timeout_ms < 0 ? Deadline::Never() : Deadline::After(timeout_ms);
    const braid::CommRef comm = r->comm.lock();
    if (!(comm ? comm->waitFor(*r->op, deadline) : r->op->wait(deadline, 50)))
      return Fail(TimeoutError("braidWait: the operation did not complete within " +
                               std::to_string(timeout_ms) + " ms (the request stays valid)"));
  }
  Status st = r->op->status();
  ReleaseRequest(r);
  *request = nullptr;
  return st.ok() ? braidSuccess : Fail(st);
}

}  // extern "C"

braidResult_t braidCommLinkParams(braidComm_t comm, braidLinkParams_t* link) {
  if (!link) return Fail(InvalidArgument("braidCommLinkParams: link is NULL"));
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(ref.status());
  const LinkModel& m = (*ref)->links().model;
  link->intraLatency = m.intra.alpha_s;
  link->intraBandwidth = m.intra.beta_bytes_s;
  link->interLatency = m.inter.alpha_s;
  link->interBandwidth = m.inter.beta_bytes_s;
  link->nicsPerNode = m.nics_per_node;
  return braidSuccess;
}
