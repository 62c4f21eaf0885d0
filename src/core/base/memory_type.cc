#include "core/base/memory_type.h"

namespace braid {

const char* MemoryTypeName(MemoryType m) {
  switch (m) {
    case MemoryType::kHost:
      return "host";
    case MemoryType::kCuda:
      return "cuda";
    case MemoryType::kHip:
      return "hip";
  }
  return "?";
}

}  // namespace braid
