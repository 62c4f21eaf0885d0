// C API: collectives and point-to-point calls. Every argument is checked here, before anything
// is queued, so bad input fails on the calling rank with a clear message and loses nothing.
#include <cstring>
#include <new>

#include "algorithms/codec.h"
#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/runtime/group.h"
#include "core/runtime/quant_config.h"

using namespace braid;

namespace {

struct Call {
  CollKind kind;
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  braidDataType_t datatype;
  braidRedOp_t op;                            // ignored by non-reducing collectives
  int root;                                   // broadcast, reduce
  const braidQuantConfig_t* quant = nullptr;  // the quantized collectives
};

bool Reduces(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduceScatter || k == CollKind::kReduce;
}

bool Overlap(const void* a, uint64_t alen, const void* b, uint64_t blen) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return alen && blen && x < y + blen && y < x + alen;
}

// Validates `c` against `comm` and fills the engine's description of it.
Status Describe(const braidComm& comm, const Call& c, OpDesc* d) {
  const char* name = CollKindName(c.kind);
  auto bad = [&](const std::string& m) { return InvalidArgument(std::string(name) + ": " + m); };
  if (!IsValidDataType(c.datatype))
    return bad("unknown datatype " + std::to_string(c.datatype) + " (valid: 0.." +
               std::to_string(braidNumTypes - 1) + ")");
  d->kind = c.kind;
  d->dtype = static_cast<DataType>(c.datatype);
  d->user_op = c.op;
  d->sendbuf = c.sendbuf;
  d->recvbuf = c.recvbuf;
  d->count = c.count;
  d->root = -1;
  const int n = comm.nranks(), rank = comm.rank();
  if (c.quant) {
    const braidQuantConfig_t& q = *c.quant;
    quant::BlockFormat format;
    BRAID_RETURN_IF_ERROR(ParseQuantConfig(q, name, &format));
    const CodecId id = q.bits == 8 ? (q.symmetric ? CodecId::kInt8 : CodecId::kInt8Asym)
                                   : (q.symmetric ? CodecId::kInt4 : CodecId::kInt4Asym);
    d->codec = Codec(id, static_cast<uint32_t>(q.blockSize));
    if (!CodecSupports(d->codec, d->dtype))
      return bad(std::string("quantized collectives take float32, float16 or bfloat16, not ") +
                 DataTypeName(d->dtype));
    if (c.kind == CollKind::kReduceScatter && c.op != braidSum && c.op != braidAvg)
      return bad(
          "a quantized reduce-scatter sums: op must be braidSum or braidAvg (AVG divides "
          "the sum by the number of ranks)");
  }
  if (Reduces(c.kind)) {
    int op = static_cast<int>(c.op);
    if (op >= 0 && op < braidNumOps) {
      d->avg = op == braidAvg;
      d->base_op = d->avg ? ReduceOp::kSum : static_cast<ReduceOp>(op);
    } else {
      PreMulOp p;
      if (op < 0 || !comm.findPreMulOp(op, &p))
        return bad("unknown reduction op " + std::to_string(op) +
                   " (built-in ops are 0..4; others come from braidRedOpCreatePreMulSum on this "
                   "communicator)");
      if (p.dtype != d->dtype)
        return bad(std::string("pre-multiplied sum was created for ") + DataTypeName(p.dtype) +
                   " but the call uses " + DataTypeName(d->dtype));
      d->premul = true;
      d->base_op = ReduceOp::kSum;
      std::memcpy(d->scalar, p.scalar, sizeof(p.scalar));
    }
  }
  if (c.kind == CollKind::kBroadcast || c.kind == CollKind::kReduce) {
    if (c.root < 0 || c.root >= n)
      return bad("root " + std::to_string(c.root) + " is outside [0, " + std::to_string(n) + ")");
    d->root = c.root;
  }
  // Sizes: the largest buffer of the call must fit in 64 bits (and in the address space).
  const uint64_t es = DataTypeSize(d->dtype);
  const bool spread = c.kind == CollKind::kAllGather || c.kind == CollKind::kReduceScatter ||
                      c.kind == CollKind::kAllToAll;
  uint64_t bytes = 0, total = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(c.count), es, &bytes) ||
      __builtin_mul_overflow(bytes, spread ? static_cast<uint64_t>(n) : 1, &total) ||
      total > (uint64_t{1} << 56))
    return bad("count " + std::to_string(c.count) + " of " + DataTypeName(d->dtype) +
               " overflows the buffer size");
  if (c.count == 0) return Status::Ok();

  // Which buffers this rank reads and writes.
  bool reads_send = true, writes_recv = true;
  if (c.kind == CollKind::kBroadcast) reads_send = rank == c.root;
  if (c.kind == CollKind::kReduce) writes_recv = rank == c.root;
  if (reads_send && !c.sendbuf) return bad("sendbuff is NULL");
  if (writes_recv && !c.recvbuf) return bad("recvbuff is NULL");

  // The per-rank block is `bytes`; the collectives with one block per rank span `total`.
  const uint64_t send_bytes =
      c.kind == CollKind::kReduceScatter || c.kind == CollKind::kAllToAll ? total : bytes;
  const uint64_t recv_bytes =
      c.kind == CollKind::kAllGather || c.kind == CollKind::kAllToAll ? total : bytes;
  // In place per braid.h's conventions; any other overlap is an error (it would corrupt data).
  const auto* s = static_cast<const std::byte*>(c.sendbuf);
  auto* r = static_cast<std::byte*>(c.recvbuf);
  switch (c.kind) {
    case CollKind::kAllGather:
      d->in_place = s && r && s == r + rank * bytes;
      break;
    case CollKind::kReduceScatter:
      d->in_place = s && r && r == s + rank * bytes;
      break;
    case CollKind::kAllToAll:
      if (s && s == r) return bad("in-place all-to-all is not supported: use separate buffers");
      break;
    default:
      d->in_place = s && s == r;
      break;
  }
  if (reads_send && writes_recv && !d->in_place && Overlap(s, send_bytes, r, recv_bytes))
    return bad(
        "sendbuff and recvbuff overlap without being in place (see braid.h for the in-place "
        "forms)");
  if (c.kind == CollKind::kBroadcast && rank != c.root) d->in_place = false;
  if (c.kind == CollKind::kReduce && rank != c.root) d->in_place = false;
  return Status::Ok();
}

braidResult_t CollectiveUnguarded(const Call& c, braidComm_t comm, braidRequest_t* request);

// No exception crosses the C API (DESIGN.md 4): an allocation failure is a system error.
braidResult_t Collective(const Call& c, braidComm_t comm, braidRequest_t* request) {
  try {
    return CollectiveUnguarded(c, comm, request);
  } catch (const std::bad_alloc&) {
    return Fail(SystemError(std::string(CollKindName(c.kind)) +
                            ": out of memory while preparing the call"));
  }
}

braidResult_t CollectiveUnguarded(const Call& c, braidComm_t comm, braidRequest_t* request) {
  auto ref = UsableComm(comm);
  if (!ref.ok())
    return Fail(Status(ref.status()).prepend(std::string(CollKindName(c.kind)) + ": "));
  braidComm* raw = ref->get();
  if (request) *request = nullptr;
  if (raw->asyncErrorCode() != braidSuccess) {
    Status st = raw->asyncError();
    return Fail(
        raw, st.prepend(std::string(CollKindName(c.kind)) + ": the communicator failed earlier: "));
  }
  OpDesc d;
  Status st = Describe(*raw, c, &d);
  if (!st.ok()) return Fail(raw, st.prepend(raw->where() + ": "));
  if (c.count == 0 && c.kind != CollKind::kBarrier) {  // a no-op, like NCCL's
    if (request) *request = CompletedRequest();
    return braidSuccess;
  }
  if (!request && InGroup()) {
    GroupAddBlockingCollective(std::move(*ref), std::move(d));
    return braidSuccess;
  }
  // Blocking calls on one host's board, on this thread while the engine is idle
  // (Engine::runBoardCalls); the others, and these when the engine is busy, go to the engine.
  if (!request) {
    const OpDesc* call = &d;
    if (raw->runBoardCalls(std::span<const OpDesc* const>(&call, 1), &st))
      return st.ok() ? braidSuccess : Fail(raw, st);
  }
  return RunOperation(*ref, std::move(d), request);
}

braidResult_t PointToPoint(bool is_send, void* buf, size_t count, braidDataType_t datatype,
                           int peer, braidComm_t comm, braidRequest_t* request) {
  const char* name = is_send ? "send" : "recv";
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(Status(ref.status()).prepend(std::string(name) + ": "));
  braidComm* raw = ref->get();
  if (request) *request = nullptr;
  auto bad = [&](const std::string& m) {
    return Fail(raw, InvalidArgument(raw->where() + ": " + name + ": " + m));
  };
  if (!IsValidDataType(datatype)) return bad("unknown datatype " + std::to_string(datatype));
  if (peer < 0 || peer >= raw->nranks())
    return bad("peer " + std::to_string(peer) + " is outside [0, " + std::to_string(raw->nranks()) +
               ")");
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count),
                             DataTypeSize(static_cast<DataType>(datatype)), &bytes) ||
      bytes > (uint64_t{1} << 56))
    return bad("count " + std::to_string(count) + " overflows the buffer size");
  if (count > 0 && !buf) return bad("buffer is NULL");
  if (raw->asyncErrorCode() != braidSuccess) {
    Status st = raw->asyncError();
    return Fail(raw, st.prepend(std::string(name) + ": the communicator failed earlier: "));
  }
  P2PCall call{is_send, buf, count, static_cast<DataType>(datatype), peer};
  if (count == 0) {
    if (request) *request = CompletedRequest();
    return braidSuccess;
  }
  if (InGroup()) {
    braidRequest* r = request ? new braidRequest{} : nullptr;
    GroupAddP2P(*ref, call, r);
    if (request) *request = r;
    return braidSuccess;
  }
  if (peer == raw->rank())
    return Fail(raw, InvalidUsage(
                         raw->where() + ": " + name +
                         " to/from self outside a group would never complete: put the send and the "
                         "receive between braidGroupStart and braidGroupEnd"));
  OpDesc d;
  d.kind = CollKind::kSendRecv;
  d.dtype = DataType::kUint8;
  d.p2p.push_back(call);
  return RunOperation(*ref, std::make_shared<Operation>(std::move(d)), request);
}

}  // namespace

extern "C" {

braidResult_t braidAllReduce(const void* s, void* r, size_t count, braidDataType_t t,
                             braidRedOp_t op, braidComm_t comm) {
  return Collective({CollKind::kAllReduce, s, r, count, t, op, -1}, comm, nullptr);
}
braidResult_t braidReduceScatter(const void* s, void* r, size_t count, braidDataType_t t,
                                 braidRedOp_t op, braidComm_t comm) {
  return Collective({CollKind::kReduceScatter, s, r, count, t, op, -1}, comm, nullptr);
}
braidResult_t braidAllGather(const void* s, void* r, size_t count, braidDataType_t t,
                             braidComm_t comm) {
  return Collective({CollKind::kAllGather, s, r, count, t, braidSum, -1}, comm, nullptr);
}
braidResult_t braidBroadcast(const void* s, void* r, size_t count, braidDataType_t t, int root,
                             braidComm_t comm) {
  return Collective({CollKind::kBroadcast, s, r, count, t, braidSum, root}, comm, nullptr);
}
braidResult_t braidReduce(const void* s, void* r, size_t count, braidDataType_t t, braidRedOp_t op,
                          int root, braidComm_t comm) {
  return Collective({CollKind::kReduce, s, r, count, t, op, root}, comm, nullptr);
}
braidResult_t braidAllToAll(const void* s, void* r, size_t count, braidDataType_t t,
                            braidComm_t comm) {
  return Collective({CollKind::kAllToAll, s, r, count, t, braidSum, -1}, comm, nullptr);
}
braidResult_t braidAllGatherQuantized(const void* s, void* r, size_t count, braidDataType_t t,
                                      const braidQuantConfig_t* quant, braidComm_t comm) {
  if (!quant) return Fail(InvalidArgument("braidAllGatherQuantized: quant is NULL"));
  return Collective({CollKind::kAllGather, s, r, count, t, braidSum, -1, quant}, comm, nullptr);
}
braidResult_t braidReduceScatterQuantized(const void* s, void* r, size_t count, braidDataType_t t,
                                          braidRedOp_t op, const braidQuantConfig_t* quant,
                                          braidComm_t comm) {
  if (!quant) return Fail(InvalidArgument("braidReduceScatterQuantized: quant is NULL"));
  return Collective({CollKind::kReduceScatter, s, r, count, t, op, -1, quant}, comm, nullptr);
}
braidResult_t braidIallGatherQuantized(const void* s, void* r, size_t count, braidDataType_t t,
                                       const braidQuantConfig_t* quant, braidComm_t comm,
                                       braidRequest_t* req) {
  if (!quant) return Fail(InvalidArgument("braidIallGatherQuantized: quant is NULL"));
  if (!req) return Fail(InvalidArgument("braidIallGatherQuantized: request is NULL"));
  return Collective({CollKind::kAllGather, s, r, count, t, braidSum, -1, quant}, comm, req);
}
braidResult_t braidIreduceScatterQuantized(const void* s, void* r, size_t count, braidDataType_t t,
                                           braidRedOp_t op, const braidQuantConfig_t* quant,
                                           braidComm_t comm, braidRequest_t* req) {
  if (!quant) return Fail(InvalidArgument("braidIreduceScatterQuantized: quant is NULL"));
  if (!req) return Fail(InvalidArgument("braidIreduceScatterQuantized: request is NULL"));
  return Collective({CollKind::kReduceScatter, s, r, count, t, op, -1, quant}, comm, req);
}
braidResult_t braidBarrier(braidComm_t comm) {
  return Collective({CollKind::kBarrier, nullptr, nullptr, 0, braidUint8, braidSum, -1}, comm,
                    nullptr);
}
braidResult_t braidSend(const void* buf, size_t count, braidDataType_t t, int peer,
                        braidComm_t comm) {
  return PointToPoint(true, const_cast<void*>(buf), count, t, peer, comm, nullptr);
}
braidResult_t braidRecv(void* buf, size_t count, braidDataType_t t, int peer, braidComm_t comm) {
  return PointToPoint(false, buf, count, t, peer, comm, nullptr);
}

braidResult_t braidIallReduce(const void* s, void* r, size_t count, braidDataType_t t,
                              braidRedOp_t op, braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIallReduce: request is NULL"));
  return Collective({CollKind::kAllReduce, s, r, count, t, op, -1}, comm, req);
}
braidResult_t braidIreduceScatter(const void* s, void* r, size_t count, braidDataType_t t,
                                  braidRedOp_t op, braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIreduceScatter: request is NULL"));
  return Collective({CollKind::kReduceScatter, s, r, count, t, op, -1}, comm, req);
}
braidResult_t braidIallGather(const void* s, void* r, size_t count, braidDataType_t t,
                              braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIallGather: request is NULL"));
  return Collective({CollKind::kAllGather, s, r, count, t, braidSum, -1}, comm, req);
}
braidResult_t braidIbroadcast(const void* s, void* r, size_t count, braidDataType_t t, int root,
                              braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIbroadcast: request is NULL"));
  return Collective({CollKind::kBroadcast, s, r, count, t, braidSum, root}, comm, req);
}
braidResult_t braidIreduce(const void* s, void* r, size_t count, braidDataType_t t, braidRedOp_t op,
                           int root, braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIreduce: request is NULL"));
  return Collective({CollKind::kReduce, s, r, count, t, op, root}, comm, req);
}
braidResult_t braidIallToAll(const void* s, void* r, size_t count, braidDataType_t t,
                             braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIallToAll: request is NULL"));
  return Collective({CollKind::kAllToAll, s, r, count, t, braidSum, -1}, comm, req);
}
braidResult_t braidIbarrier(braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIbarrier: request is NULL"));
  return Collective({CollKind::kBarrier, nullptr, nullptr, 0, braidUint8, braidSum, -1}, comm, req);
}
braidResult_t braidIsend(const void* buf, size_t count, braidDataType_t t, int peer,
                         braidComm_t comm, braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIsend: request is NULL"));
  return PointToPoint(true, const_cast<void*>(buf), count, t, peer, comm, req);
}
braidResult_t braidIrecv(void* buf, size_t count, braidDataType_t t, int peer, braidComm_t comm,
                         braidRequest_t* req) {
  if (!req) return Fail(InvalidArgument("braidIrecv: request is NULL"));
  return PointToPoint(false, buf, count, t, peer, comm, req);
}

}  // extern "C"
