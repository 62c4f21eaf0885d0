#include "core/base/status.h"

#include <cstring>

namespace braid {

std::string ErrnoMessage(const std::string& what, int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (which may not be buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return what + " failed: " + msg + " (errno " + std::to_string(err) + ")";
}

}  // namespace braid
