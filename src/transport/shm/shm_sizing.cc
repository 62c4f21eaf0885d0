#include "transport/shm/shm_sizing.h"

#include <algorithm>

namespace braid::shm {
namespace {

uint64_t FloorPow2(uint64_t v) {
  uint64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

// The segment whose arena holds every ring at `ring` bytes.
SegmentLayout Uniform(uint32_t nslots, uint32_t nlanes, uint64_t ring, uint64_t board) {
  SegmentLayout l{nslots, nlanes, ring, 0, ring, board};
  l.arena_bytes = l.nrings() * ring;
  return l;
}

// The segment of at most `bytes` in all (whole pages, as tmpfs counts them; the arena at least
// kMinRingBytes per ring), with rings of at most `ring`; nslots == 0 when that does not fit.
// Half the arena guarantees every ring its share, the other half lets kFullSizeRings rings be
// large (what all-to-all needs, and what the other schedules need).
SegmentLayout Shared(uint32_t nslots, uint32_t nlanes, uint64_t ring, uint64_t bytes,
                     uint64_t board) {
  SegmentLayout l{nslots, nlanes, 0, 0, kMinRingBytes, board};
  const uint64_t fixed = l.arenaOffset();
  const uint64_t n = l.nrings();
  const uint64_t pages = bytes < fixed ? 0 : (bytes - fixed) / kPageBytes * kPageBytes;
  const uint64_t arena =
      std::max(pages, (n * kMinRingBytes + kPageBytes - 1) / kPageBytes * kPageBytes);
  if (fixed + arena > bytes) return {};
  l.arena_bytes = arena;
  l.min_ring_bytes = std::clamp(FloorPow2(arena / (2 * n)), kMinRingBytes, ring);
  const uint64_t spare = (arena - n * l.min_ring_bytes) / std::min(kFullSizeRings, n);
  l.ring_bytes = std::clamp(FloorPow2(spare + l.min_ring_bytes), l.min_ring_bytes, ring);
  return l;
}

}  // namespace

uint64_t RequestedRingBytes(uint64_t shm_ring_bytes) {
  uint64_t ring = kMinRingBytes;
  while (ring * 2 <= shm_ring_bytes && ring * 2 <= kMaxRingBytes) ring *= 2;
  return ring;
}

SegmentPlan PlanSegment(uint64_t requested, uint32_t nlocal, uint32_t nlanes, uint64_t free_bytes,
                        uint64_t board_bytes) {
  SegmentPlan plan;
  if (nlocal < 2 || nlanes == 0) return plan;
  const uint32_t nslots = nlocal - 1;
  const uint64_t ring = RequestedRingBytes(requested);
  const uint64_t budget = kHostSegmentBudgetBytes / nlocal;
  const uint64_t space = free_bytes / nlocal;
  plan.minimum_bytes = MinimumSegmentBytes(nlocal, nlanes, board_bytes);
  const SegmentLayout uniform = Uniform(nslots, nlanes, ring, board_bytes);
  if (uniform.totalBytes() <= std::min(budget, space)) {
    plan.layout = uniform;
    return plan;
  }
  // The budget is soft (a job of very many ranks gets minimum rings, however many bytes); free
  // space is hard.
  const uint64_t by_budget = std::max(budget, plan.minimum_bytes);
  plan.layout = Shared(nslots, nlanes, ring, std::min(by_budget, space), board_bytes);
  plan.below_request = true;
  plan.short_of_space = space < std::min(by_budget, uniform.totalBytes());
  return plan;
}

uint64_t MinimumSegmentBytes(uint32_t nlocal, uint32_t nlanes, uint64_t board_bytes) {
  if (nlocal < 2) return 0;
  SegmentLayout l{nlocal - 1, nlanes, kMinRingBytes, 0, kMinRingBytes, board_bytes};
  l.arena_bytes = (l.nrings() * kMinRingBytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  return l.totalBytes();
}

uint64_t HostSegmentBytesBound(uint32_t nlocal, uint32_t nlanes, uint64_t board_bytes) {
  if (nlocal < 2) return 0;
  return std::max(kHostSegmentBudgetBytes,
                  uint64_t{nlocal} * MinimumSegmentBytes(nlocal, nlanes, board_bytes));
}

}  // namespace braid::shm
