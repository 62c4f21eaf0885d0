// How big the shm transport's segments and rings are (docs/scale.md has the numbers).
//
// Every local rank's segment serves one ring per (local peer, lane), so one communicator on a
// host of n ranks has n (n - 1) nlanes rings: at 1 MiB each, 168 MiB for 8 ranks but 196 GiB for
// 256. Yet a schedule uses few of them (a ring its neighbours, recursive doubling and trees
// log2(n) partners; only all-to-all uses every peer). So:
//
//   - when every ring fits at BRAID_SHM_RING_BYTES (rounded down to a power of two) within the
//     host budget, kHostSegmentBudgetBytes, every ring gets that size (small jobs, where
//     bandwidth matters, keep 1 MiB rings: up to 18 ranks with the default 2 channels);
//   - otherwise each segment is its 1/n share of the budget, and its rings get their data from
//     it on first use (shm_arena.h): half of it guarantees every ring an equal minimum (a power
//     of two, at least kMinRingBytes: what all-to-all, which uses every peer, gets), the other
//     half lets the first kFullSizeRings rings used be large (BRAID_SHM_RING_BYTES, or less so
//     that kFullSizeRings of them fit: a ring's neighbours, the log2(n) partners of recursive
//     doubling, trees and the call agreement); later rings get what is left;
//   - each segment must also fit in its share (1/n) of the free /dev/shm space, else the rings
//     shrink, and when not even kMinRingBytes rings fit the transport is unavailable (it never
//     gambles on a SIGBUS).
//
// So the segments of a host take at most max(kHostSegmentBudgetBytes, n segments of minimum
// rings): 1 GiB up to several hundred ranks with the default 2 channels. All of it is reserved at
// init.
#pragma once

#include <cstdint>

#include "transport/shm/shm_layout.h"

namespace braid::shm {

inline constexpr uint64_t kHostSegmentBudgetBytes = uint64_t{1} << 30;
inline constexpr uint64_t kFullSizeRings = 16;

// BRAID_SHM_RING_BYTES as a ring size: the largest power of two within [kMinRingBytes,
// kMaxRingBytes] not above it.
uint64_t RequestedRingBytes(uint64_t shm_ring_bytes);

struct SegmentPlan {
  SegmentLayout layout;         // nslots == 0: not even minimum rings fit in the free space
  bool below_request = false;   // some rings may get less than RequestedRingBytes(requested)
  bool short_of_space = false;  // smaller than the budget allows, because /dev/shm is short
  uint64_t minimum_bytes = 0;   // the segment with minimum rings (for messages)
};

// The segment of one of `nlocal` ranks on this host, each with `nlanes` streams per peer and a
// small-message board of `board_bytes` per post (a multiple of kBoardAlignBytes; 0: none), when
// /dev/shm has `free_bytes` free. The board is part of the segment and of its budget.
SegmentPlan PlanSegment(uint64_t requested, uint32_t nlocal, uint32_t nlanes, uint64_t free_bytes,
                        uint64_t board_bytes = 0);

// The segment of one of `nlocal` ranks when every ring gets kMinRingBytes (in whole pages).
uint64_t MinimumSegmentBytes(uint32_t nlocal, uint32_t nlanes, uint64_t board_bytes = 0);

// The most bytes the segments of `nlocal` ranks take together, whatever the free space:
// max(kHostSegmentBudgetBytes, nlocal segments of minimum rings). Tests hold the transport to it.
uint64_t HostSegmentBytesBound(uint32_t nlocal, uint32_t nlanes, uint64_t board_bytes = 0);

}  // namespace braid::shm
