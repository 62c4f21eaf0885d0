#include "process_group_braid.h"

#include "tensor_args.h"

#include <Python.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <cstdlib>
#include <cstring>

namespace braid_torch {

namespace {

using Ms = std::chrono::milliseconds;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Where rank 0 leaves braid's unique id in the group's store (torch prefixes it per group).
constexpr const char* kUniqueIdKey = "braid_unique_id";

// Per-call timeouts of torch's option structs: unset means braid's own deadline.
Ms WaitTimeout(Ms t) {
  return t.count() < 0 ? kNoTimeout : t;
}

at::Tensor& One(std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "braid: ", what, " takes one tensor per call, got ", ts.size(),
              " (lists of several are for one tensor per GPU of a process)");
  return ts[0];
}

// FNV-1a of torch's group name: braidCommSplitRanks's tag.
uint32_t NameTag(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

}  // namespace

c10::intrusive_ptr<ProcessGroupBraid> ProcessGroupBraid::Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, Ms timeout) {
  TORCH_CHECK(store, "braid: no store to meet the other ranks through");
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "braid: rank ", rank, " of ", size);
  const size_t blocking_bytes = BlockingBytesFromEnv();  // a bad value fails before init
  braidUniqueId id;
  if (rank == 0) {
    const braidResult_t rc = braidGetUniqueId(&id);
    TORCH_CHECK(rc == braidSuccess, "braid: braidGetUniqueId failed (", braidGetErrorString(rc),
                "): ", braidGetLastError(nullptr));
    store->set(kUniqueIdKey,
               std::vector<uint8_t>(id.internal, id.internal + BRAID_UNIQUE_ID_BYTES));
  } else {
    // Blocks within the store's timeout until rank 0 has set it.
    const std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(bytes.size() == BRAID_UNIQUE_ID_BYTES, "braid: the store holds ", bytes.size(),
                " bytes under '", kUniqueIdKey, "', not a unique id of ", BRAID_UNIQUE_ID_BYTES);
    std::memcpy(id.internal, bytes.data(), BRAID_UNIQUE_ID_BYTES);
  }
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  // torch's timeout is braid's per-operation deadline, unless the user set BRAID_TIMEOUT.
  const char* env = std::getenv("BRAID_TIMEOUT");
  if (!(env && *env) && timeout.count() > 0) config.timeout_ms = timeout.count();
  braidComm_t comm = nullptr;
  const braidResult_t rc = braidCommInitRankConfig(&comm, size, id, rank, &config);
  TORCH_CHECK(rc == braidSuccess, "braid: rank ", rank, " of ", size,
              ": braidCommInitRankConfig failed (", braidGetErrorString(rc),
              "): ", braidGetLastError(nullptr));
  if (rank == 0) {
    // Every rank has read the id (init is collective): a later group on a reused store must
    // not find this one's.
    try {
      store->deleteKey(kUniqueIdKey);
    } catch (const std::exception&) {
      // A store without deleteKey: harmless, the next init sets a fresh id before any reads.
    }
  }
  auto collectives =
      std::make_unique<Collectives>(comm, std::make_shared<Completer>(), blocking_bytes);
  return c10::make_intrusive<ProcessGroupBraid>(std::move(collectives), timeout);
}

c10::intrusive_ptr<ProcessGroupBraid> ProcessGroupBraid::CreateView(
    const c10::intrusive_ptr<ProcessGroupBraid>& parent, const std::vector<int64_t>& ranks,
    const std::string& name) {
  TORCH_CHECK(parent, "braid: a sub-group needs its parent group");
  std::vector<int> members(ranks.begin(), ranks.end());
  braidComm_t view = nullptr;
  const braidResult_t rc = braidCommSplitRanks(
      parent->comm(), members.data(), static_cast<int>(members.size()), NameTag(name), &view);
  TORCH_CHECK(rc == braidSuccess, "braid: new_group: braidCommSplitRanks failed (",
              braidGetErrorString(rc), "): ", braidGetLastError(nullptr));
  auto collectives = std::make_unique<Collectives>(view, parent->collectives_->completer(),
                                                   parent->collectives_->blockingBytes());
  return c10::make_intrusive<ProcessGroupBraid>(std::move(collectives), parent->timeout_);
}

ProcessGroupBraid::ProcessGroupBraid(std::unique_ptr<Collectives> collectives, Ms timeout)
    : c10d::ProcessGroup(collectives->rank(), collectives->size()),
      collectives_(std::move(collectives)),
      timeout_(timeout) {
  init();
}

ProcessGroupBraid::~ProcessGroupBraid() {
  // Completing the last Works may run their futures' Python callbacks, which take the GIL: a
  // destructor called from Python (destroy_process_group) must not hold it meanwhile.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    collectives_.reset();
  } else {
    collectives_.reset();
  }
}

std::string ProcessGroupBraid::describe() const {
  char buf[512];
  if (braidCommDescribe(comm(), buf, sizeof(buf)) != braidSuccess) return "";
  return buf;
}

void ProcessGroupBraid::startCoalescing() {
  collectives_->startCoalescing();
}

void ProcessGroupBraid::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>&) {
  collectives_->endCoalescing();
}

WorkPtr ProcessGroupBraid::broadcast(std::vector<at::Tensor>& tensors,
                                     const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(opts.rootTensor == 0, "braid: broadcast: rootTensor ", opts.rootTensor);
  return collectives_->broadcast(One(tensors, "broadcast"), static_cast<int>(opts.rootRank),
                                 WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::allreduce(std::vector<at::Tensor>& tensors,
                                     const c10d::AllreduceOptions& opts) {
  return collectives_->allreduce(One(tensors, "allreduce"), opts.reduceOp,
                                 WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceCoalescedOptions& opts) {
  return collectives_->allreduceCoalesced(tensors, opts.reduceOp, WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::reduce(std::vector<at::Tensor>& tensors,
                                  const c10d::ReduceOptions& opts) {
  TORCH_CHECK(opts.rootTensor == 0, "braid: reduce: rootTensor ", opts.rootTensor);
  return collectives_->reduce(One(tensors, "reduce"), opts.reduceOp,
                              static_cast<int>(opts.rootRank), WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "braid: allgather takes one output list, got ", outputs.size());
  return collectives_->allgather(outputs[0], One(inputs, "allgather"), WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::_allgather_base(at::Tensor& output, at::Tensor& input,
                                           const c10d::AllgatherOptions& opts) {
  return collectives_->allgatherBase(output, input, WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::AllgatherOptions& opts) {
  return collectives_->allgatherCoalesced(outputs, inputs, WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                  std::vector<at::Tensor>& inputs,
                                  const c10d::GatherOptions& opts) {
  // torch passes the root one list of outputs and the others none (or one empty list).
  TORCH_CHECK(outputs.size() <= 1, "braid: gather takes one output list, got ", outputs.size());
  std::vector<at::Tensor> none;
  return collectives_->gather(outputs.empty() ? none : outputs[0], One(inputs, "gather"),
                              static_cast<int>(opts.rootRank), WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::scatter(std::vector<at::Tensor>& outputs,
                                   std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ScatterOptions& opts) {
  TORCH_CHECK(inputs.size() <= 1, "braid: scatter takes one input list, got ", inputs.size());
  std::vector<at::Tensor> none;
  return collectives_->scatter(One(outputs, "scatter"), inputs.empty() ? none : inputs[0],
                               static_cast<int>(opts.rootRank), WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::reduce_scatter(std::vector<at::Tensor>& outputs,
                                          std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "braid: reduce_scatter takes one input list, got ",
              inputs.size());
  return collectives_->reduceScatter(One(outputs, "reduce_scatter"), inputs[0], opts.reduceOp,
                                     WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts) {
  return collectives_->reduceScatterBase(output, input, opts.reduceOp, WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::alltoall_base(at::Tensor& output, at::Tensor& input,
                                         std::vector<int64_t>& output_splits,
                                         std::vector<int64_t>& input_splits,
                                         const c10d::AllToAllOptions& opts) {
  return collectives_->alltoallBase(output, input, output_splits, input_splits,
                                    WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::alltoall(std::vector<at::Tensor>& outputs,
                                    std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions& opts) {
  return collectives_->alltoall(outputs, inputs, WaitTimeout(opts.timeout));
}

WorkPtr ProcessGroupBraid::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return collectives_->send(One(tensors, "send"), dst, tag);
}

WorkPtr ProcessGroupBraid::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return collectives_->recv(One(tensors, "recv"), src, tag);
}

WorkPtr ProcessGroupBraid::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "braid: recv without a source (recv_anysource) is not supported: braid matches a "
              "receive to the sends of one peer; pass src");
}

WorkPtr ProcessGroupBraid::barrier(const c10d::BarrierOptions& opts) {
  return collectives_->barrier(WaitTimeout(opts.timeout));
}

void ProcessGroupBraid::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  const Ms limit = opts.timeout.count() >= 0 ? opts.timeout : timeout_;
  collectives_->barrier(kNoTimeout)->wait(limit);
}

}  // namespace braid_torch
