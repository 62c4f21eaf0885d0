// Memory layout of one rank's shared-memory segment: a header, then one single-producer
// single-consumer byte ring per (writer rank, channel). The segment holds the owner's *inbound*
// rings; a writer maps its reader's segment and writes into the slot named after itself.
//
//   [SegmentHeader | writer rank table]  padded to a page
//   [RingControl (256 B) | data (ring_bytes)]  x nslots x nchannels, slot-major
//
// Everything here lives in memory shared between processes, so it holds only plain integers and
// lock-free (hence address-free) atomics, never pointers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace braid::shm {

inline constexpr uint64_t kSegmentMagic = 0x6d68736469617262ULL;  // "braidshm"
inline constexpr uint32_t kSegmentVersion = 1;
inline constexpr uint64_t kMinRingBytes = 64 << 10;
inline constexpr uint64_t kMaxRingBytes = 256 << 20;
inline constexpr uint64_t kPageBytes = 4096;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Control block of one ring. head and tail are byte counters that only grow (2^64 bytes never
// wrap in practice); the ring position is counter & (size - 1). Each side writes one 128-byte
// block and only reads the other, so the hot counters never share a cache line (128 bytes also
// keeps the adjacent-line prefetcher from pairing them).
struct RingControl {
  // Writer's block.
  alignas(128) std::atomic<uint64_t> head;  // bytes published
  // Set by the writer before it sleeps on a full ring; cleared by the reader when it rings.
  std::atomic<uint32_t> writer_sleeping;
  // Set by the writer when it shuts the stream down (Endpoint::shutdown).
  std::atomic<uint32_t> writer_closed;
  // Reader's block.
  alignas(128) std::atomic<uint64_t> tail;  // bytes consumed
  // Set by the reader before it sleeps on an empty ring; cleared by the writer when it rings.
  std::atomic<uint32_t> reader_sleeping;
  // Set by the reader when it shuts the stream down.
  std::atomic<uint32_t> reader_closed;
};
static_assert(sizeof(RingControl) == 256);
inline constexpr uint64_t kRingControlBytes = sizeof(RingControl);

// First bytes of the segment; written once by the creator before its blob is published.
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t nchannels;
  uint64_t ring_bytes;
  uint64_t total_bytes;
  int32_t owner_rank;
  uint32_t nslots;
  // Followed by `nslots` int32 writer ranks: slot s holds the rings written by that rank.
};

// Offsets within a segment of a given shape.
struct SegmentLayout {
  uint32_t nslots = 0;
  uint32_t nchannels = 0;
  uint64_t ring_bytes = 0;

  uint64_t headerBytes() const {
    uint64_t raw = sizeof(SegmentHeader) + uint64_t{nslots} * sizeof(int32_t);
    return (raw + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  uint64_t ringStride() const { return kRingControlBytes + ring_bytes; }
  uint64_t totalBytes() const {
    return headerBytes() + uint64_t{nslots} * nchannels * ringStride();
  }
  // Offset of the control block of ring (slot, channel); its data follows it.
  uint64_t ringOffset(uint32_t slot, uint32_t channel) const {
    return headerBytes() + (uint64_t{slot} * nchannels + channel) * ringStride();
  }
};

}  // namespace braid::shm
