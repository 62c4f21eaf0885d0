// Shared-memory segments for the shm transport: creating this rank's segment (an unnamed file in
// /dev/shm, reserved up front), mapping a peer's through the creator's /proc/<pid>/fd entry, and
// removing named segments left behind by dead processes of older versions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "transport/shm/shm_layout.h"

namespace braid::shm {

// An owned file descriptor (closed on destruction).
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& o) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A MAP_SHARED mapping, unmapped on destruction. Held by shared_ptr by the instance and by every
// endpoint pointing into it, so the mapping lives exactly as long as someone can touch it.
class Mapping {
 public:
  Mapping(void* base, size_t len) : base_(static_cast<std::byte*>(base)), len_(len) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  std::byte* base() const { return base_; }
  size_t size() const { return len_; }

 private:
  std::byte* base_;
  size_t len_;
};

// A mapped segment with its validated header.
struct SegmentView {
  std::shared_ptr<Mapping> mapping;
  SegmentLayout layout;
  int owner_rank = -1;
  std::vector<int> writers;  // writer rank of each slot

  // The slot holding the rings written by `writer`, or -1.
  int slotOf(int writer) const;
  RingControl* control(uint32_t slot, uint32_t channel) const {
    return reinterpret_cast<RingControl*>(mapping->base() + layout.controlOffset(slot, channel));
  }
  // The board (null when the segment has none), its small slot k (< kBoardEntries) and its large
  // payload buffer k (0 or 1).
  BoardControl* board() const {
    if (layout.board_bytes == 0) return nullptr;
    return reinterpret_cast<BoardControl*>(mapping->base() + layout.boardOffset());
  }
  std::byte* boardSlot(uint32_t k) const { return mapping->base() + layout.boardSlotOffset(k); }
  std::byte* boardPayload(int k) const { return mapping->base() + layout.boardPayloadOffset(k); }
  // The board's traffic cell of the peer that writes slot `slot`'s rings.
  BoardTrafficCell* boardTraffic(int slot) const {
    return reinterpret_cast<BoardTrafficCell*>(mapping->base() + layout.boardTrafficOffset()) +
           slot;
  }
  ArenaControl* arena() const {
    return reinterpret_cast<ArenaControl*>(mapping->base() + layout.arenaControlOffset());
  }
  OwnerControl* owner() const {
    return reinterpret_cast<OwnerControl*>(mapping->base() + layout.ownerControlOffset());
  }
  // Best effort: maps the pages of [offset, offset + bytes) now (they are reserved already), so
  // that the first transfers do not pay the page faults.
  void prefault(uint64_t offset, uint64_t bytes) const;
};

// The segment this rank creates. It never has a name in /dev/shm (spec/reliability.md check 11):
// it is an O_TMPFILE file there, so its pages count against /dev/shm's size like any segment, but
// the kernel frees them when the last process that maps it exits, however every rank dies. Peers
// open it through this process's descriptor, /proc/<pid>/fd/<fd> (locator()), while it is open.
class OwnedSegment {
 public:
  // Creates the file (mode 0600), reserves its pages with posix_fallocate (a full /dev/shm is
  // ENOSPC here, never SIGBUS later), maps it, writes the header and checks that the locator
  // reopens it (it does not without /proc: then the transport is unavailable). Where /dev/shm
  // has no O_TMPFILE, the file is created as `fallback_name` and unlinked at once.
  static Result<std::unique_ptr<OwnedSegment>> Create(const SegmentLayout& layout, int owner_rank,
                                                      const std::vector<int>& writers,
                                                      const std::string& comm_tag,
                                                      const std::string& fallback_name);
  OwnedSegment(const OwnedSegment&) = delete;
  OwnedSegment& operator=(const OwnedSegment&) = delete;
  ~OwnedSegment() = default;

  // "/proc/<pid>/fd/<fd>": valid until retire().
  const std::string& locator() const { return locator_; }
  // Closes the descriptor behind the locator, once every peer has mapped the segment (the
  // mappings keep it alive). Idempotent.
  void retire() { fd_ = OwnedFd(); }
  bool retired() const { return !fd_.valid(); }
  const SegmentView& view() const { return view_; }
  // st_dev of the file system holding the segment: equal only when two processes share /dev/shm.
  uint64_t device() const { return device_; }

 private:
  OwnedSegment() = default;
  OwnedFd fd_;
  std::string locator_;
  uint64_t device_ = 0;
  SegmentView view_;
};

// "/proc/<pid>/fd/<fd>".
std::string SegmentLocator(int pid, int fd);
// Whether `locator` is exactly SegmentLocator(pid, fd) for some fd: blobs come from other ranks,
// and only such a path may be opened on their word.
bool IsSegmentLocatorOf(const std::string& locator, int pid);

// Maps the segment at `locator` (created by another rank) and validates its header. `comm_tag`
// and `owner_rank` must match it.
Result<SegmentView> OpenSegment(const std::string& locator, const std::string& comm_tag,
                                int owner_rank);

// "/braid-<tag>-r<rank>-p<pid>-n<pid namespace>": unique per communicator and rank; the pid and
// namespace let RemoveStaleSegments() tell a dead creator's segment from a live one. Only used
// for the instant between create and unlink where /dev/shm has no O_TMPFILE.
std::string SegmentName(const std::string& comm_tag, int rank, int pid, uint64_t pidns);
// Inode of this process's pid namespace (0 when /proc is unavailable).
uint64_t PidNamespaceId();
// st_dev of /dev/shm (0 when it cannot be stat'ed).
uint64_t ShmDevice();

// Free bytes in /dev/shm for an unprivileged writer, or the test override.
Result<uint64_t> ShmFreeBytes();
// Test hook: pretend /dev/shm has `bytes` free (< 0 restores the real value).
void SetShmFreeBytesForTesting(int64_t bytes);

// "/dev/shm has 12 MiB free, needs 112 MiB: enlarge it (docker --shm-size) or set
// BRAID_SHM_RING_BYTES lower". With `rings_at_minimum`, lowering the ring size cannot help and
// the remedy names BRAID_NCHANNELS instead.
// `needed_for` ("for 4 local ranks x ...") follows the needed size when not empty.
std::string NoSpaceMessage(uint64_t free_bytes, uint64_t needed_bytes,
                           bool rings_at_minimum = false, const std::string& needed_for = "");

// Best effort: unlinks braid segments of this user and pid namespace whose creator no longer
// exists (left by older versions, or by a kill between create and unlink without O_TMPFILE).
// Returns how many were removed.
int RemoveStaleSegments();

}  // namespace braid::shm
