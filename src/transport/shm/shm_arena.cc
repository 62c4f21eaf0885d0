#include "transport/shm/shm_arena.h"

#include <algorithm>

namespace braid::shm {
namespace {

constexpr int kUsedBits = 40;
constexpr uint64_t kUsedMask = (uint64_t{1} << kUsedBits) - 1;

uint64_t FloorPow2(uint64_t v) {
  uint64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

}  // namespace

uint64_t ArenaInitialState(uint64_t nrings) {
  return nrings << kUsedBits;
}

Result<RingArea> ClaimRingArea(ArenaControl* arena, const SegmentLayout& layout) {
  const uint64_t total_units = layout.arena_bytes / kMinRingBytes;
  const uint64_t full_units = layout.ring_bytes / kMinRingBytes;
  const uint64_t min_units = layout.min_ring_bytes / kMinRingBytes;
  uint64_t s = arena->state.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t used = s & kUsedMask;
    const uint64_t unclaimed = s >> kUsedBits;
    // Every unclaimed ring, this one included, is owed its minimum.
    if (unclaimed == 0 || used > total_units || (total_units - used) / min_units < unclaimed)
      return InternalError("shm arena state is corrupt (" + std::to_string(used) + " units used, " +
                           std::to_string(unclaimed) + " rings unclaimed, " +
                           std::to_string(total_units) + " units)");
    const uint64_t mine =
        FloorPow2(std::min(full_units, total_units - used - (unclaimed - 1) * min_units));
    const uint64_t next = (used + mine) | ((unclaimed - 1) << kUsedBits);
    if (arena->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                           std::memory_order_acquire))
      return RingArea{layout.arenaOffset() + used * kMinRingBytes, mine * kMinRingBytes};
  }
}

bool IsValidRingArea(const RingArea& a, const SegmentLayout& layout) {
  const uint64_t begin = layout.arenaOffset();
  return a.bytes >= layout.min_ring_bytes && a.bytes <= layout.ring_bytes &&
         (a.bytes & (a.bytes - 1)) == 0 && a.offset >= begin &&
         (a.offset - begin) % kMinRingBytes == 0 && a.offset - begin <= layout.arena_bytes &&
         a.bytes <= layout.arena_bytes - (a.offset - begin);
}

}  // namespace braid::shm
