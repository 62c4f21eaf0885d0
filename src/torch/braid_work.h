// A torch Work backed by braid's non-blocking requests (braid.h: braidTest, braidWait). A
// collective issues its braid calls, hands their requests to the Work together with the buffers
// braid reads and writes (kept alive until completion) and the steps that finish it (copy a
// staged output back into a non-contiguous tensor, ...), and passes it to the Completer
// (completer.h), which completes it: on the thread that waits for it in wait(), else on the
// Completer's thread; the future (get_future(), which DDP's communication hooks chain on) is
// marked done there. A failed request completes the Work with a RuntimeError carrying braid's
// message, which names the rank that failed.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace braid_torch {

class Completer;

class BraidWork : public c10d::Work {
 public:
  // `name` is the collective's ("allreduce"); `timeout` the default of wait() (kNoTimeout:
  // until braid completes it, within the communicator's deadline); `source_rank` the peer of a
  // receive (sourceRank()).
  BraidWork(int rank, c10d::OpType type, std::string name, std::chrono::milliseconds timeout,
            int source_rank = -1);
  ~BraidWork() override;

  // c10d::Work.
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // While the collective is issued, before the Completer sees the Work.
  void addRequest(braidRequest_t request) {
    if (request) requests_.push_back(request);  // NULL: a blocking call, done already
  }
  bool hasRequests() const { return !requests_.empty(); }
  void keep(const at::Tensor& t) { keep_.push_back(t); }
  void onSuccess(std::function<void()> step) { on_success_.push_back(std::move(step)); }
  void setOutputs(std::vector<at::Tensor> outputs) { outputs_ = std::move(outputs); }
  // An issue that failed part way: the requests already issued are still completed (their
  // buffers stay alive until then), and the Work fails with `message`.
  void failIssue(std::string message) { error_ = std::move(message); }
  const std::string& name() const { return name_; }
  // The Completer took it (from then on wait() may drive it there).
  void handedOver(std::weak_ptr<Completer> completer) {
    std::lock_guard<std::mutex> lock(mutex_);
    completer_ = std::move(completer);
    handed_ = true;
  }

  // The Completer's side (its thread only).
  // Tests every request without blocking; true when none is left in flight.
  bool poll();
  // Waits up to `slice_ms` on the first request still in flight.
  void waitSlice(int64_t slice_ms);
  // Finishes: the success steps, then the Work's waiters and its future.
  void complete();

 private:
  void settle(size_t i, braidResult_t rc);

  const std::string name_;
  const std::chrono::milliseconds timeout_;
  const int source_rank_;
  std::vector<braidRequest_t> requests_;  // NULL once completed
  std::vector<at::Tensor> keep_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::function<void()>> on_success_;
  std::string error_;                   // the first failure
  std::weak_ptr<Completer> completer_;  // guarded by mutex_; set when handed over
  bool handed_ = false;                 // guarded by mutex_
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace braid_torch
