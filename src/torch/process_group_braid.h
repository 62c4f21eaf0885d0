// braid as a torch 1.13 ProcessGroup: an adapter that unpacks torch's option structs and tensor
// lists and forwards to Collectives (collectives.h), where the work is done. Created by
// python/braid/torch.py, which registers the backend "braid" with torch.distributed:
// - the default group (init_process_group) rendezvouses through torch's store: rank 0 creates
//   braid's unique id (braidGetUniqueId) and sets it in the store, the others get it there, so
//   torchrun or init_method env://, tcp://, file:// need nothing else;
// - a sub-group (new_group), which torch constructs on its members only, is a view of the
//   default group's communicator made by those members alone (braidCommSplitRanks): no socket,
//   no thread. Without a braid default group it is a communicator of its own, met through the
//   sub-group's store.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives.h"

namespace braid_torch {

class ProcessGroupBraid : public c10d::ProcessGroup {
 public:
  // A communicator of `size` ranks met through `store`; `timeout` becomes braid's operation
  // deadline unless BRAID_TIMEOUT is set (then that wins).
  static c10::intrusive_ptr<ProcessGroupBraid> Create(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size,
                                                      std::chrono::milliseconds timeout);
  // A view of `parent` holding `ranks` (the parent's ranks, in the sub-group's order); made by
  // those ranks only. `name` is torch's group name (the same on every member), which tells
  // views of the same ranks apart.
  static c10::intrusive_ptr<ProcessGroupBraid> CreateView(
      const c10::intrusive_ptr<ProcessGroupBraid>& parent, const std::vector<int64_t>& ranks,
      const std::string& name);

  // `timeout`: the group's (monitoredBarrier's default).
  ProcessGroupBraid(std::unique_ptr<Collectives> collectives, std::chrono::milliseconds timeout);
  ~ProcessGroupBraid() override;

  const std::string getBackendName() const override { return "braid"; }
  braidComm_t comm() const { return collectives_->comm(); }
  // braidCommDescribe: "rank 0/4 host h1 pid 42 transports shm:3 ...".
  std::string describe() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // A barrier whose wait fails after `opts.timeout` (else the group's), with braid's message
  // naming the rank that did not arrive. (torch 1.13's dist.monitored_barrier only calls it on
  // gloo groups; pg.monitored_barrier reaches it.)
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  std::unique_ptr<Collectives> collectives_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace braid_torch
