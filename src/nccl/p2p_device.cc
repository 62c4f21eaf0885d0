#include "nccl/p2p_device.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>

#include "core/base/datatype.h"
#include "core/runtime/comm_registry.h"
#include "nccl/device_scratch.h"
#include "nccl/known_buffers.h"
#include "nccl/peer_buffers.h"
#include "nccl/peer_windows.h"
#include "nccl/stream_path.h"

namespace braid::nccl {

namespace {

std::atomic<uint64_t> g_jobs{0};
std::atomic<uint64_t> g_bounced{0};

// The view's tag: tells its messages apart from the communicator's own and from a framework's
// views of the same ranks (docs/split-views.md).
constexpr uint32_t kHandshakeTag = 0xB2A1D9E7u;
constexpr uint64_t kRecordMagic = 0x62726169'64503250ull;  // "braidP2P"

// How a send's bytes reach its receiver's copy kernel.
enum SendMode : int32_t {
  kPull = 1,   // from the send buffer itself: its allocation's record (mapped by the receiver),
               // or its address for a send to this rank's own process
  kBytes = 2,  // over the view: the sender's copy in its send bounce, into the receiver's
};

// What a send tells its receiver. Plain data (sent as bytes).
struct SendRecord {
  uint64_t magic = kRecordMagic;
  uint64_t count = 0;
  int32_t type = 0;
  int32_t pid = 0;
  int32_t mode = kPull;
  int32_t pad = 0;
  uint64_t address = 0;     // the send buffer in the sender's process
  PeerBufferRecord buffer;  // kPull to another rank: its allocation
};

// Bounce regions start on 256-byte boundaries (the copy kernels' widest loads).
size_t Bounced(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// A receiver's answer to its sender: the copy ended (ok), or why it did not run. Its size differs
// from a record's, so that a record or answer left over by a failed job is refused, never
// misread. (A send's bytes may have any size: every path that could leave them unclaimed revokes
// the communicator, view included, first.)
struct Answer {
  int32_t ok = 0;
  char reason[188] = {};
};
static_assert(sizeof(Answer) != sizeof(SendRecord));

// Per communicator: the handshake view and the receiver's mappings of its senders' allocations
// (used on the communicator's stream agent only; the map's lock guards creation and removal).
struct P2pState {
  braidComm_t view = nullptr;
  std::shared_ptr<PeerAllocationCache> cache;
};
struct AllStates {
  std::mutex mu;
  std::map<ncclComm_t, std::shared_ptr<P2pState>> by_comm;
};
AllStates& States() {
  static auto* s = new AllStates;  // never destroyed: agents may outlive static destruction
  return *s;
}

std::shared_ptr<P2pState> StateFor(ncclComm_t comm, device::DeviceRuntime* rt, int rank) {
  AllStates& all = States();
  std::lock_guard<std::mutex> lock(all.mu);
  auto& slot = all.by_comm[comm];
  if (!slot) {
    slot = std::make_shared<P2pState>();
    slot->cache = std::make_shared<PeerAllocationCache>(rt, rank, static_cast<int32_t>(getpid()));
  }
  return slot;
}

// The view, made on first use (local: nothing is sent, so ranks may make it at different calls).
Result<braidComm_t> ViewOf(ncclComm_t comm, P2pState& state, int nranks) {
  if (state.view) return state.view;
  std::vector<int> ranks(static_cast<size_t>(nranks));
  std::iota(ranks.begin(), ranks.end(), 0);
  braidComm_t view = nullptr;
  braidResult_t r = braidCommSplitRanks(B(comm), ranks.data(), nranks, kHandshakeTag, &view);
  if (r != braidSuccess)
    return Status(FromResult(r)).prepend("making the point-to-point handshake view: ");
  state.view = view;
  return view;
}

const char* TypeText(int32_t t) {
  return DataTypeName(static_cast<DataType>(t));  // "?" for a value that names no type
}

// A failed call on the view, with the view's own message (a group's failure may leave the
// thread's message empty).
Status OnView(braidResult_t r, braidComm_t view) {
  if (r == braidSuccess) return Status::Ok();
  const char* m = braidGetLastError(view);
  if (m && *m) return Status::Error(static_cast<ErrorClass>(r), m);
  return FromResult(r);
}

// One message of an exchange: `bytes` at `p`, to or from rank `peer` of the view.
template <typename Ptr>
struct Message {
  Ptr p;
  int peer;
  size_t bytes;
};

// One braid group on the view: the messages of `to` sent, those of `from` received.
Status Exchange(braidComm_t view, const std::vector<Message<const void*>>& to,
                const std::vector<Message<void*>>& from) {
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return FromResult(r);
  for (const auto& m : to)
    if (r == braidSuccess) r = braidSend(m.p, m.bytes, braidUint8, m.peer, view);
  for (const auto& m : from)
    if (r == braidSuccess) r = braidRecv(m.p, m.bytes, braidUint8, m.peer, view);
  Status st = OnView(r, view);
  const braidResult_t end = braidGroupEnd();
  if (st.ok()) st = OnView(end, view);
  return st;
}

// The answers: this rank's (one per receive, all `mine`) out, its senders' in. The first failure
// a receiver reported, else ok.
Status Answers(braidComm_t view, const std::vector<P2pCall>& calls, const Answer& mine) {
  std::vector<Message<const void*>> to;
  std::vector<Message<void*>> from;
  std::vector<Answer> theirs(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].send)
      from.push_back({&theirs[i], calls[i].peer, sizeof(Answer)});
    else
      to.push_back({&mine, calls[i].peer, sizeof(Answer)});
  }
  BRAID_RETURN_IF_ERROR(Exchange(view, to, from).prepend("waiting for the receivers: "));
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].send && !theirs[i].ok)
      return SystemError(
          "ncclSend to rank " + std::to_string(calls[i].peer) + ": the receiver failed: " +
          std::string(theirs[i].reason, strnlen(theirs[i].reason, sizeof(theirs[i].reason))));
  return Status::Ok();
}

}  // namespace

bool P2pOnDevice(ncclComm_t comm, cudaStream_t stream, const std::vector<P2pCall>& calls,
                 ncclResult_t* result) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (!rt || !rt->peerReduceAvailable() || calls.empty() || GroupDepth() > 0 ||
      StagingDeviceCallsForTesting())
    return false;
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  if (rank < 0 || nranks < 1) return false;
  {
    CommRef ref = LookupComm(B(comm));
    if (!ref || !ref->deviceIpc() || ref->layout().nnodes != 1) return false;
  }
  // Every buffer this rank uses is device (or managed) memory: what every rank of the pair
  // decides alike, as the rest of the stream path does (IsDeviceBuffer). Whether a send's
  // allocation can be shared with its receiver (legacy CUDA IPC shares no managed or cuMem
  // memory) is the pair's own business, settled in the handshake: a send that cannot be shared
  // travels as bytes (kBytes), so a receiver never needs to know beforehand.
  std::vector<StreamBuffer> buffers;
  std::vector<SendRecord> records(calls.size());
  std::vector<size_t> bounce_at(calls.size(), 0);  // kBytes sends: their place in the bounce
  std::vector<size_t> sizes(calls.size(), 0);      // each call's bytes
  size_t bounce_bytes = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const P2pCall& c = calls[i];
    const size_t bytes = sizes[i] = c.count * TypeSize(c.type);
    if (bytes == 0) return false;
    auto info = ClassifyBuffer(rt, c.buff);
    if (!info.ok() || !info->onDevice()) return false;
    buffers.push_back(StreamBuffer{c.buff, bytes, c.send, !c.send, *info});
    SendRecord& rec = records[i];
    rec.count = c.count;
    rec.type = static_cast<int32_t>(c.type);
    rec.pid = static_cast<int32_t>(getpid());
    rec.address = reinterpret_cast<uintptr_t>(c.buff);
    if (!c.send || c.peer == rank || MakePeerBufferRecord(rt, c.buff, *info, &rec.buffer)) continue;
    rec.mode = kBytes;
    bounce_at[i] = bounce_bytes;
    bounce_bytes += Bounced(bytes);
  }
  const char* what = calls.size() > 1 ? "group of ncclSend/ncclRecv"
                     : calls[0].send  ? "ncclSend"
                                      : "ncclRecv";
  // From here the call is this path's on every rank of the pair: a refusal on this rank alone
  // would leave its peers waiting for a record, and its next call's record taken for this one's,
  // so it revokes the communicator (its peers fail within milliseconds).
  const auto refuse = [&](ncclResult_t code, const Status& why) {
    (void)braidCommRevoke(B(comm));
    *result = Fail(code, std::string(what) + ": " + why.message());
    return true;
  };
  char* bounce = nullptr;
  if (bounce_bytes > 0) {
    auto b = DeviceScratch(comm, rt, bounce_bytes, ScratchUse::kSendBounce);
    if (!b.ok()) return refuse(ncclSystemError, b.status());
    bounce = static_cast<char*>(*b);
  }
  // One late-bound pointer table per receive.
  PeerPointerPool& pool = PeerPointerPool::For(rt);
  std::vector<device::PeerPointers*> tables;
  for (const P2pCall& c : calls) {
    if (c.send) continue;
    auto t = pool.acquire();
    if (!t.ok()) {
      for (device::PeerPointers* u : tables) pool.release(u);
      return refuse(ncclUnhandledCudaError, t.status());
    }
    tables.push_back(*t);
  }
  std::shared_ptr<P2pState> state = StateFor(comm, rt, rank);
  auto work = std::make_shared<DeviceWork>();
  if (bounce) {
    // Before `ready`: the bytes are in the bounce by the time the agent sends them.
    work->prepare = [rt, calls, records, bounce, bounce_at,
                     sizes](device::StreamHandle s) -> Status {
      for (size_t i = 0; i < calls.size(); ++i)
        if (records[i].mode == kBytes)
          BRAID_RETURN_IF_ERROR(rt->copyAsync(bounce + bounce_at[i], calls[i].buff, sizes[i], s)
                                    .prepend("copying a send to host-mapped memory: "));
      return Status::Ok();
    };
  }
  work->queue = [rt, calls, tables](device::StreamHandle s, const uint32_t* skip, uint32_t value) {
    size_t k = 0;
    for (const P2pCall& c : calls) {
      if (c.send) continue;
      device::PeerReduce r;
      r.type = static_cast<DataType>(c.type);
      r.count = c.count;
      r.pairwise = true;
      r.late = tables[k++];
      r.late_src = 1;
      r.late_dst = 1;
      r.skip = skip;
      r.skip_value = value;
      BRAID_RETURN_IF_ERROR(rt->launchPeerReduce(r, s));
    }
    return Status::Ok();
  };
  work->agree = [comm, rt, nranks, rank, calls, records, bounce, bounce_at, sizes, tables,
                 state]() -> Status {
    auto view = ViewOf(comm, *state, nranks);
    if (!view.ok()) return view.status();
    // A failure of an exchange (a dead peer, a staged peer's message of the other communicator,
    // a record this rank cannot read) fails the call without answers, and only while the
    // communicator is failing. A record this rank sent may still reach its receiver, which then
    // copies from a buffer this rank's stream no longer holds: the communicator is revoked, so
    // that such a receiver fails too instead of waiting for its next call (its answer,
    // unclaimed, is never taken for a record: their sizes differ).
    auto broken = [comm](Status st, const char* step) {
      (void)braidCommRevoke(B(comm));
      return st.prepend(step);
    };
    std::vector<Message<const void*>> to;
    std::vector<Message<void*>> from;
    std::vector<SendRecord> got(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].send)
        to.push_back({&records[i], calls[i].peer, sizeof(SendRecord)});
      else
        from.push_back({&got[i], calls[i].peer, sizeof(SendRecord)});
    }
    if (Status st = Exchange(*view, to, from); !st.ok())
      return broken(st, "exchanging the buffers: ");
    // The bytes of kBytes sends, received whether or not the call matches, so that the view's
    // messages stay paired: the record says how many.
    to.clear();
    from.clear();
    std::vector<size_t> received_at(calls.size(), 0), received_bytes(calls.size(), 0);
    size_t receive_bytes = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].send) {
        if (records[i].mode == kBytes)
          to.push_back({bounce + bounce_at[i], calls[i].peer, sizes[i]});
        continue;
      }
      const SendRecord& g = got[i];
      // A record's sizes are a peer's word: checked before they size anything.
      size_t bytes = 0, end = 0;
      const bool readable =
          g.magic == kRecordMagic && (g.mode == kPull || g.mode == kBytes) &&
          IsValidDataType(g.type) && !(g.mode == kBytes && calls[i].peer == rank) &&
          !__builtin_mul_overflow(g.count, DataTypeSize(static_cast<DataType>(g.type)), &bytes) &&
          bytes <= SIZE_MAX / 2 && !__builtin_add_overflow(receive_bytes, Bounced(bytes), &end);
      if (!readable)
        return broken(InternalError("rank " + std::to_string(calls[i].peer) +
                                    " sent no buffer record this rank can read"),
                      "exchanging the buffers: ");
      if (g.mode == kBytes) {
        received_at[i] = receive_bytes;
        received_bytes[i] = bytes;
        receive_bytes = end;
      }
    }
    char* received = nullptr;
    if (receive_bytes > 0) {
      auto b = DeviceScratch(comm, rt, receive_bytes, ScratchUse::kReceiveBounce);
      if (!b.ok()) return broken(b.status(), "receiving a send's bytes: ");
      received = static_cast<char*>(*b);
      for (size_t i = 0; i < calls.size(); ++i)
        if (!calls[i].send && got[i].mode == kBytes)
          from.push_back({received + received_at[i], calls[i].peer, received_bytes[i]});
    }
    if (!to.empty() || !from.empty())
      if (Status st = Exchange(*view, to, from); !st.ok())
        return broken(st, "exchanging a send's bytes: ");
    // Each receive: the sender's call must match, and a pulled allocation be mapped here.
    Status st;
    std::vector<std::vector<PeerBufferRecord>> noted(static_cast<size_t>(nranks));
    std::vector<int32_t> pids(static_cast<size_t>(nranks), 0);
    for (size_t i = 0; i < calls.size() && st.ok(); ++i) {
      const P2pCall& c = calls[i];
      if (c.send) continue;
      const SendRecord& g = got[i];
      if (g.count != c.count || g.type != static_cast<int32_t>(c.type))
        st = InvalidUsage("mismatch with rank " + std::to_string(c.peer) + ": it sends count " +
                          std::to_string(g.count) + " of " + TypeText(g.type) +
                          ", this rank receives count " + std::to_string(c.count) + " of " +
                          TypeText(static_cast<int32_t>(c.type)) +
                          "; a send and its receive must have the same count and type");
      else if (g.mode == kPull && c.peer != rank) {
        noted[static_cast<size_t>(c.peer)].push_back(g.buffer);
        pids[static_cast<size_t>(c.peer)] = g.pid;
      }
    }
    if (st.ok() && state->cache->note(noted, pids)) {
      st = state->cache->mapNew();
      state->cache->settle(st.ok());
    }
    for (size_t i = 0, k = 0; i < calls.size() && st.ok(); ++i) {
      const P2pCall& c = calls[i];
      if (c.send) continue;
      const SendRecord& g = got[i];
      void* src = nullptr;
      if (g.mode == kBytes)
        src = received + received_at[i];
      else if (c.peer == rank)
        src = reinterpret_cast<void*>(g.address);  // a send to itself
      else
        src = state->cache->where(c.peer, g.buffer, g.pid, nullptr);
      if (!src) st = InternalError("rank " + std::to_string(c.peer) + "'s buffer is not mapped");
      tables[k]->src[0] = src;
      tables[k]->dst[0] = c.buff;
      ++k;
    }
    if (st.ok()) return st;  // published by the agent's release of `go`
    // This rank's receives cannot run: its senders still wait for an answer, told why; and its
    // own sends' answers are taken, so that the view's messages stay paired.
    Answer no;
    std::snprintf(no.reason, sizeof(no.reason), "%s", st.message().c_str());
    Status answered = Answers(*view, calls, no);
    return answered.ok() ? st : st.prepend(answered.message() + "; ");
  };
  work->finish = [calls, state]() -> Status {
    Answer yes;
    yes.ok = 1;
    return Answers(state->view, calls, yes);
  };
  // A submit that failed after its kernels were queued (told to skip, but maybe yet to run) keeps
  // its tables out of use for good, as an abort does; one refused before, or a call whose kernels
  // the agent saw end, gives them back (StreamAgent's `released`).
  work->released = [&pool, tables](bool ended) {
    if (!ended) return;  // a kernel may still read them: never reused
    for (device::PeerPointers* t : tables) pool.release(t);
  };
  g_jobs.fetch_add(1, std::memory_order_relaxed);
  if (bounce) g_bounced.fetch_add(1, std::memory_order_relaxed);
  *result = SubmitDeviceWork(rt, comm, stream, what, std::move(buffers), std::move(work));
  return true;
}

void DropP2pDevice(ncclComm_t comm, bool keep_mappings) {
  std::shared_ptr<P2pState> state;
  {
    AllStates& all = States();
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = all.by_comm.find(comm);
    if (it == all.by_comm.end()) return;
    state = std::move(it->second);
    all.by_comm.erase(it);
  }
  // The agent has stopped: nothing else uses them.
  if (keep_mappings) state->cache->leak();
  if (state->view) (void)braidCommDestroy(state->view);
}

size_t P2pHandshakeBytesForTesting() {
  return sizeof(SendRecord);
}

uint64_t P2pDeviceJobs() {
  return g_jobs.load(std::memory_order_relaxed);
}

uint64_t P2pBouncedJobs() {
  return g_bounced.load(std::memory_order_relaxed);
}

}  // namespace braid::nccl
