// POSIX shared-memory segments for the shm transport: creating this rank's segment (sized
// against free /dev/shm space and reserved up front), mapping a peer's, naming, and removing
// segments left behind by dead processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
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
  // Best effort: maps the pages of one slot's rings now, so that the first collective does not
  // pay the page faults.
  void prefault(uint32_t slot) const;
  RingControl* control(uint32_t slot, uint32_t channel) const {
    return reinterpret_cast<RingControl*>(mapping->base() + layout.ringOffset(slot, channel));
  }
  std::byte* data(uint32_t slot, uint32_t channel) const {
    return mapping->base() + layout.ringOffset(slot, channel) + kRingControlBytes;
  }
};

// The segment this rank creates. Owns its name: unlinked by unlink() or on destruction, so a
// failed init leaves nothing behind.
class OwnedSegment {
 public:
  // Creates `name` (O_EXCL, mode 0600), reserves its pages with posix_fallocate (a full /dev/shm
  // is ENOSPC here, never SIGBUS later), maps it and writes the header.
  static Result<std::unique_ptr<OwnedSegment>> Create(const std::string& name,
                                                      const SegmentLayout& layout, int owner_rank,
                                                      const std::vector<int>& writers);
  OwnedSegment(const OwnedSegment&) = delete;
  OwnedSegment& operator=(const OwnedSegment&) = delete;
  ~OwnedSegment() { unlink(); }

  // Removes the name (the mapping stays valid). Idempotent.
  void unlink();
  bool linked() const { return linked_; }
  const std::string& name() const { return name_; }
  const SegmentView& view() const { return view_; }
  // st_dev of the file system holding the segment: equal only when two processes share /dev/shm.
  uint64_t device() const { return device_; }

 private:
  OwnedSegment() = default;
  std::string name_;
  bool linked_ = false;
  uint64_t device_ = 0;
  SegmentView view_;
};

// Maps the segment called `name` (created by another rank) and validates its header.
Result<SegmentView> OpenSegment(const std::string& name);

// "/braid-<tag>-r<rank>-p<pid>-n<pid namespace>": unique per communicator and rank; the pid and
// namespace let RemoveStaleSegments() tell a dead creator's segment from a live one.
std::string SegmentName(const std::string& comm_tag, int rank, int pid, uint64_t pidns);
// Inode of this process's pid namespace (0 when /proc is unavailable).
uint64_t PidNamespaceId();
// st_dev of /dev/shm (0 when it cannot be stat'ed).
uint64_t ShmDevice();

// Free bytes in /dev/shm for an unprivileged writer, or the test override.
Result<uint64_t> ShmFreeBytes();
// Test hook: pretend /dev/shm has `bytes` free (< 0 restores the real value).
void SetShmFreeBytesForTesting(int64_t bytes);

// The largest power of two <= `requested` and >= kMinRingBytes for which a segment of `nslots` x
// `nchannels` rings fits in `budget` bytes; 0 when not even kMinRingBytes fits.
uint64_t FitRingBytes(uint64_t requested, uint32_t nslots, uint32_t nchannels, uint64_t budget);

// "/dev/shm has 12 MiB free, needs 112 MiB: enlarge it (docker --shm-size) or set
// BRAID_SHM_RING_BYTES lower". With `rings_at_minimum`, lowering the ring size cannot help and
// the remedy names BRAID_NCHANNELS instead.
// `needed_for` ("for 4 local ranks x ...") follows the needed size when not empty.
std::string NoSpaceMessage(uint64_t free_bytes, uint64_t needed_bytes,
                           bool rings_at_minimum = false, const std::string& needed_for = "");

// Best effort: unlinks braid segments of this user and pid namespace whose creator no longer
// exists. Returns how many were removed.
int RemoveStaleSegments();

}  // namespace braid::shm
