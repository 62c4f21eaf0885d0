// Memory registered with a transport for its message interface (transport.h).
//
// RDMA transports must pin and register a buffer before the NIC may touch it (an ibv_mr and its
// keys, a UCX memory handle), and registration is expensive, so callers register once and reuse
// the registration across many messages. Stream transports (shm, tcp) register nothing with the
// kernel; their registration only records the range and checks every slice against it. Either
// way a message names registered memory by (registration, offset, length), never a raw pointer,
// so the checks are the same for every transport.
#pragma once

#include <cstddef>
#include <string>

#include "core/base/memory_type.h"
#include "core/base/status.h"

namespace braid {

class TransportInstance;

class MemoryRegistration {
 public:
  MemoryRegistration(const TransportInstance* owner, void* base, size_t bytes, MemoryType type)
      : owner_(owner), base_(static_cast<std::byte*>(base)), bytes_(bytes), type_(type) {}
  // An RDMA transport's subclass deregisters here; the memory must outlive every message posted
  // on it, and the registration must outlive them too.
  virtual ~MemoryRegistration() = default;
  MemoryRegistration(const MemoryRegistration&) = delete;
  MemoryRegistration& operator=(const MemoryRegistration&) = delete;

  const TransportInstance* owner() const { return owner_; }
  std::byte* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  MemoryType type() const { return type_; }

  // InvalidArgument unless [offset, offset + len) lies inside the registered range (`what`
  // names the call in the message).
  Status checkSlice(size_t offset, size_t len, const char* what) const {
    if (offset > bytes_ || len > bytes_ - offset)
      return InvalidArgument(std::string(what) + ": bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset) + " + " + std::to_string(len) +
                             ") lie outside the registered " + std::to_string(bytes_) + " bytes");
    return Status::Ok();
  }

 private:
  const TransportInstance* owner_;
  std::byte* base_;
  size_t bytes_;
  MemoryType type_;
};

}  // namespace braid
