// torch.distributed's collectives on one braid communicator, independent of torch's
// ProcessGroup class (process_group_braid.h adapts them to torch 1.13's ProcessGroup; a later
// torch's Backend class is another thin adapter). Every call checks its tensors first (a bad
// tensor raises before anything is issued, on the rank that passed it), issues braid's
// non-blocking calls under the Completer's issue lock and returns a BraidWork that the Completer
// completes. A call whose largest buffer is at most BRAID_TORCH_BLOCKING_BYTES (default 256 KiB)
// runs as braid's blocking call instead and returns a completed Work: on one host small blocking
// calls run on braid's shared-memory board on the calling thread, several times faster than a
// round trip through braid's engine and its progress thread when ranks outnumber cores (the
// choice depends on the size only, so every rank makes the same call form, as braid requires;
// the setting must be the same on every rank). Inside a coalescing block calls are never
// blocking. Collectives braid has (all-reduce, all-gather, reduce-scatter, broadcast, reduce,
// all-to-all of equal blocks, barrier, send, receive) map to one call each; gather, scatter and
// all-to-all with uneven splits are a braid group of sends and receives, which braid runs
// without deadlock in any order. Non-contiguous tensors are staged in contiguous buffers.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "braid/braid.h"
#include "braid_work.h"
#include "completer.h"
#include "tensor_args.h"

namespace braid_torch {

class Collectives {
 public:
  using WorkPtr = c10::intrusive_ptr<BraidWork>;
  using Ms = std::chrono::milliseconds;

  // Takes `comm` (destroyed with this object, after its Works complete). `completer` belongs to
  // comm's root communicator, shared with the root's other views.
  // `blocking_bytes`: BRAID_TORCH_BLOCKING_BYTES (BlockingBytesFromEnv).
  Collectives(braidComm_t comm, std::shared_ptr<Completer> completer, size_t blocking_bytes);
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  braidComm_t comm() const { return comm_; }
  const std::shared_ptr<Completer>& completer() const { return completer_; }
  size_t blockingBytes() const { return blocking_bytes_; }

  // `timeout` is the default of the Work's wait() (kNoTimeout: braid's own deadline).
  WorkPtr broadcast(at::Tensor& t, int root, Ms timeout);
  WorkPtr allreduce(at::Tensor& t, const c10d::ReduceOp& op, Ms timeout);
  WorkPtr allreduceCoalesced(std::vector<at::Tensor>& ts, const c10d::ReduceOp& op, Ms timeout);
  WorkPtr reduce(at::Tensor& t, const c10d::ReduceOp& op, int root, Ms timeout);
  WorkPtr allgather(std::vector<at::Tensor>& outputs, const at::Tensor& input, Ms timeout);
  WorkPtr allgatherBase(at::Tensor& output, const at::Tensor& input, Ms timeout);
  WorkPtr allgatherCoalesced(std::vector<std::vector<at::Tensor>>& outputs,
                             std::vector<at::Tensor>& inputs, Ms timeout);
  // `outputs`: the root's list of size() tensors (empty elsewhere).
  WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root, Ms timeout);
  // `inputs`: the root's list of size() tensors (empty elsewhere).
  WorkPtr scatter(at::Tensor& output, std::vector<at::Tensor>& inputs, int root, Ms timeout);
  WorkPtr reduceScatter(at::Tensor& output, std::vector<at::Tensor>& inputs,
                        const c10d::ReduceOp& op, Ms timeout);
  WorkPtr reduceScatterBase(at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op,
                            Ms timeout);
  // Empty split lists: equal blocks. Splits count rows of dimension 0.
  WorkPtr alltoallBase(at::Tensor& output, const at::Tensor& input,
                       const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits, Ms timeout);
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, Ms timeout);
  WorkPtr send(const at::Tensor& t, int peer, int tag);
  WorkPtr recv(at::Tensor& t, int peer, int tag);
  WorkPtr barrier(Ms timeout);

  // torch's coalescing manager (batch_isend_irecv): the calls in between form one braid group,
  // issued at endCoalescing, so any pattern of matching sends and receives completes.
  void startCoalescing();
  void endCoalescing();

 private:
  WorkPtr make(c10d::OpType type, const char* name, Ms timeout, int source_rank = -1) const;
  // Runs `body` (which issues braid calls and records their requests on the Work) under the
  // issue lock and hands the Work to the Completer. When `body` throws after issuing, the Work
  // is still handed over (so braid's buffers live until its requests end) and fails.
  template <typename Body>
  WorkPtr issue(WorkPtr work, Body&& body);
  int checkPeer(int peer, const char* what) const;
  // Whether a call whose largest buffer is `blocks` x the payload runs as a blocking call.
  bool blocking(const Payload& p, const BraidWork& w, int blocks = 1) const;

  braidComm_t comm_;
  int rank_ = 0;
  int size_ = 0;
  std::shared_ptr<Completer> completer_;
  const size_t blocking_bytes_;
  // Works issued inside startCoalescing .. endCoalescing by the thread that started it (braid's
  // groups are per thread): their requests are filled at braidGroupEnd, so the Completer gets
  // them only then. Guarded by the issue lock.
  bool coalescing_ = false;
  std::thread::id coalescing_thread_;
  std::vector<WorkPtr> coalesced_;
};

}  // namespace braid_torch
