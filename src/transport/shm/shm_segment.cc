#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/base/log.h"
#include "transport/shm/shm_arena.h"

namespace braid::shm {
namespace {

std::atomic<int64_t> g_free_bytes_override{-1};

constexpr const char* kShmDir = "/dev/shm";
constexpr const char* kPrefix = "braid-";

// Whole MiB or KiB: free space rounds down and needs round up, so that the message never makes
// the shortage look smaller than it is.
std::string FormatBytes(uint64_t b, bool round_up) {
  char buf[64];
  const uint64_t mib = uint64_t{1} << 20;
  if (b >= (uint64_t{1} << 30) && b % (uint64_t{1} << 30) != 0 && b < (uint64_t{100} << 30))
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(b) / (1 << 30));
  else if (b >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof(buf), "%llu GiB", static_cast<unsigned long long>(b >> 30));
  else if (b >= mib)
    std::snprintf(buf, sizeof(buf), "%llu MiB",
                  static_cast<unsigned long long>((b + (round_up ? mib - 1 : 0)) / mib));
  else
    std::snprintf(buf, sizeof(buf), "%llu KiB",
                  static_cast<unsigned long long>((b + (round_up ? 1023 : 0)) / 1024));
  return buf;
}

// Parses "<digits>" at s[pos..end); false when empty or not all digits.
bool ParseDigits(const std::string& s, size_t pos, size_t end, uint64_t* out) {
  if (pos >= end) return false;
  uint64_t v = 0;
  for (size_t i = pos; i < end; ++i) {
    if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  *out = v;
  return true;
}

bool HeaderMatches(const SegmentHeader& h, uint64_t file_bytes, SegmentLayout* layout) {
  if (h.magic != kSegmentMagic || h.version != kSegmentVersion) return false;
  if (h.nchannels == 0 || h.nchannels > 1024 || h.nslots == 0 || h.nslots > (1 << 20)) return false;
  const uint64_t r = h.ring_bytes;
  if (r < kMinRingBytes || r > kMaxRingBytes || (r & (r - 1)) != 0) return false;
  layout->nslots = h.nslots;
  layout->nchannels = h.nchannels;
  layout->ring_bytes = r;
  layout->arena_bytes = h.arena_bytes;
  const uint64_t m = h.min_ring_bytes;
  if (m < kMinRingBytes || m > r || (m & (m - 1)) != 0) return false;
  layout->min_ring_bytes = m;
  if (h.board_bytes % kBoardAlignBytes != 0 || h.board_bytes > kMaxBoardBytes) return false;
  layout->board_bytes = h.board_bytes;
  // Every ring can always claim the minimum (shm_arena.h), and the file holds the whole arena.
  return layout->nrings() <= kMaxArenaRings && h.arena_bytes % kMinRingBytes == 0 &&
         h.arena_bytes / m >= layout->nrings() && h.arena_bytes <= file_bytes &&
         layout->totalBytes() == h.total_bytes && h.total_bytes <= file_bytes;
}

}  // namespace

OwnedFd& OwnedFd::operator=(OwnedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) close(fd_);
}

Mapping::~Mapping() {
  if (base_) munmap(base_, len_);
}

void SegmentView::prefault(uint64_t offset, uint64_t bytes) const {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and fault lazily
#endif
  const uint64_t begin = offset / kPageBytes * kPageBytes;
  (void)madvise(mapping->base() + begin, offset + bytes - begin, MADV_POPULATE_WRITE);
}

int SegmentView::slotOf(int writer) const {
  for (size_t s = 0; s < writers.size(); ++s)
    if (writers[s] == writer) return static_cast<int>(s);
  return -1;
}

namespace {

// The tag as the header holds it: truncated so that a NUL always ends it.
std::string HeaderTag(const std::string& comm_tag) {
  return comm_tag.substr(0, kHeaderTagBytes - 1);
}

// An unnamed file in /dev/shm. Without O_TMPFILE there (kernels before 3.11, file systems that
// lack it) the name exists only between the two calls below; RemoveStaleSegments() covers a kill
// in that instant.
Result<OwnedFd> CreateUnnamedFile(const std::string& fallback_name) {
  int fd = open(kShmDir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return OwnedFd(fd);
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
    return SystemError(ErrnoMessage(std::string("open(") + kShmDir + ", O_TMPFILE)", errno));
  fd = shm_open(fallback_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // The name carries our own pid and rank, so an existing one was left by a dead process that
    // had our pid: stale.
    shm_unlink(fallback_name.c_str());
    fd = shm_open(fallback_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) return SystemError(ErrnoMessage("shm_open(" + fallback_name + ")", errno));
  shm_unlink(fallback_name.c_str());
  return OwnedFd(fd);
}

}  // namespace

Result<std::unique_ptr<OwnedSegment>> OwnedSegment::Create(const SegmentLayout& layout,
                                                           int owner_rank,
                                                           const std::vector<int>& writers,
                                                           const std::string& comm_tag,
                                                           const std::string& fallback_name) {
  if (writers.size() != layout.nslots || layout.nrings() > kMaxArenaRings)
    return InternalError("shm: slot table size mismatch or too many rings");
  const uint64_t total = layout.totalBytes();
  std::unique_ptr<OwnedSegment> seg(new (std::nothrow) OwnedSegment());
  if (!seg) return SystemError("shm: out of memory");
  BRAID_ASSIGN_OR_RETURN(seg->fd_, CreateUnnamedFile(fallback_name));
  const int fd = seg->fd_.get();
  seg->locator_ = SegmentLocator(static_cast<int>(getpid()), fd);

  // Reserve every page now: tmpfs allocates lazily, and a page it cannot allocate on first
  // touch is a SIGBUS in the middle of a collective.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (rc == ENOSPC) {
    auto free_bytes = ShmFreeBytes();
    return SystemError("shm: reserving " + FormatBytes(total, true) + " for rank " +
                       std::to_string(owner_rank) +
                       "'s segment: " + NoSpaceMessage(free_bytes.ok() ? *free_bytes : 0, total));
  }
  if (rc != 0)
    return SystemError(ErrnoMessage("posix_fallocate(" + std::string(kShmDir) + ")", rc));

  struct stat st;
  if (fstat(fd, &st) != 0) return SystemError(ErrnoMessage("fstat(shm segment)", errno));
  seg->device_ = static_cast<uint64_t>(st.st_dev);
  // Peers reach the file only through the locator: make sure it works here (it needs /proc of
  // our pid namespace) rather than fail on every peer.
  {
    OwnedFd again(open(seg->locator_.c_str(), O_RDWR | O_CLOEXEC));
    struct stat st2;
    if (!again.valid() || fstat(again.get(), &st2) != 0 || st2.st_ino != st.st_ino ||
        st2.st_dev != st.st_dev)
      return SystemError("shm: cannot reopen this rank's segment through " + seg->locator_ +
                         " (is /proc mounted for this pid namespace?)");
  }

  // The pages are allocated and zeroed already; populating the page table saves the first
  // collective the faults (segments are small: see shm_sizing.h).
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return SystemError(ErrnoMessage("mmap(shm segment)", errno));
  auto mapping = std::shared_ptr<Mapping>(new (std::nothrow) Mapping(base, total));
  if (!mapping) {
    munmap(base, total);
    return SystemError("shm: out of memory");
  }

  // Fresh tmpfs pages are zero, so every ring starts empty with both flags clear.
  auto* h = reinterpret_cast<SegmentHeader*>(base);
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->nchannels = layout.nchannels;
  h->ring_bytes = layout.ring_bytes;
  h->arena_bytes = layout.arena_bytes;
  h->min_ring_bytes = layout.min_ring_bytes;
  h->board_bytes = layout.board_bytes;
  h->total_bytes = total;
  h->owner_rank = owner_rank;
  h->nslots = layout.nslots;
  const std::string tag = HeaderTag(comm_tag);
  std::memcpy(h->comm_tag, tag.data(), tag.size());
  auto* table = reinterpret_cast<int32_t*>(static_cast<std::byte*>(base) + sizeof(SegmentHeader));
  for (uint32_t s = 0; s < layout.nslots; ++s) table[s] = writers[s];
  reinterpret_cast<ArenaControl*>(static_cast<std::byte*>(base) + layout.arenaControlOffset())
      ->state.store(ArenaInitialState(layout.nrings()), std::memory_order_relaxed);

  seg->view_.mapping = std::move(mapping);
  seg->view_.layout = layout;
  seg->view_.owner_rank = owner_rank;
  seg->view_.writers = writers;
  return seg;
}

std::string SegmentLocator(int pid, int fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

bool IsSegmentLocatorOf(const std::string& locator, int pid) {
  const std::string prefix = "/proc/" + std::to_string(pid) + "/fd/";
  uint64_t fd = 0;
  return locator.size() > prefix.size() && locator.compare(0, prefix.size(), prefix) == 0 &&
         ParseDigits(locator, prefix.size(), locator.size(), &fd) && fd <= INT32_MAX &&
         locator == prefix + std::to_string(fd);  // no leading zeros: one spelling per fd
}

Result<SegmentView> OpenSegment(const std::string& locator, const std::string& comm_tag,
                                int owner_rank) {
  // Opening the creator's /proc entry reopens its file with our own access check (same user,
  // mode 0600); it fails with ENOENT once the creator is gone.
  int fd = open(locator.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return SystemError(ErrnoMessage("open(" + locator + ")", errno));
  OwnedFd owned(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return SystemError(ErrnoMessage("fstat(" + locator + ")", errno));
  if (!S_ISREG(st.st_mode)) return SystemError("shm: " + locator + " is not a segment");
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kPageBytes) return SystemError("shm: segment " + locator + " is truncated");
  // No MAP_POPULATE: a peer's segment holds the rings of all its local peers, and we touch
  // only ours (see SegmentView::prefault).
  void* base = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return SystemError(ErrnoMessage("mmap(" + locator + ")", errno));
  SegmentView view;
  view.mapping = std::shared_ptr<Mapping>(new (std::nothrow) Mapping(base, file_bytes));
  if (!view.mapping) {
    munmap(base, file_bytes);
    return SystemError("shm: out of memory");
  }
  SegmentHeader h;
  std::memcpy(&h, base, sizeof(h));
  if (!HeaderMatches(h, file_bytes, &view.layout) || view.layout.headerBytes() > file_bytes)
    return SystemError("shm: segment " + locator + " has an invalid header");
  const std::string tag(h.comm_tag, strnlen(h.comm_tag, sizeof(h.comm_tag)));
  if (tag != HeaderTag(comm_tag) || h.owner_rank != owner_rank)
    return SystemError("shm: " + locator + " is not rank " + std::to_string(owner_rank) +
                       "'s segment of this communicator (it belongs to rank " +
                       std::to_string(h.owner_rank) + " of communicator " + tag + ")");
  view.owner_rank = h.owner_rank;
  view.writers.resize(h.nslots);
  std::memcpy(view.writers.data(), static_cast<std::byte*>(base) + sizeof(SegmentHeader),
              h.nslots * sizeof(int32_t));
  return view;
}

std::string SegmentName(const std::string& comm_tag, int rank, int pid, uint64_t pidns) {
  // Only [0-9A-Za-z] of the tag, so the name is always one valid path component.
  std::string tag;
  for (char c : comm_tag) {
    if (tag.size() >= 64) break;
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) tag += c;
  }
  if (tag.empty()) tag.push_back('x');
  // Appends rather than operator+ chains: GCC 12 warns falsely (-Wrestrict) on those.
  std::string name = "/";
  name.append(kPrefix).append(tag);
  name.append("-r").append(std::to_string(rank));
  name.append("-p").append(std::to_string(pid));
  name.append("-n").append(std::to_string(pidns));
  return name;
}

uint64_t PidNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

uint64_t ShmDevice() {
  struct stat st;
  if (stat(kShmDir, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_dev);
}

Result<uint64_t> ShmFreeBytes() {
  int64_t forced = g_free_bytes_override.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<uint64_t>(forced);
  struct statvfs vfs;
  if (statvfs(kShmDir, &vfs) != 0)
    return SystemError(ErrnoMessage(std::string("statvfs(") + kShmDir + ")", errno) +
                       ": shared memory needs a tmpfs mounted at /dev/shm");
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

void SetShmFreeBytesForTesting(int64_t bytes) {
  g_free_bytes_override.store(bytes, std::memory_order_relaxed);
}

std::string NoSpaceMessage(uint64_t free_bytes, uint64_t needed_bytes, bool rings_at_minimum,
                           const std::string& needed_for) {
  std::string m = "/dev/shm has " + FormatBytes(free_bytes, false);
  m += " free, needs " + FormatBytes(needed_bytes, true);
  if (!needed_for.empty()) m += " " + needed_for;
  m += rings_at_minimum ? ": enlarge it (docker --shm-size) or set BRAID_NCHANNELS lower (rings "
                          "are already at the " +
                              FormatBytes(kMinRingBytes, false) + " minimum)"
                        : ": enlarge it (docker --shm-size) or set BRAID_SHM_RING_BYTES lower";
  return m;
}

int RemoveStaleSegments() {
  DIR* dir = opendir(kShmDir);
  if (!dir) return 0;
  const std::string ns_suffix = "-n" + std::to_string(PidNamespaceId());
  const uid_t uid = geteuid();
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    std::string n = e->d_name;
    if (n.compare(0, std::strlen(kPrefix), kPrefix) != 0) continue;
    // Only our pid namespace: a pid means nothing in another one.
    if (n.size() <= ns_suffix.size() ||
        n.compare(n.size() - ns_suffix.size(), ns_suffix.size(), ns_suffix) != 0)
      continue;
    size_t end = n.size() - ns_suffix.size();
    size_t p = n.rfind("-p", end);
    uint64_t pid = 0;
    if (p == std::string::npos || !ParseDigits(n, p + 2, end, &pid) || pid == 0 || pid > INT32_MAX)
      continue;
    struct stat st;
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != uid ||
        !S_ISREG(st.st_mode))
      continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or unknown)
    if (shm_unlink(("/" + n).c_str()) == 0) {
      ++removed;
      BRAID_INFO("shm: removed stale segment /dev/shm/%s (pid %llu is gone)", n.c_str(),
                 static_cast<unsigned long long>(pid));
    }
  }
  closedir(dir);
  return removed;
}

}  // namespace braid::shm
