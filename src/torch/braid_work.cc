#include "braid_work.h"

#include "completer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <optional>
#include <stdexcept>

namespace braid_torch {

BraidWork::BraidWork(int rank, c10d::OpType type, std::string name,
                     std::chrono::milliseconds timeout, int source_rank)
    : c10d::Work(rank, type),
      name_(std::move(name)),
      timeout_(timeout),
      source_rank_(source_rank),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

// The Completer holds a reference until the Work completes, so no request is left here.
BraidWork::~BraidWork() = default;

bool BraidWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool BraidWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr BraidWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int BraidWork::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0, "braid: sourceRank() is only defined for a receive");
  return source_rank_;
}

std::vector<at::Tensor> BraidWork::result() {
  return outputs_;
}

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout != kNoTimeout ? timeout : timeout_;
  const bool bounded = limit != kNoTimeout && limit.count() >= 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (bounded) deadline = std::chrono::steady_clock::now() + limit;
  std::shared_ptr<Completer> completer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) {
      TORCH_CHECK(handed_, "braid: ", name_,
                  " waited for inside a coalescing block (batch_isend_irecv): its calls are "
                  "issued when the block ends");
      completer = completer_.lock();  // alive while this Work is in flight
    }
  }
  if (completer) completer->waitFor(*this, deadline);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!completed_) {
    TORCH_CHECK(false, "braid: ", name_, " did not complete within ", limit.count(),
                " ms (the wait's timeout). It is still in flight: braid fails it once it makes "
                "no progress for the group's timeout (BRAID_TIMEOUT when set)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  return future_;
}

void BraidWork::settle(size_t i, braidResult_t rc) {
  requests_[i] = nullptr;  // braid released it
  if (rc != braidSuccess && error_.empty())
    error_ = std::string("braid: ") + name_ + " failed (" + braidGetErrorString(rc) +
             "): " + braidGetLastError(nullptr);  // this thread's last error: the request's
}

bool BraidWork::poll() {
  bool left = false;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (!requests_[i]) continue;
    int done = 0;
    const braidResult_t rc = braidTest(&requests_[i], &done);
    if (done || rc != braidSuccess)
      settle(i, rc);
    else
      left = true;
  }
  return !left;
}

void BraidWork::waitSlice(int64_t slice_ms) {
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (!requests_[i]) continue;
    const braidResult_t rc = braidWait(&requests_[i], slice_ms);
    // A wait that ran out of its slice leaves the request valid; anything else settles it.
    if (requests_[i] == nullptr || rc != braidErrTimeout) settle(i, rc);
    return;
  }
}

void BraidWork::complete() {
  std::exception_ptr error;
  if (error_.empty()) {
    at::NoGradGuard no_grad;  // copies into the caller's tensors, outside any autograd graph
    try {
      for (auto& step : on_success_) step();
    } catch (const std::exception& e) {
      error_ = std::string("braid: ") + name_ + ": finishing the outputs failed: " + e.what();
    }
  }
  if (!error_.empty()) error = std::make_exception_ptr(std::runtime_error(error_));
  on_success_.clear();
  keep_.clear();
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

}  // namespace braid_torch
