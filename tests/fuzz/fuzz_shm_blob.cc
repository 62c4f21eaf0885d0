// Fuzzes shm::DecodeBlob (src/transport/shm/shm_transport.cc): the description of its shared-
// memory side that every rank sends the others through the bootstrap allGather at init, and
// that each peer decodes to decide whether (and how) it maps that rank's segment.
//
// Input: the blob text as another rank would send it.
// Invariants: decoding never fails loudly (a malformed blob is !valid), never reads past the text
// and bounds what it parses; a valid blob has a pid in 1..INT32_MAX and encodes back to a blob
// that decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "transport/shm/shm_transport.h"

using namespace braid::shm;

namespace {

bool SameBlob(const ShmBlob& a, const ShmBlob& b) {
  return a.valid == b.valid && a.segment == b.segment && a.ring_bytes == b.ring_bytes &&
         a.pid == b.pid && a.host_id == b.host_id && a.doorbell == b.doorbell &&
         a.shm_dev == b.shm_dev && a.pidns == b.pidns && a.uid == b.uid;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Somewhat above the decoder's own 4 KiB bound, so that bound is exercised too.
  if (size > 8192) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const ShmBlob b = DecodeBlob(text);
  if (!b.valid) return 0;
  if (size > 4096) std::abort();  // blobs come from other ranks: the size bound must hold
  if (b.pid <= 0) std::abort();
  const ShmBlob again = DecodeBlob(EncodeBlob(b));
  if (!SameBlob(b, again)) std::abort();
  return 0;
}
