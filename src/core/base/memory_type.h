// Where a buffer's memory lives. Schedules declare it per buffer (algorithms/schedule.h) and a
// transport declares which kinds it can read and write (transport/transport.h), so that device
// memory never reaches code that would dereference it on the host.
#pragma once

#include <cstdint>

namespace braid {

enum class MemoryType : uint8_t { kHost = 0, kCuda, kHip };
inline constexpr int kNumMemoryTypes = 3;
const char* MemoryTypeName(MemoryType m);  // "host", "cuda", "hip"

// A set of memory types, one bit per MemoryType.
using MemoryTypeMask = uint32_t;
inline constexpr MemoryTypeMask MemoryTypeBit(MemoryType m) {
  return MemoryTypeMask{1} << static_cast<unsigned>(m);
}

}  // namespace braid
