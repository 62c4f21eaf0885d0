#include "core/base/status.h"

#include <cstring>

namespace braid {

const std::string& Status::message() const {
  static const std::string* const kEmpty = new std::string();  // never destroyed: safe at exit
  return rep_ ? rep_->message : *kEmpty;
}

std::string ErrnoMessage(const std::string& what, int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (which may not be buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return what + " failed: " + msg + " (errno " + std::to_string(err) + ")";
}

}  // namespace braid
