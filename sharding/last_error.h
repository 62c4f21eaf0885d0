// The thread's last error outside a shard handle (validation, presets, create), for
// braidShardGetLastError(NULL).
#pragma once

#include <exception>
#include <string>

#include "braid/braid.h"

namespace braid::shard {

// Records `message` as this thread's last error and returns `code`.
braidResult_t SetLastError(braidResult_t code, const std::string& message);
const char* LastError();

// Runs the body of a C entry point: no exception crosses the C API (DESIGN.md 4), so an
// allocation failure becomes braidErrSystem with a message instead of a terminate.
template <typename F>
braidResult_t NoThrow(const char* api, F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      return SetLastError(braidErrSystem, std::string(api) + ": " + e.what());
    } catch (...) {
      return braidErrSystem;
    }
  } catch (...) {
    return braidErrInternal;
  }
}

}  // namespace braid::shard
