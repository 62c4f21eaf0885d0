#include "nccl/stream_path.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/config.h"
#include "core/runtime/comm_registry.h"

namespace braid::nccl {

namespace {

// ------------------------------------------------------------------ agents per communicator

struct Agents {
  std::mutex mu;
  std::unordered_map<braidComm_t, std::shared_ptr<StreamAgent>> by_comm;
};
Agents& TheAgents() {
  static auto* a = new Agents;  // leaked: communicators may be destroyed during exit
  return *a;
}
std::atomic<int> g_agents{0};

// A reference, so that ncclCommGetAsyncError on another thread cannot lose the agent under it.
std::shared_ptr<StreamAgent> FindAgent(ncclComm_t comm) {
  if (g_agents.load(std::memory_order_acquire) == 0) return nullptr;
  Agents& a = TheAgents();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.by_comm.find(B(comm));
  return it == a.by_comm.end() ? nullptr : it->second;
}

std::shared_ptr<StreamAgent> AgentFor(device::DeviceRuntime* rt, ncclComm_t comm) {
  Agents& a = TheAgents();
  std::lock_guard<std::mutex> lock(a.mu);
  auto& slot = a.by_comm[B(comm)];
  if (!slot) {
    int rank, nranks;
    CommShape(comm, &rank, &nranks);
    slot = std::make_shared<StreamAgent>(
        rt, "rank " + std::to_string(rank) + "/" + std::to_string(nranks) + " " + rt->name());
    // The cap the communicator was created with (BRAID_STAGING_MAX_BYTES as init read it), not
    // the environment now: a program that changes the variable after init keeps init's value.
    CommRef c = LookupComm(B(comm));
    slot->setStagingCap(c ? c->config().staging_max_bytes : Config().staging_max_bytes);
    // A call this rank will not run (behind a kept failure) leaves its peers waiting for its
    // part: the communicator is revoked so that they fail at once (reliability.md), not after
    // BRAID_TIMEOUT. The agent stops before the communicator is destroyed.
    slot->setOnDroppedCall([comm] { (void)braidCommRevoke(B(comm)); });
    g_agents.fetch_add(1, std::memory_order_acq_rel);
  }
  return slot;
}

// ------------------------------------------------------------------ translation

ncclResult_t Report(const Status& st, const char* func) {
  if (st.ok()) return ncclSuccess;
  std::string m = st.message();
  // The agent's messages already start with the call's name.
  if (m.rfind(func, 0) != 0) m = std::string(func) + ": " + m;
  return Fail(MapStatus(st.code()), std::move(m));
}

// ------------------------------------------------------------------ groups

struct GroupedCall {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  const char* func = nullptr;
  std::vector<StreamBuffer> buffers;
  StreamRun run;   // the whole call (its pieces one after another)
  PieceRun piece;  // its pieces' form (per > 0), for a call submitted on its own
  size_t per = 0, count = 0, elt_size = 0;
  DeviceForm device;           // its device path (GroupedDeviceForm), empty for calls without one
  std::optional<P2pCall> p2p;  // a send's or receive's (GroupedP2pForm)
};

// The staged form of a call ordered on `stream` alone: whole, or in pieces of `per` elements (the
// staging pipeline) when `per` > 0.
StreamCall StagedCall(const char* func, cudaStream_t stream, std::vector<StreamBuffer> buffers,
                      StreamRun run, PieceRun piece, size_t per, size_t count, size_t elt_size) {
  StreamCall call;
  call.what = func;
  call.streams.push_back(stream);
  call.buffers = std::move(buffers);
  call.run = [run = std::move(run)](const HostPointers& h) { return FromResult(run(h)); };
  if (per > 0) {
    call.pieces = (count + per - 1) / per;
    call.piece_bytes = per * elt_size;
    call.run_piece = [piece = std::move(piece), per, count](const HostPointers& h, size_t k) {
      const size_t first = k * per;
      return FromResult(piece(h, first, std::min(per, count - first)));
    };
  }
  return call;
}

// The device form of the API call in progress on this thread (GroupedDeviceForm,
// GroupedP2pForm).
thread_local DeviceForm* t_device_form = nullptr;
thread_local const P2pCall* t_p2p_form = nullptr;
// Inside a group's job on the agent's thread: what KeepUntilGroupRuns keeps until its end.
thread_local std::vector<std::unique_ptr<char[]>>* t_group_keep = nullptr;
struct GroupState {
  std::vector<GroupedCall> device_calls;
  std::vector<ncclComm_t> host_comms;  // communicators with host calls in this group
  // Operators destroyed in the group while device calls of their communicator were collected:
  // destroyed after those calls ran (DestroyRedOpAfterQueued).
  std::vector<std::pair<ncclComm_t, ncclRedOp_t>> op_destroys;
};
GroupState& Group() {
  thread_local GroupState g;
  return g;
}

ncclResult_t MixedGroup(const char* func) {
  return Fail(ncclInvalidUsage,
              std::string(func) +
                  ": a group may not mix calls on host buffers and on device buffers of one "
                  "communicator (braid runs device calls ordered on their streams, host calls at "
                  "ncclGroupEnd); use separate groups");
}

// Whether a group's device calls may each run as it would alone (SubmitGroupStreamCalls).
bool EachOnItsOwn(const std::vector<GroupedCall>& calls) {
  if (calls.empty()) return false;
  for (const GroupedCall& c : calls)
    if (!c.device || c.comm != calls[0].comm || c.stream != calls[0].stream) return false;
  return true;
}

// Whether a group's device calls are sends and receives alone, on one communicator and one
// stream (into *out, in issue order).
bool AllP2p(const std::vector<GroupedCall>& calls, std::vector<P2pCall>* out) {
  if (calls.empty()) return false;
  for (const GroupedCall& c : calls) {
    if (!c.p2p || c.comm != calls[0].comm || c.stream != calls[0].stream) return false;
    out->push_back(*c.p2p);
  }
  return true;
}

}  // namespace

void GroupedDeviceForm::keep(DeviceForm form) {
  form_ = std::move(form);
  t_device_form = &form_;
}

GroupedDeviceForm::~GroupedDeviceForm() {
  if (t_device_form == &form_) t_device_form = nullptr;
}

GroupedP2pForm::GroupedP2pForm(const P2pCall& call) : call_(call) {
  if (GroupDepth() > 0) t_p2p_form = &call_;
}

GroupedP2pForm::~GroupedP2pForm() {
  if (t_p2p_form == &call_) t_p2p_form = nullptr;
}

size_t PieceElements(ncclComm_t comm, size_t count, size_t elt_size) {
  const size_t bytes = count * elt_size;
  if (elt_size == 0 || bytes <= kMinStagingChunkBytes) return 0;  // nothing cuts it: no lookup
  CommRef c = LookupComm(B(comm));
  const uint64_t chunk = c ? c->config().staging_chunk_bytes : 0;
  return chunk > 0 && bytes > chunk ? std::max<size_t>(1, chunk / elt_size) : 0;
}

StreamAgent::StagingStats StagingStatsOf(ncclComm_t comm) {
  std::shared_ptr<StreamAgent> agent = FindAgent(comm);
  return agent ? agent->stagingStats() : StreamAgent::StagingStats{};
}

void KeepUntilGroupRuns(std::unique_ptr<char[]> p) {
  if (t_group_keep) t_group_keep->push_back(std::move(p));
}

bool AnyStreamAgent() {
  return g_agents.load(std::memory_order_relaxed) > 0;
}

bool SubmitIfDevice(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                    const char* func, std::initializer_list<BufferUse> buffers,
                    const std::function<StreamRun()>& make_run, ncclResult_t* result,
                    const PieceForm& pieces) {
  // Once per call and buffer: what the buffer is (from the known allocations, else the driver).
  std::array<StreamBuffer, 4> found{};
  size_t n = 0;
  bool device = false;
  for (const BufferUse& b : buffers) {
    if (!b.ptr || b.bytes == 0 || n == found.size()) continue;
    auto info = ClassifyBuffer(rt, b.ptr);
    if (!info.ok()) {
      *result = Fail(ncclUnhandledCudaError,
                     std::string(func) + ": cannot classify a buffer: " + info.status().message());
      return true;
    }
    found[n++] = StreamBuffer{b.ptr, b.bytes, b.read, b.written, *info};
    device = device || info->onDevice();
  }
  if (!device) {
    // A call with no bytes at all (zero count) is neutral: NCCL does nothing for it, and neither
    // does braid here, so that it neither makes the communicator a host one in a group (whose
    // device calls would then be refused as mixed) nor waits for the queued device calls.
    if (n == 0 && (GroupDepth() > 0 || AnyStreamAgent())) {
      bool zero = true;
      for (const BufferUse& b : buffers) zero = zero && b.bytes == 0;
      if (zero) {
        *result = ncclSuccess;
        return true;
      }
    }
    return false;
  }
  std::vector<StreamBuffer> bufs(found.begin(), found.begin() + static_cast<ptrdiff_t>(n));
  if (GroupDepth() > 0) {
    GroupState& g = Group();
    if (std::find(g.host_comms.begin(), g.host_comms.end(), comm) != g.host_comms.end()) {
      *result = MixedGroup(func);
      return true;
    }
    Status st = rt->checkStream(stream);
    if (!st.ok()) {
      *result = Report(st, func);
      return true;
    }
    // Cut as outside a group (PieceElements): the pieces run one after another in the group's
    // job, so that a rank that groups the call runs the collectives a rank that does not runs.
    GroupedCall grouped;
    grouped.comm = comm;
    grouped.stream = stream;
    grouped.func = func;
    grouped.buffers = std::move(bufs);
    grouped.run = make_run();
    if (const size_t per = pieces.make ? PieceElements(comm, pieces.count, pieces.elt_size) : 0) {
      grouped.piece = pieces.make();
      grouped.per = per;
      grouped.count = pieces.count;
      grouped.elt_size = pieces.elt_size;
      grouped.run = [piece = grouped.piece, per, count = pieces.count](const HostPointers& h) {
        return RunPieces(count, per, [&](size_t first, size_t n) { return piece(h, first, n); });
      };
    }
    if (t_device_form) {
      grouped.device = std::move(*t_device_form);
      t_device_form = nullptr;
    }
    if (t_p2p_form) {
      grouped.p2p = *t_p2p_form;
      t_p2p_form = nullptr;
    }
    g.device_calls.push_back(std::move(grouped));
    *result = ncclSuccess;
    return true;
  }
  // Large element-wise calls in pieces (the staging pipeline): the piece size is the
  // communicator's, whole elements; every rank cuts the same count the same way.
  const size_t per = pieces.make ? PieceElements(comm, pieces.count, pieces.elt_size) : 0;
  StreamCall call =
      StagedCall(func, stream, std::move(bufs), make_run(), per ? pieces.make() : PieceRun{}, per,
                 pieces.count, pieces.elt_size);
  *result = Report(AgentFor(rt, comm)->submit(std::move(call)), func);
  return true;
}

Status FromResult(braidResult_t r) {
  if (r == braidSuccess) return Status::Ok();
  const char* m = braidGetLastError(nullptr);
  return Status::Error(static_cast<ErrorClass>(r), m && *m ? m : braidGetErrorString(r));
}

ncclResult_t SubmitDeviceWork(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                              const char* func, std::vector<StreamBuffer> buffers,
                              std::shared_ptr<DeviceWork> work) {
  StreamCall call;
  call.what = func;
  call.streams.push_back(stream);
  call.buffers = std::move(buffers);
  call.device_work = std::move(work);
  return Report(AgentFor(rt, comm)->submit(std::move(call)), func);
}

ncclResult_t BeforeHostCall(ncclComm_t comm, const char* func) {
  if (GroupDepth() > 0) {
    GroupState& g = Group();
    for (const GroupedCall& c : g.device_calls)
      if (c.comm == comm) return MixedGroup(func);
    if (std::find(g.host_comms.begin(), g.host_comms.end(), comm) == g.host_comms.end())
      g.host_comms.push_back(comm);
  }
  if (auto agent = FindAgent(comm)) return Report(agent->drain(), func);
  return ncclSuccess;
}

ncclResult_t SubmitGroupStreamCalls() {
  GroupState g = std::move(Group());
  Group() = GroupState{};
  ncclResult_t first = ncclSuccess;
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  // Sends and receives alone, on one communicator and one stream: on the device together when
  // every buffer allows it (P2pOnDevice decides, as for one call outside a group), else staged
  // as one braid group, below.
  if (std::vector<P2pCall> p2p;
      AllP2p(g.device_calls, &p2p) &&
      P2pOnDevice(g.device_calls[0].comm, g.device_calls[0].stream, p2p, &first)) {
    for (auto& [comm, op] : g.op_destroys) DestroyRedOpAfterQueued(comm, op);
    return first;
  }
  // A group whose device calls are collectives with a device path, all on one communicator and
  // one stream: each call runs as it would alone, in order (its device path, else staged on its
  // own), so that a rank that groups them and one that does not decide alike (the group is
  // closed: GroupDepth() is 0). Sends and receives mixed with them must run together, and calls
  // on several streams or communicators must be ordered together (each stream after all of them),
  // so those groups stage as one braid group, below.
  if (EachOnItsOwn(g.device_calls)) {
    std::shared_ptr<StreamAgent> agent;
    for (GroupedCall& c : g.device_calls) {
      ncclResult_t r = ncclSuccess;
      if (!c.device(&r)) {
        if (!agent) agent = AgentFor(rt, c.comm);
        r = Report(
            agent->submit(StagedCall(c.func, c.stream, std::move(c.buffers), std::move(c.run),
                                     std::move(c.piece), c.per, c.count, c.elt_size)),
            c.func);
      }
      // The first error ends the group: a call refused before it was queued (a bad buffer, no
      // memory) is not issued on this rank, so the next one would pair with the peers' copy of
      // this one. As a program issuing them one by one, the caller gets the error.
      if (r != ncclSuccess) {
        first = r;
        break;
      }
    }
    for (auto& [comm, op] : g.op_destroys) DestroyRedOpAfterQueued(comm, op);
    return first;
  }
  // One job per communicator, in the order of its first call.
  std::vector<bool> taken(g.device_calls.size(), false);
  std::vector<std::pair<StreamAgent*, StreamCall>> jobs;
  std::vector<std::shared_ptr<StreamAgent>> agents;  // keep them while submitting
  for (size_t i = 0; i < g.device_calls.size(); ++i) {
    if (taken[i]) continue;
    const ncclComm_t comm = g.device_calls[i].comm;
    StreamCall call;
    call.what = std::string("group of ") + g.device_calls[i].func;
    std::vector<StreamRun> runs;
    for (size_t j = i; j < g.device_calls.size(); ++j) {
      GroupedCall& c = g.device_calls[j];
      if (c.comm != comm) continue;
      taken[j] = true;
      if (std::find(call.streams.begin(), call.streams.end(), c.stream) == call.streams.end())
        call.streams.push_back(c.stream);
      call.buffers.insert(call.buffers.end(), c.buffers.begin(), c.buffers.end());
      runs.push_back(std::move(c.run));
    }
    call.run = [runs = std::move(runs)](const HostPointers& h) {
      braidResult_t r = braidGroupStart();
      if (r != braidSuccess) return FromResult(r);
      std::vector<std::unique_ptr<char[]>> kept;  // read by the calls braidGroupEnd runs
      t_group_keep = &kept;
      for (const StreamRun& run : runs) {
        r = run(h);
        if (r != braidSuccess) break;
      }
      t_group_keep = nullptr;
      Status st = FromResult(r);
      braidResult_t end = braidGroupEnd();
      if (st.ok()) st = FromResult(end);
      return st;
    };
    std::shared_ptr<StreamAgent> agent = AgentFor(rt, comm);
    jobs.emplace_back(agent.get(), std::move(call));
    agents.push_back(std::move(agent));
  }
  // One submission for every communicator: each stream writes every `ready` of the group before
  // it waits for any `done`, as NCCL runs such a group as one fused launch.
  if (!jobs.empty()) first = Report(StreamAgent::submitGroup(std::move(jobs)), "ncclGroupEnd");
  for (auto& [comm, op] : g.op_destroys) DestroyRedOpAfterQueued(comm, op);
  return first;
}

void DiscardGroupStreamCalls() {
  GroupState g = std::move(Group());
  Group() = GroupState{};
  for (auto& [comm, op] : g.op_destroys) (void)braidRedOpDestroy(B(op), B(comm));
}

ncclResult_t DrainStreamAgent(ncclComm_t comm) {
  if (auto agent = FindAgent(comm)) (void)agent->drain();  // errors: GetAsyncError's
  return ncclSuccess;
}

void AbortStreamAgent(ncclComm_t comm, const char* why) {
  if (auto agent = FindAgent(comm)) agent->abort(why);
}

void ShutdownStreamAgent(ncclComm_t comm, bool abort, const char* why) {
  if (auto agent = DetachStreamAgent(comm)) agent->shutdown(abort, why);
}

bool DestroyRedOpAfterQueued(ncclComm_t comm, ncclRedOp_t op) {
  if (GroupDepth() > 0) {
    GroupState& g = Group();
    for (const GroupedCall& c : g.device_calls)
      if (c.comm == comm) {
        g.op_destroys.emplace_back(comm, op);
        return true;
      }
  }
  auto agent = FindAgent(comm);
  if (!agent) return false;
  agent->runAfterQueued([comm, op] { (void)braidRedOpDestroy(B(op), B(comm)); });
  return true;
}

std::shared_ptr<StreamAgent> DetachStreamAgent(ncclComm_t comm) {
  if (g_agents.load(std::memory_order_acquire) == 0) return nullptr;
  Agents& a = TheAgents();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.by_comm.find(B(comm));
  if (it == a.by_comm.end()) return nullptr;
  std::shared_ptr<StreamAgent> agent = std::move(it->second);
  a.by_comm.erase(it);
  g_agents.fetch_sub(1, std::memory_order_acq_rel);
  return agent;
}

braidResult_t StreamAgentError(ncclComm_t comm, std::string* message) {
  auto agent = FindAgent(comm);
  if (!agent) return braidSuccess;
  Status st = agent->error();
  if (st.ok()) return braidSuccess;
  *message = st.message();
  return st.code();
}

}  // namespace braid::nccl
