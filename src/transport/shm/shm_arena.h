// How a ring of the shm transport gets its data area: its writer claims it from the reader's
// arena (shm_layout.h) just before the first byte, so the room goes to the rings schedules use.
//
// A claim takes the largest power of two <= the segment's ring size that still leaves its
// min_ring_bytes for every ring not yet claimed: the first rings used get the full size, later
// ones what is left, every ring at least the minimum, so a claim never fails on a sound segment.
// One compare-and-swap on one word, so concurrent writers need no lock.
#pragma once

#include <cstdint>

#include "core/base/status.h"
#include "transport/shm/shm_layout.h"

namespace braid::shm {

struct RingArea {
  uint64_t offset = 0;  // from the segment's start
  uint64_t bytes = 0;   // a power of two
};

// ArenaControl::state of an arena with `nrings` unclaimed rings and nothing handed out.
uint64_t ArenaInitialState(uint64_t nrings);
// The most rings an arena can track.
inline constexpr uint64_t kMaxArenaRings = (uint64_t{1} << 24) - 1;

// Claims one ring's area in the arena of a segment of shape `layout` (validated by its opener).
// An error means the shared state is corrupt (more claims than rings, or a count beyond the
// arena): a peer that misbehaved.
Result<RingArea> ClaimRingArea(ArenaControl* arena, const SegmentLayout& layout);

// Whether `area`, as a writer published it, lies inside the arena of `layout` and has a size a
// claim can give: the reader checks this before it reads a byte.
bool IsValidRingArea(const RingArea& area, const SegmentLayout& layout);

}  // namespace braid::shm
