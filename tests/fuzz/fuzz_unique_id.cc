// Fuzzes DecodeUniqueId (src/core/net/unique_id.cc): the 128-byte id every rank receives from the
// user (ncclCommInitRank, braidCommInitRank, braidCommSplit), so any bytes can reach it.
//
// Input: up to 128 bytes, zero-padded to the id's size (the seeds are whole ids).
// Invariants: decoding never reads outside the id; an id that decodes re-encodes to exactly the
// same 128 bytes (every byte is covered by a check, unique_id.h), and its address formats.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/net/unique_id.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  braidUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::memcpy(id.internal, data, size < sizeof(id.internal) ? size : sizeof(id.internal));

  auto decoded = DecodeUniqueId(id);
  if (!decoded.ok()) {
    // A rejected id is a user error with a message, never a silent failure.
    if (decoded.status().message().empty()) std::abort();
    return 0;
  }
  // Round trip: a blob with any byte the encoder would not produce must have been rejected.
  braidUniqueId again;
  std::memset(&again, 0xa5, sizeof(again));
  EncodeUniqueId(*decoded, &again);
  if (std::memcmp(&again, &id, sizeof(id)) != 0) std::abort();

  const sockaddr_storage& root = decoded->root;
  if (root.ss_family != AF_INET && root.ss_family != AF_INET6) std::abort();
  if (FormatAddress(root).find(':') == std::string::npos) std::abort();
  // What ranks log and name shm objects with.
  if (HexOf(decoded->nonce.data(), decoded->nonce.size()).size() != 32) std::abort();
  return 0;
}
