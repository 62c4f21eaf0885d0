// Memory layout of one rank's shared-memory segment: a header, one control block per single-
// producer single-consumer byte ring (writer rank, lane), and an arena that holds the rings' data.
// The segment holds the owner's *inbound* rings; a writer maps its reader's segment and writes
// into the rings of the slot named after itself.
//
//   [SegmentHeader | writer rank table]                  padded to 256 bytes
//   [ArenaControl (256 B)]
//   [RingControl (256 B)] x nslots x nchannels, slot-major  padded to a page
//   [BoardControl (2 KiB) | 16 slots | 2 payload buffers of board_bytes]  padded to a page;
//                                                           absent when board_bytes is 0
//   [arena (arena_bytes)]
//
// A ring gets its data area from the arena when its writer first sends (shm_arena.h): the arena
// is sized for the host (shm_sizing.h), not for every pair, and the rings that schedules use get
// the room.
//
// The board (transport/local_board.h) is the owner's *outbound* side of the small-message path:
// the owner writes its posts there and every local peer reads them.
//
// Everything here lives in memory shared between processes, so it holds only plain integers and
// lock-free (hence address-free) atomics, never pointers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace braid::shm {

inline constexpr uint64_t kSegmentMagic = 0x6d68736469617262ULL;  // "braidshm"
inline constexpr uint32_t kSegmentVersion = 8;
// The smallest ring any segment may promise (its min_ring_bytes), and the arena's unit.
inline constexpr uint64_t kMinRingBytes = 1 << 10;
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
  // The ring's data area, offset from the segment's start and size (a power of two): 0 until the
  // writer claims it, before its first byte. The reader reads them once it sees head move (the
  // release store of head publishes them).
  std::atomic<uint64_t> data_offset;
  std::atomic<uint64_t> data_bytes;
  // Reader's block.
  alignas(128) std::atomic<uint64_t> tail;  // bytes consumed
  // Set by the reader before it sleeps on an empty ring; cleared by the writer when it rings.
  std::atomic<uint32_t> reader_sleeping;
  // Set by the reader when it shuts the stream down.
  std::atomic<uint32_t> reader_closed;
};
static_assert(sizeof(RingControl) == 256);
inline constexpr uint64_t kRingControlBytes = sizeof(RingControl);

// The owner's side of the small-message board (transport/local_board.h has the protocol). Post s
// lives in entry s % kBoardEntries: its number, signature and (up to 32 bytes) payload in one
// 64-byte line, so that a reader that sees the number has the rest in the same cache miss. A peer
// about to sleep on an entry's number (a futex) counts itself in `waiters`, which the owner reads
// after each post. `consumed` (the number of the last post this rank has read every peer's post
// of) is written by the owner once per call and read by a peer only when it needs to reuse a slot
// (a peer waiting for it polls). Separate 128-byte blocks, so that a sleeper does not take the
// line the spinning readers hold.
struct BoardSignatureWords {
  uint64_t words[3];
};
inline constexpr uint32_t kBoardEntries = 16;
// A post of at most this many bytes travels in its entry, in the line of its number.
inline constexpr uint64_t kBoardEntryPayloadBytes = 32;
struct BoardEntry {
  alignas(64) std::atomic<uint32_t> seq;  // number of the post this entry holds (0: none yet)
  BoardSignatureWords signature;          // bytes 8..32
  alignas(32) std::byte payload[kBoardEntryPayloadBytes];
};
static_assert(sizeof(BoardEntry) == 64);
// Ranks whose progress loops sleep in poll() on a post of this side (LocalBoard::armBell): a bit
// per rank of the communicator, rung (and cleared) by the owner's publish(). Ranks beyond
// kBoardBellRanks poll instead.
inline constexpr uint32_t kBoardBellWords = 8;
inline constexpr int kBoardBellRanks = 64 * kBoardBellWords;
struct BoardControl {
  alignas(128) BoardEntry entries[kBoardEntries];
  // Futex sleepers and armed bells: the owner's publish() looks further only when it is not 0.
  alignas(128) std::atomic<uint32_t> waiters;
  alignas(128) std::atomic<uint32_t> consumed;
  alignas(128) std::atomic<uint64_t> bells[kBoardBellWords];
  // Collectives the owner has started (LocalBoard::announceStarted): written once per call by
  // the owner, read by a peer only when it suspects a mismatch.
  alignas(128) std::atomic<uint64_t> started;
};
inline constexpr uint64_t kBoardControlBytes = 2048;
static_assert(sizeof(BoardControl) <= kBoardControlBytes);
// Bytes of each of the board's kBoardEntries small slots (or the board's payload size, if
// smaller): a call whose largest post fits one may be posted ahead of the calls before it.
inline constexpr uint64_t kBoardSlotBytes = 4096;
// What one local peer moved through this side of the board (LocalBoard::countRead/countWritten):
// the bytes it read from this owner's posts and exposed buffers, and wrote into its windows. One
// cell per ring slot (the slot's writer is the peer), written only by that peer, one line each
// so that peers do not share a line; the owner reads it for its traffic counters.
struct BoardTrafficCell {
  alignas(64) std::atomic<uint64_t> read;
  std::atomic<uint64_t> written;
};
static_assert(sizeof(BoardTrafficCell) == 64);
// Payload buffers start at multiples of this (cache lines, and vector loads).
inline constexpr uint64_t kBoardAlignBytes = 128;
// The largest payload a board may carry per post.
inline constexpr uint64_t kMaxBoardBytes = 4 << 20;

// The arena's allocation state, one word so that a claim is one compare-and-swap: the low 40 bits
// count the bytes handed out in kMinRingBytes units, the high 24 bits the rings not yet claimed.
struct ArenaControl {
  alignas(256) std::atomic<uint64_t> state;
};
static_assert(sizeof(ArenaControl) == 256);

// What the segment's owner tells the peers that map it while they run; written by the owner only.
struct OwnerControl {
  // How the owner left the communicator with every call complete: a FailureCause::Reason
  // (kDestroyed, kExited), 0 while it is in it. Stored before its goodbye on the streams
  // (wire_header.h kWireGoodbye), so a peer waiting on the board or on an empty ring names the
  // departure instead of waiting for a post that never comes or reading the exit as a crash.
  alignas(256) std::atomic<uint32_t> departed;
};
static_assert(sizeof(OwnerControl) == 256);

// First bytes of the segment; written once by the creator before its blob is published.
inline constexpr size_t kHeaderTagBytes = 64;
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t nchannels;
  uint64_t ring_bytes;      // the size a ring is given while the arena has room for it
  uint64_t min_ring_bytes;  // the size every ring is sure to get
  uint64_t arena_bytes;     // a multiple of kMinRingBytes
  uint64_t board_bytes;     // payload bytes per post of the board (0: no board)
  uint64_t total_bytes;
  int32_t owner_rank;
  uint32_t nslots;
  // The communicator's tag (NUL-padded, truncated): a peer checks that the file it opened through
  // the creator's /proc/<pid>/fd entry belongs to this communicator and rank.
  char comm_tag[kHeaderTagBytes];
  // Followed by `nslots` int32 writer ranks: slot s holds the rings written by that rank.
};

// Offsets within a segment of a given shape.
struct SegmentLayout {
  uint32_t nslots = 0;
  uint32_t nchannels = 0;
  uint64_t ring_bytes = 0;
  uint64_t arena_bytes = 0;
  uint64_t min_ring_bytes = kMinRingBytes;
  uint64_t board_bytes = 0;  // a multiple of kBoardAlignBytes

  uint64_t nrings() const { return uint64_t{nslots} * nchannels; }
  uint64_t headerBytes() const {
    uint64_t raw = sizeof(SegmentHeader) + uint64_t{nslots} * sizeof(int32_t);
    return (raw + 255) / 256 * 256;
  }
  uint64_t ownerControlOffset() const { return headerBytes(); }
  uint64_t arenaControlOffset() const { return headerBytes() + sizeof(OwnerControl); }
  // Offset of the control block of ring (slot, channel).
  uint64_t controlOffset(uint32_t slot, uint32_t channel) const {
    return arenaControlOffset() + sizeof(ArenaControl) +
           (uint64_t{slot} * nchannels + channel) * kRingControlBytes;
  }
  uint64_t boardOffset() const {
    uint64_t end = arenaControlOffset() + sizeof(ArenaControl) + nrings() * kRingControlBytes;
    return (end + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  // The board: its control block, kBoardEntries small slots, then large payload buffer k (0 or
  // 1).
  uint64_t boardSlotBytes() const {
    return board_bytes < kBoardSlotBytes ? board_bytes : kBoardSlotBytes;
  }
  uint64_t boardRegionBytes() const {
    if (board_bytes == 0) return 0;
    uint64_t b = kBoardControlBytes + kBoardEntries * boardSlotBytes() + 2 * board_bytes +
                 uint64_t{nslots} * sizeof(BoardTrafficCell);
    return (b + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  uint64_t boardSlotOffset(uint32_t k) const {
    return boardOffset() + kBoardControlBytes + uint64_t{k} * boardSlotBytes();
  }
  uint64_t boardPayloadOffset(int k) const {
    return boardOffset() + kBoardControlBytes + kBoardEntries * boardSlotBytes() +
           static_cast<uint64_t>(k) * board_bytes;
  }
  // The traffic cells (one per slot), after the payload buffers.
  uint64_t boardTrafficOffset() const { return boardPayloadOffset(2); }
  uint64_t arenaOffset() const { return boardOffset() + boardRegionBytes(); }
  uint64_t totalBytes() const { return arenaOffset() + arena_bytes; }
};

}  // namespace braid::shm
