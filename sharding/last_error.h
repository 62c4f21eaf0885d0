// The thread's last error outside a shard handle (validation, presets, create), for
// braidShardGetLastError(NULL).
#pragma once

#include <string>

#include "braid/braid.h"

namespace braid::shard {

// Records `message` as this thread's last error and returns `code`.
braidResult_t SetLastError(braidResult_t code, const std::string& message);
const char* LastError();

}  // namespace braid::shard
