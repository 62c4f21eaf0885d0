// Status and Result<T>: how every internal function reports failure. A status carries a class
// (which maps 1:1 onto braidResult_t at the C boundary) and a message written for the user:
// rank, peer, host, operation, errno and a remedy where one exists.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "braid/braid.h"

namespace braid {

enum class ErrorClass : int {
  kOk = braidSuccess,
  kSystem = braidErrSystem,
  kInternal = braidErrInternal,
  kInvalidArgument = braidErrInvalidArgument,
  kInvalidUsage = braidErrInvalidUsage,
  kRemote = braidErrRemote,
  kInProgress = braidInProgress,
  kTimeout = braidErrTimeout,
  kAborted = braidErrAborted,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(ErrorClass cls, std::string message) {
    return Status(cls, std::move(message));
  }
  Status(const Status& o) : rep_(o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) rep_ = o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return rep_ == nullptr; }
  ErrorClass cls() const { return rep_ ? rep_->cls : ErrorClass::kOk; }
  const std::string& message() const;
  braidResult_t code() const { return static_cast<braidResult_t>(cls()); }

  // Prefixes context ("allreduce #12: ") to the message, keeping the class.
  Status& prepend(const std::string& context) {
    if (rep_) rep_->message = context + rep_->message;
    return *this;
  }

 private:
  // An OK status is one null pointer: the small-message path makes and drops a dozen of them per
  // call (every BRAID_RETURN_IF_ERROR), where a class and an inline string cost a few stores
  // each way. Errors, which carry a message, allocate anyway.
  struct Rep {
    ErrorClass cls;
    std::string message;
  };
  Status(ErrorClass cls, std::string message)
      : rep_(cls == ErrorClass::kOk ? nullptr
                                    : std::make_unique<Rep>(Rep{cls, std::move(message)})) {}
  std::unique_ptr<Rep> rep_;
};

inline Status InvalidArgument(std::string m) {
  return Status::Error(ErrorClass::kInvalidArgument, std::move(m));
}
inline Status InvalidUsage(std::string m) {
  return Status::Error(ErrorClass::kInvalidUsage, std::move(m));
}
inline Status SystemError(std::string m) {
  return Status::Error(ErrorClass::kSystem, std::move(m));
}
inline Status RemoteError(std::string m) {
  return Status::Error(ErrorClass::kRemote, std::move(m));
}
inline Status TimeoutError(std::string m) {
  return Status::Error(ErrorClass::kTimeout, std::move(m));
}
inline Status InternalError(std::string m) {
  return Status::Error(ErrorClass::kInternal, std::move(m));
}
inline Status AbortedError(std::string m) {
  return Status::Error(ErrorClass::kAborted, std::move(m));
}

// "<what> failed: <strerror(err)> (errno N)" for system-call failures.
std::string ErrnoMessage(const std::string& what, int err);

// A value or an error status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace braid

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define BRAID_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::braid::Status _braid_st = (expr);    \
    if (!_braid_st.ok()) return _braid_st; \
  } while (0)

#define BRAID_CONCAT_INNER(a, b) a##b
#define BRAID_CONCAT(a, b) BRAID_CONCAT_INNER(a, b)
// BRAID_ASSIGN_OR_RETURN(auto x, MakeX()); returns the status when MakeX() failed.
#define BRAID_ASSIGN_OR_RETURN(lhs, expr)                \
  auto BRAID_CONCAT(_braid_res_, __LINE__) = (expr);     \
  if (!BRAID_CONCAT(_braid_res_, __LINE__).ok())         \
    return BRAID_CONCAT(_braid_res_, __LINE__).status(); \
  lhs = std::move(BRAID_CONCAT(_braid_res_, __LINE__).value())
