#include "collectives.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <string>

#include "tensor_args.h"

namespace braid_torch {

namespace {

using c10d::OpType;

// Throws the braid call's failure with braid's message (this thread's last error).
void Check(braidResult_t rc, const char* what, const char* call) {
  TORCH_CHECK(rc == braidSuccess, "braid: ", what, ": ", call, " failed (", braidGetErrorString(rc),
              "): ", braidGetLastError(nullptr));
}

// A tensor braid writes: itself when contiguous, else a contiguous stage (holding the tensor's
// values when `read_too`) that CopyBack copies into the tensor once the call succeeded.
struct Staged {
  at::Tensor buf;  // what braid writes
  at::Tensor dst;  // the caller's tensor, when staged
};

Staged Stage(BraidWork& w, const at::Tensor& t, bool read_too) {
  if (t.is_contiguous()) {
    w.keep(t);
    return {t, at::Tensor()};
  }
  at::Tensor buf = read_too ? t.contiguous() : at::empty(t.sizes(), t.options());
  w.keep(buf);
  return {buf, t};
}

void CopyBack(BraidWork& w, const Staged& s) {
  if (!s.dst.defined()) return;
  w.onSuccess([dst = s.dst, buf = s.buf]() mutable { dst.copy_(buf); });
}

// A tensor braid reads: itself when contiguous, else a contiguous copy made now.
at::Tensor Readable(BraidWork& w, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  w.keep(c);
  return c;
}

void CheckLike(const at::Tensor& t, const at::Tensor& like, const char* what, const char* role) {
  CheckHostTensor(t, what);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "braid: ", what, ": the ", role, " is ",
              DtypeName(t.scalar_type()), ", the input ", DtypeName(like.scalar_type()));
  TORCH_CHECK(t.numel() == like.numel(), "braid: ", what, ": the ", role, " holds ", t.numel(),
              " elements, the input ", like.numel());
}

// The PREMUL_SUM operator a Reduction created is destroyed once its call is issued.
struct ReductionGuard {
  Reduction r;
  braidComm_t comm;
  ~ReductionGuard() {
    if (r.premul) braidRedOpDestroy(r.op, comm);
  }
};

void AddParity(BraidWork& w, const Reduction& r, const at::Tensor& buf) {
  if (r.parity) w.onSuccess([buf]() mutable { buf.view(at::kByte).bitwise_and_(1); });
}

// A braid group that is ended on every path: a group left open would swallow later calls.
class Group {
 public:
  explicit Group(const char* what) : what_(what) {
    Check(braidGroupStart(), what, "braidGroupStart");
  }
  void end() {
    open_ = false;
    Check(braidGroupEnd(), what_, "braidGroupEnd");
  }
  ~Group() {
    if (open_) braidGroupEnd();
  }

 private:
  const char* what_;
  bool open_ = true;
};

// A send or receive of a whole contiguous buffer inside a group.
void Isend(BraidWork& w, const at::Tensor& t, int peer, braidComm_t comm, const char* what) {
  if (t.numel() == 0) return;
  const Payload p = MovePayload(t);
  braidRequest_t req = nullptr;
  Check(braidIsend(p.ptr, p.count, p.type, peer, comm, &req), what, "braidIsend");
  w.addRequest(req);
}

void Irecv(BraidWork& w, const at::Tensor& t, int peer, braidComm_t comm, const char* what) {
  if (t.numel() == 0) return;
  const Payload p = MovePayload(t);
  braidRequest_t req = nullptr;
  Check(braidIrecv(p.ptr, p.count, p.type, peer, comm, &req), what, "braidIrecv");
  w.addRequest(req);
}

}  // namespace

Collectives::Collectives(braidComm_t comm, std::shared_ptr<Completer> completer,
                         size_t blocking_bytes)
    : comm_(comm), completer_(std::move(completer)), blocking_bytes_(blocking_bytes) {
  braidCommUserRank(comm_, &rank_);
  braidCommCount(comm_, &size_);
}

Collectives::~Collectives() {
  // Every Work issued here holds buffers braid may still write: let them complete (each within
  // braid's deadline), then release the communicator.
  completer_->drain();
  braidCommDestroy(comm_);
}

Collectives::WorkPtr Collectives::make(OpType type, const char* name, Ms timeout,
                                       int source_rank) const {
  return c10::make_intrusive<BraidWork>(rank_, type, name, timeout, source_rank);
}

template <typename Body>
Collectives::WorkPtr Collectives::issue(WorkPtr work, Body&& body) {
  at::NoGradGuard no_grad;  // staging copies are not part of any autograd graph
  bool done_now = false;
  {
    std::lock_guard<std::mutex> lock(completer_->issueLock());
    const bool deferred = coalescing_ && std::this_thread::get_id() == coalescing_thread_;
    auto hand_over = [&] {
      if (deferred)
        coalesced_.push_back(work);
      else
        completer_->add(work);
    };
    try {
      body(*work);
    } catch (const c10::Error& e) {
      // Requests in flight (or recorded in an open group): their buffers must outlive them.
      if (work->hasRequests()) {
        work->failIssue(e.what_without_backtrace());
        hand_over();
      }
      throw;
    } catch (const std::exception& e) {
      if (work->hasRequests()) {
        work->failIssue(e.what());
        hand_over();
      }
      throw;
    }
    // Blocking calls (or nothing to send) are done already.
    done_now = !work->hasRequests() && !deferred;
    if (!done_now) hand_over();
  }
  // Outside the issue lock: completing runs the future's callbacks, which may issue calls (a
  // DDP communication hook chaining another all_reduce).
  if (done_now) work->complete();
  return work;
}

bool Collectives::blocking(const Payload& p, const BraidWork&, int blocks) const {
  if (coalescing_ && std::this_thread::get_id() == coalescing_thread_) return false;
  return blocking_bytes_ > 0 &&
         p.count * TypeBytes(p.type) * static_cast<size_t>(blocks) <= blocking_bytes_;
}

int Collectives::checkPeer(int peer, const char* what) const {
  TORCH_CHECK(peer >= 0 && peer < size_, "braid: ", what, ": rank ", peer,
              " is not in this group of ", size_, " ranks");
  return peer;
}

Collectives::WorkPtr Collectives::broadcast(at::Tensor& t, int root, Ms timeout) {
  CheckHostTensor(t, "broadcast");
  checkPeer(root, "broadcast");
  auto work = make(OpType::BROADCAST, "broadcast", timeout);
  work->setOutputs({t});
  return issue(work, [&](BraidWork& w) {
    const Staged s = Stage(w, t, rank_ == root);
    const Payload p = MovePayload(s.buf);
    braidRequest_t req = nullptr;
    if (blocking(p, w))
      Check(braidBroadcast(p.ptr, p.ptr, p.count, p.type, root, comm_), "broadcast",
            "braidBroadcast");
    else
      Check(braidIbroadcast(p.ptr, p.ptr, p.count, p.type, root, comm_, &req), "broadcast",
            "braidIbroadcast");
    w.addRequest(req);
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::allreduce(at::Tensor& t, const c10d::ReduceOp& op, Ms timeout) {
  CheckHostTensor(t, "allreduce");
  auto work = make(OpType::ALLREDUCE, "allreduce", timeout);
  work->setOutputs({t});
  return issue(work, [&](BraidWork& w) {
    ReductionGuard red{MapReduceOp(op, t.scalar_type(), comm_, "allreduce"), comm_};
    const Staged s = Stage(w, t, true);
    const Payload p = ReducePayload(s.buf, "allreduce");
    braidRequest_t req = nullptr;
    if (blocking(p, w))
      Check(braidAllReduce(p.ptr, p.ptr, p.count, p.type, red.r.op, comm_), "allreduce",
            "braidAllReduce");
    else
      Check(braidIallReduce(p.ptr, p.ptr, p.count, p.type, red.r.op, comm_, &req), "allreduce",
            "braidIallReduce");
    w.addRequest(req);
    AddParity(w, red.r, s.buf);
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::allreduceCoalesced(std::vector<at::Tensor>& ts,
                                                     const c10d::ReduceOp& op, Ms timeout) {
  TORCH_CHECK(!ts.empty(), "braid: allreduce_coalesced: no tensors");
  for (const auto& t : ts) {
    CheckHostTensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == ts[0].scalar_type(),
                "braid: allreduce_coalesced: the tensors must have one dtype, got ",
                DtypeName(ts[0].scalar_type()), " and ", DtypeName(t.scalar_type()));
  }
  auto work = make(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", timeout);
  work->setOutputs(ts);
  return issue(work, [&](BraidWork& w) {
    ReductionGuard red{MapReduceOp(op, ts[0].scalar_type(), comm_, "allreduce_coalesced"), comm_};
    // One call on the tensors laid end to end: one message per step instead of one per tensor.
    std::vector<at::Tensor> flat;
    for (const auto& t : ts) flat.push_back(t.reshape({-1}));
    at::Tensor buf = at::cat(flat);
    w.keep(buf);
    const Payload p = ReducePayload(buf, "allreduce_coalesced");
    braidRequest_t req = nullptr;
    if (blocking(p, w))
      Check(braidAllReduce(p.ptr, p.ptr, p.count, p.type, red.r.op, comm_), "allreduce_coalesced",
            "braidAllReduce");
    else
      Check(braidIallReduce(p.ptr, p.ptr, p.count, p.type, red.r.op, comm_, &req),
            "allreduce_coalesced", "braidIallReduce");
    w.addRequest(req);
    AddParity(w, red.r, buf);
    w.onSuccess([ts, buf]() mutable {
      int64_t off = 0;
      for (auto& t : ts) {
        t.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    });
  });
}

Collectives::WorkPtr Collectives::reduce(at::Tensor& t, const c10d::ReduceOp& op, int root,
                                         Ms timeout) {
  CheckHostTensor(t, "reduce");
  checkPeer(root, "reduce");
  auto work = make(OpType::REDUCE, "reduce", timeout);
  work->setOutputs({t});
  return issue(work, [&](BraidWork& w) {
    ReductionGuard red{MapReduceOp(op, t.scalar_type(), comm_, "reduce"), comm_};
    const Staged s = Stage(w, t, true);
    const Payload p = ReducePayload(s.buf, "reduce");
    braidRequest_t req = nullptr;
    // In place: braid writes the result on the root only, the others' tensors stay as they were.
    if (blocking(p, w))
      Check(braidReduce(p.ptr, p.ptr, p.count, p.type, red.r.op, root, comm_), "reduce",
            "braidReduce");
    else
      Check(braidIreduce(p.ptr, p.ptr, p.count, p.type, red.r.op, root, comm_, &req), "reduce",
            "braidIreduce");
    w.addRequest(req);
    if (rank_ == root) {
      AddParity(w, red.r, s.buf);
      CopyBack(w, s);
    }
  });
}

namespace {
// The outputs, when they are contiguous and laid end to end in one storage (out.chunk(n)): braid
// can write them as one buffer. Else nullptr.
void* Adjacent(const std::vector<at::Tensor>& outputs) {
  const at::Tensor& first = outputs[0];
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& o = outputs[i];
    if (!o.is_contiguous() || !o.is_alias_of(first) ||
        static_cast<char*>(o.data_ptr()) !=
            static_cast<char*>(first.data_ptr()) + i * first.nbytes())
      return nullptr;
  }
  return first.data_ptr();
}
}  // namespace

Collectives::WorkPtr Collectives::allgather(std::vector<at::Tensor>& outputs,
                                            const at::Tensor& input, Ms timeout) {
  CheckHostTensor(input, "allgather");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "braid: allgather: ", outputs.size(),
              " output tensors for a group of ", size_, " ranks");
  for (const auto& o : outputs) CheckLike(o, input, "allgather", "output");
  auto work = make(OpType::ALLGATHER, "allgather", timeout);
  work->setOutputs(outputs);
  return issue(work, [&](BraidWork& w) {
    at::Tensor in = Readable(w, input);
    const Payload p = MovePayload(in);
    void* out = Adjacent(outputs);
    at::Tensor flat;
    if (out) {
      for (const auto& o : outputs) w.keep(o);
    } else {
      flat = at::empty({size_ * input.numel()}, input.options());
      w.keep(flat);
      out = flat.data_ptr();
    }
    braidRequest_t req = nullptr;
    if (blocking(p, w, size_))
      Check(braidAllGather(p.ptr, out, p.count, p.type, comm_), "allgather", "braidAllGather");
    else
      Check(braidIallGather(p.ptr, out, p.count, p.type, comm_, &req), "allgather",
            "braidIallGather");
    w.addRequest(req);
    if (flat.defined())
      w.onSuccess([outputs, flat, n = input.numel()]() mutable {
        for (size_t i = 0; i < outputs.size(); ++i)
          outputs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(outputs[i].sizes()));
      });
  });
}

Collectives::WorkPtr Collectives::allgatherBase(at::Tensor& output, const at::Tensor& input,
                                                Ms timeout) {
  CheckHostTensor(input, "_allgather_base");
  CheckHostTensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid: _allgather_base: the output is ",
              DtypeName(output.scalar_type()), ", the input ", DtypeName(input.scalar_type()));
  TORCH_CHECK(output.numel() == size_ * input.numel(), "braid: _allgather_base: the output holds ",
              output.numel(), " elements; it must hold the group's ", size_, " x ", input.numel());
  auto work = make(OpType::_ALLGATHER_BASE, "_allgather_base", timeout);
  work->setOutputs({output});
  return issue(work, [&](BraidWork& w) {
    // In place (the input is this rank's block of the output) when both are contiguous: braid
    // sees sendbuff == recvbuff + rank * count, its in-place form.
    at::Tensor in = Readable(w, input);
    const Staged s = Stage(w, output, false);
    const Payload p = MovePayload(in);
    braidRequest_t req = nullptr;
    if (blocking(p, w, size_))
      Check(braidAllGather(p.ptr, s.buf.data_ptr(), p.count, p.type, comm_), "_allgather_base",
            "braidAllGather");
    else
      Check(braidIallGather(p.ptr, s.buf.data_ptr(), p.count, p.type, comm_, &req),
            "_allgather_base", "braidIallGather");
    w.addRequest(req);
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::allgatherCoalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs, Ms timeout) {
  // torch's layout (gloo's): outputs[r][k] receives rank r's input k.
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_,
              "braid: allgather_coalesced: ", outputs.size(), " output lists for a group of ",
              size_, " ranks");
  for (const auto& in : inputs) CheckHostTensor(in, "allgather_coalesced");
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(outputs[r].size() == inputs.size(), "braid: allgather_coalesced: output list ", r,
                " holds ", outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    for (size_t k = 0; k < inputs.size(); ++k)
      CheckLike(outputs[r][k], inputs[k], "allgather_coalesced", "output");
  }
  auto work = make(OpType::ALLGATHER_COALESCED, "allgather_coalesced", timeout);
  std::vector<at::Tensor> all;
  for (const auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  work->setOutputs(all);
  return issue(work, [&](BraidWork& w) {
    // One all-gather per input, in one group (braid runs a group's collectives in order).
    Group group("allgather_coalesced");
    for (size_t k = 0; k < inputs.size(); ++k) {
      at::Tensor in = Readable(w, inputs[k]);
      const Payload p = MovePayload(in);
      at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
      w.keep(flat);
      braidRequest_t req = nullptr;
      Check(braidIallGather(p.ptr, flat.data_ptr(), p.count, p.type, comm_, &req),
            "allgather_coalesced", "braidIallGather");
      w.addRequest(req);
      std::vector<at::Tensor> column;
      for (int r = 0; r < size_; ++r) column.push_back(outputs[r][k]);
      w.onSuccess([column, flat, n = in.numel()]() mutable {
        for (size_t r = 0; r < column.size(); ++r)
          column[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(column[r].sizes()));
      });
    }
    group.end();
  });
}

Collectives::WorkPtr Collectives::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                         int root, Ms timeout) {
  CheckHostTensor(input, "gather");
  checkPeer(root, "gather");
  if (rank_ == root) {
    TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "braid: gather: the root has ",
                outputs.size(), " output tensors for a group of ", size_, " ranks");
    for (const auto& o : outputs) CheckLike(o, input, "gather", "output");
  } else {
    TORCH_CHECK(outputs.empty(), "braid: gather: only the root (rank ", root,
                ") passes output tensors");
  }
  auto work = make(OpType::GATHER, "gather", timeout);
  work->setOutputs(outputs);
  return issue(work, [&](BraidWork& w) {
    at::Tensor in = Readable(w, input);
    // braid has no gather: the root receives every rank's block in one group.
    Group group("gather");
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        const Staged s = Stage(w, outputs[r], false);
        if (r == rank_)
          s.buf.view(in.sizes()).copy_(in);
        else
          Irecv(w, s.buf, r, comm_, "gather");
        CopyBack(w, s);
      }
    } else {
      Isend(w, in, root, comm_, "gather");
    }
    group.end();
  });
}

Collectives::WorkPtr Collectives::scatter(at::Tensor& output, std::vector<at::Tensor>& inputs,
                                          int root, Ms timeout) {
  CheckHostTensor(output, "scatter");
  checkPeer(root, "scatter");
  if (rank_ == root) {
    TORCH_CHECK(static_cast<int>(inputs.size()) == size_, "braid: scatter: the root has ",
                inputs.size(), " input tensors for a group of ", size_, " ranks");
    for (const auto& in : inputs) CheckLike(in, output, "scatter", "input");
  } else {
    TORCH_CHECK(inputs.empty(), "braid: scatter: only the root (rank ", root,
                ") passes input tensors");
  }
  auto work = make(OpType::SCATTER, "scatter", timeout);
  work->setOutputs({output});
  return issue(work, [&](BraidWork& w) {
    const Staged s = Stage(w, output, false);
    Group group("scatter");
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        at::Tensor in = Readable(w, inputs[r]);
        if (r == rank_)
          s.buf.copy_(in.view(s.buf.sizes()));
        else
          Isend(w, in, r, comm_, "scatter");
      }
    } else {
      Irecv(w, s.buf, root, comm_, "scatter");
    }
    group.end();
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::reduceScatter(at::Tensor& output, std::vector<at::Tensor>& inputs,
                                                const c10d::ReduceOp& op, Ms timeout) {
  CheckHostTensor(output, "reduce_scatter");
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_, "braid: reduce_scatter: ", inputs.size(),
              " input tensors for a group of ", size_, " ranks");
  for (const auto& in : inputs) CheckLike(in, output, "reduce_scatter", "input");
  auto work = make(OpType::REDUCE_SCATTER, "reduce_scatter", timeout);
  work->setOutputs({output});
  return issue(work, [&](BraidWork& w) {
    ReductionGuard red{MapReduceOp(op, output.scalar_type(), comm_, "reduce_scatter"), comm_};
    std::vector<at::Tensor> flat;
    for (const auto& in : inputs) flat.push_back(in.reshape({-1}));
    at::Tensor buf = at::cat(flat);
    w.keep(buf);
    const Staged s = Stage(w, output, false);
    const Payload in = ReducePayload(buf, "reduce_scatter");
    braidRequest_t req = nullptr;
    if (blocking(in, w))
      Check(braidReduceScatter(in.ptr, s.buf.data_ptr(), output.numel(), in.type, red.r.op, comm_),
            "reduce_scatter", "braidReduceScatter");
    else
      Check(braidIreduceScatter(in.ptr, s.buf.data_ptr(), output.numel(), in.type, red.r.op, comm_,
                                &req),
            "reduce_scatter", "braidIreduceScatter");
    w.addRequest(req);
    AddParity(w, red.r, s.buf);
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::reduceScatterBase(at::Tensor& output, const at::Tensor& input,
                                                    const c10d::ReduceOp& op, Ms timeout) {
  CheckHostTensor(input, "_reduce_scatter_base");
  CheckHostTensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "braid: _reduce_scatter_base: the output is ", DtypeName(output.scalar_type()),
              ", the input ", DtypeName(input.scalar_type()));
  TORCH_CHECK(input.numel() == size_ * output.numel(),
              "braid: _reduce_scatter_base: the input holds ", input.numel(),
              " elements; it must hold the group's ", size_, " x ", output.numel());
  auto work = make(OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", timeout);
  work->setOutputs({output});
  return issue(work, [&](BraidWork& w) {
    ReductionGuard red{MapReduceOp(op, output.scalar_type(), comm_, "_reduce_scatter_base"), comm_};
    at::Tensor in = Readable(w, input);
    const Staged s = Stage(w, output, false);
    const Payload p = ReducePayload(in, "_reduce_scatter_base");
    braidRequest_t req = nullptr;
    if (blocking(p, w))
      Check(braidReduceScatter(p.ptr, s.buf.data_ptr(), output.numel(), p.type, red.r.op, comm_),
            "_reduce_scatter_base", "braidReduceScatter");
    else
      Check(braidIreduceScatter(p.ptr, s.buf.data_ptr(), output.numel(), p.type, red.r.op, comm_,
                                &req),
            "_reduce_scatter_base", "braidIreduceScatter");
    w.addRequest(req);
    AddParity(w, red.r, s.buf);
    CopyBack(w, s);
  });
}

namespace {
// Offsets (in rows) of the blocks of `splits`, after checking them against `rows`.
std::vector<int64_t> SplitOffsets(const std::vector<int64_t>& splits, int64_t rows, int n,
                                  const char* role) {
  TORCH_CHECK(static_cast<int>(splits.size()) == n, "braid: alltoall_base: ", splits.size(), " ",
              role, " split sizes for a group of ", n, " ranks");
  std::vector<int64_t> off(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    TORCH_CHECK(splits[i] >= 0, "braid: alltoall_base: ", role, " split ", i, " is ", splits[i]);
    off[i + 1] = off[i] + splits[i];
  }
  TORCH_CHECK(off[n] == rows, "braid: alltoall_base: the ", role, " splits add up to ", off[n],
              " rows, the ", role, " has ", rows);
  return off;
}
}  // namespace

Collectives::WorkPtr Collectives::alltoallBase(at::Tensor& output, const at::Tensor& input,
                                               const std::vector<int64_t>& output_splits,
                                               const std::vector<int64_t>& input_splits,
                                               Ms timeout) {
  CheckHostTensor(input, "alltoall_base");
  CheckHostTensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid: alltoall_base: the output is ",
              DtypeName(output.scalar_type()), ", the input ", DtypeName(input.scalar_type()));
  auto work = make(OpType::ALLTOALL_BASE, "alltoall_base", timeout);
  work->setOutputs({output});
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK(input.numel() % size_ == 0 && output.numel() == input.numel(),
                "braid: alltoall_base: equal blocks need input and output of one size divisible "
                "by the group's ",
                size_, " ranks; got ", input.numel(), " and ", output.numel(), " elements");
    return issue(work, [&](BraidWork& w) {
      at::Tensor in = Readable(w, input);
      const Staged s = Stage(w, output, false);
      const Payload p = MovePayload(in);
      braidRequest_t req = nullptr;
      if (blocking(p, w))
        Check(braidAllToAll(p.ptr, s.buf.data_ptr(), p.count / size_, p.type, comm_),
              "alltoall_base", "braidAllToAll");
      else
        Check(braidIallToAll(p.ptr, s.buf.data_ptr(), p.count / size_, p.type, comm_, &req),
              "alltoall_base", "braidIallToAll");
      w.addRequest(req);
      CopyBack(w, s);
    });
  }
  TORCH_CHECK(input.dim() >= 1 && output.dim() >= 1,
              "braid: alltoall_base: split sizes need tensors of at least one dimension");
  const int64_t in_rows = input.size(0), out_rows = output.size(0);
  const std::vector<int64_t> in_off = SplitOffsets(
      input_splits.empty() ? std::vector<int64_t>(size_, in_rows / size_) : input_splits, in_rows,
      size_, "input");
  const std::vector<int64_t> out_off = SplitOffsets(
      output_splits.empty() ? std::vector<int64_t>(size_, out_rows / size_) : output_splits,
      out_rows, size_, "output");
  return issue(work, [&](BraidWork& w) {
    at::Tensor in = Readable(w, input);
    const Staged s = Stage(w, output, false);
    // braid has no all-to-all with uneven blocks: one group of sends and receives.
    Group group("alltoall_base");
    for (int r = 0; r < size_; ++r) {
      at::Tensor src = in.narrow(0, in_off[r], in_off[r + 1] - in_off[r]);
      at::Tensor dst = s.buf.narrow(0, out_off[r], out_off[r + 1] - out_off[r]);
      if (r == rank_) {
        TORCH_CHECK(src.numel() == dst.numel(), "braid: alltoall_base: this rank sends itself ",
                    src.size(0), " rows but receives ", dst.size(0));
        dst.copy_(src);
      } else {
        Isend(w, src, r, comm_, "alltoall_base");
        Irecv(w, dst, r, comm_, "alltoall_base");
      }
    }
    group.end();
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::alltoall(std::vector<at::Tensor>& outputs,
                                           std::vector<at::Tensor>& inputs, Ms timeout) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "braid: alltoall: ", inputs.size(), " inputs and ", outputs.size(),
              " outputs for a group of ", size_, " ranks");
  for (int r = 0; r < size_; ++r) {
    CheckHostTensor(inputs[r], "alltoall");
    CheckHostTensor(outputs[r], "alltoall");
    TORCH_CHECK(outputs[r].scalar_type() == inputs[r].scalar_type(), "braid: alltoall: output ", r,
                " is ", DtypeName(outputs[r].scalar_type()), ", input ", r, " ",
                DtypeName(inputs[r].scalar_type()));
  }
  TORCH_CHECK(outputs[rank_].numel() == inputs[rank_].numel(),
              "braid: alltoall: this rank sends "
              "itself ",
              inputs[rank_].numel(), " elements but receives ", outputs[rank_].numel());
  auto work = make(OpType::ALLTOALL, "alltoall", timeout);
  work->setOutputs(outputs);
  return issue(work, [&](BraidWork& w) {
    Group group("alltoall");
    for (int r = 0; r < size_; ++r) {
      at::Tensor in = Readable(w, inputs[r]);
      const Staged s = Stage(w, outputs[r], false);
      if (r == rank_) {
        s.buf.view(in.sizes()).copy_(in);
      } else {
        Isend(w, in, r, comm_, "alltoall");
        Irecv(w, s.buf, r, comm_, "alltoall");
      }
      CopyBack(w, s);
    }
    group.end();
  });
}

Collectives::WorkPtr Collectives::send(const at::Tensor& t, int peer, int tag) {
  CheckHostTensor(t, "send");
  checkPeer(peer, "send");
  TORCH_CHECK(tag == 0, "braid: send: tag ", tag,
              ": braid matches the messages between two ranks in the order they were sent and "
              "has no tags; use tag 0");
  auto work = make(OpType::SEND, "send", kNoTimeout);
  work->setOutputs({t});
  return issue(work, [&](BraidWork& w) {
    at::Tensor in = Readable(w, t);
    const Payload p = MovePayload(in);
    braidRequest_t req = nullptr;
    Check(braidIsend(p.ptr, p.count, p.type, peer, comm_, &req), "send", "braidIsend");
    w.addRequest(req);
  });
}

Collectives::WorkPtr Collectives::recv(at::Tensor& t, int peer, int tag) {
  CheckHostTensor(t, "recv");
  checkPeer(peer, "recv");
  TORCH_CHECK(tag == 0, "braid: recv: tag ", tag,
              ": braid matches the messages between two ranks in the order they were sent and "
              "has no tags; use tag 0");
  auto work = make(OpType::RECV, "recv", kNoTimeout, peer);
  work->setOutputs({t});
  return issue(work, [&](BraidWork& w) {
    const Staged s = Stage(w, t, false);
    const Payload p = MovePayload(s.buf);
    braidRequest_t req = nullptr;
    Check(braidIrecv(p.ptr, p.count, p.type, peer, comm_, &req), "recv", "braidIrecv");
    w.addRequest(req);
    CopyBack(w, s);
  });
}

Collectives::WorkPtr Collectives::barrier(Ms timeout) {
  auto work = make(OpType::BARRIER, "barrier", timeout);
  return issue(work, [&](BraidWork& w) {
    braidRequest_t req = nullptr;
    if (blocking(Payload{}, w))
      Check(braidBarrier(comm_), "barrier", "braidBarrier");
    else
      Check(braidIbarrier(comm_, &req), "barrier", "braidIbarrier");
    w.addRequest(req);
  });
}

void Collectives::startCoalescing() {
  std::lock_guard<std::mutex> lock(completer_->issueLock());
  TORCH_CHECK(!coalescing_, "braid: startCoalescing: already coalescing");
  Check(braidGroupStart(), "coalescing", "braidGroupStart");
  coalescing_ = true;
  coalescing_thread_ = std::this_thread::get_id();
}

void Collectives::endCoalescing() {
  std::lock_guard<std::mutex> lock(completer_->issueLock());
  TORCH_CHECK(coalescing_ && std::this_thread::get_id() == coalescing_thread_,
              "braid: endCoalescing without startCoalescing on this thread");
  coalescing_ = false;
  const braidResult_t rc = braidGroupEnd();
  std::string error;
  if (rc != braidSuccess)
    error = std::string("braid: coalesced calls: braidGroupEnd failed (") +
            braidGetErrorString(rc) + "): " + braidGetLastError(nullptr);
  for (auto& w : coalesced_) {
    if (!error.empty()) w->failIssue(error);
    completer_->add(w);
  }
  coalesced_.clear();
  TORCH_CHECK(error.empty(), error);
}

}  // namespace braid_torch
