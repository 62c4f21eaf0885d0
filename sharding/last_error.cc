// This thread's last error outside a shard handle, for braidShardGetLastError(NULL).
#include "sharding/last_error.h"

namespace braid::shard {
namespace {

thread_local std::string g_last_error = "no error";

}  // namespace

braidResult_t SetLastError(braidResult_t code, const std::string& message) {
  g_last_error = message;
  return code;
}

const char* LastError() {
  return g_last_error.c_str();
}

}  // namespace braid::shard
