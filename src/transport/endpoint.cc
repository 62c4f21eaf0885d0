// Endpoint and TransportInstance members shared by every transport: the stream-carried message
// interface and the default memory registration.
#include <string>

#include "transport/stream_messages.h"
#include "transport/transport.h"

namespace braid {

Endpoint::Endpoint() = default;
Endpoint::~Endpoint() = default;

Result<size_t> Endpoint::sendv(std::span<const iovec> parts) {
  size_t total = 0;
  for (const iovec& part : parts) {
    if (part.iov_len == 0) continue;
    auto r = send(part.iov_base, part.iov_len);
    if (!r.ok()) {
      if (total) return total;  // the error comes again on the next call
      return r.status();
    }
    total += *r;
    if (*r < part.iov_len) break;
  }
  return total;
}

StreamMessages& Endpoint::messages() {
  if (!messages_) messages_ = std::make_unique<StreamMessages>(*this);
  return *messages_;
}

Status Endpoint::checkMemory(const MemoryRegistration& mem, size_t offset, size_t len,
                             const char* what) const {
  if (mem.owner() != transport_)
    return InvalidArgument(std::string(what) + " on " + describe() +
                           ": the memory is registered with another transport instance "
                           "(register it with the one that made this endpoint)");
  return mem.checkSlice(offset, len, what);
}

Result<uint64_t> Endpoint::postSend(const MemoryRegistration& mem, size_t offset, size_t len) {
  BRAID_RETURN_IF_ERROR(checkMemory(mem, offset, len, "postSend"));
  return messages().postSend(mem.base() + offset, len);
}

Result<uint64_t> Endpoint::postRecv(const MemoryRegistration& mem, size_t offset, size_t len) {
  BRAID_RETURN_IF_ERROR(checkMemory(mem, offset, len, "postRecv"));
  return messages().postRecv(mem.base() + offset, len);
}

Result<std::optional<size_t>> Endpoint::test(uint64_t id) {
  return messages().test(id);
}

void Endpoint::messageWants(bool* want_send, bool* want_recv) const {
  *want_send = *want_recv = false;
  if (messages_) messages_->wants(want_send, want_recv);
}

Result<std::unique_ptr<MemoryRegistration>> TransportInstance::registerMemory(void* base,
                                                                              size_t bytes,
                                                                              MemoryType type) {
  if (!(memoryTypes() & MemoryTypeBit(type))) {
    std::string can;
    for (int t = 0; t < kNumMemoryTypes; ++t)
      if (memoryTypes() & MemoryTypeBit(static_cast<MemoryType>(t)))
        can += std::string(can.empty() ? "" : ", ") + MemoryTypeName(static_cast<MemoryType>(t));
    return InvalidArgument(std::string("registerMemory: the ") + name() +
                           " transport cannot read or write " + MemoryTypeName(type) +
                           " memory (it handles: " + can + ")");
  }
  if (!base && bytes > 0)
    return InvalidArgument("registerMemory: a null base with " + std::to_string(bytes) + " bytes");
  return std::make_unique<MemoryRegistration>(this, base, bytes, type);
}

}  // namespace braid
