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

#include "core/log.h"

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
  uint64_t r = h.ring_bytes;
  if (r < kMinRingBytes || r > kMaxRingBytes || (r & (r - 1)) != 0) return false;
  layout->nslots = h.nslots;
  layout->nchannels = h.nchannels;
  layout->ring_bytes = r;
  return layout->totalBytes() == h.total_bytes && h.total_bytes <= file_bytes;
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

void SegmentView::prefault(uint32_t slot) const {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and fault lazily
#endif
  const uint64_t begin = layout.ringOffset(slot, 0) / kPageBytes * kPageBytes;
  const uint64_t end = layout.ringOffset(slot, layout.nchannels - 1) + layout.ringStride();
  (void)madvise(mapping->base() + begin, end - begin, MADV_POPULATE_WRITE);
}

int SegmentView::slotOf(int writer) const {
  for (size_t s = 0; s < writers.size(); ++s)
    if (writers[s] == writer) return static_cast<int>(s);
  return -1;
}

Result<std::unique_ptr<OwnedSegment>> OwnedSegment::Create(const std::string& name,
                                                           const SegmentLayout& layout,
                                                           int owner_rank,
                                                           const std::vector<int>& writers) {
  if (writers.size() != layout.nslots) return InternalError("shm: slot table size mismatch");
  const uint64_t total = layout.totalBytes();
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // The name carries our own pid and rank, so an existing one was left by a dead process that
    // had our pid: stale.
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) return SystemError(ErrnoMessage("shm_open(" + name + ")", errno));
  OwnedFd owned(fd);
  std::unique_ptr<OwnedSegment> seg(new (std::nothrow) OwnedSegment());
  if (!seg) {
    shm_unlink(name.c_str());
    return SystemError("shm: out of memory");
  }
  seg->name_ = name;
  seg->linked_ = true;  // from here on the destructor unlinks

  // Reserve every page now: tmpfs allocates lazily, and a page it cannot allocate on first
  // touch is a SIGBUS in the middle of a collective.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (rc == ENOSPC) {
    auto free_bytes = ShmFreeBytes();
    return SystemError("shm: reserving " + FormatBytes(total, true) + " for " + name + ": " +
                       NoSpaceMessage(free_bytes.ok() ? *free_bytes : 0, total));
  }
  if (rc != 0) return SystemError(ErrnoMessage("posix_fallocate(" + name + ")", rc));

  struct stat st;
  if (fstat(fd, &st) != 0) return SystemError(ErrnoMessage("fstat(" + name + ")", errno));
  seg->device_ = static_cast<uint64_t>(st.st_dev);

  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return SystemError(ErrnoMessage("mmap(" + name + ")", errno));
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
  h->total_bytes = total;
  h->owner_rank = owner_rank;
  h->nslots = layout.nslots;
  auto* table = reinterpret_cast<int32_t*>(static_cast<std::byte*>(base) + sizeof(SegmentHeader));
  for (uint32_t s = 0; s < layout.nslots; ++s) table[s] = writers[s];

  seg->view_.mapping = std::move(mapping);
  seg->view_.layout = layout;
  seg->view_.owner_rank = owner_rank;
  seg->view_.writers = writers;
  return seg;
}

void OwnedSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    BRAID_WARN("shm: shm_unlink(%s): %s", name_.c_str(), std::strerror(errno));
}

Result<SegmentView> OpenSegment(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return SystemError(ErrnoMessage("shm_open(" + name + ")", errno));
  OwnedFd owned(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return SystemError(ErrnoMessage("fstat(" + name + ")", errno));
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kPageBytes) return SystemError("shm: segment " + name + " is truncated");
  // No MAP_POPULATE: a peer's segment holds the rings of all its local peers, and we touch
  // only ours (see SegmentView::prefault).
  void* base = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return SystemError(ErrnoMessage("mmap(" + name + ")", errno));
  SegmentView view;
  view.mapping = std::shared_ptr<Mapping>(new (std::nothrow) Mapping(base, file_bytes));
  if (!view.mapping) {
    munmap(base, file_bytes);
    return SystemError("shm: out of memory");
  }
  SegmentHeader h;
  std::memcpy(&h, base, sizeof(h));
  if (!HeaderMatches(h, file_bytes, &view.layout) || view.layout.headerBytes() > file_bytes)
    return SystemError("shm: segment " + name + " has an invalid header");
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

uint64_t FitRingBytes(uint64_t requested, uint32_t nslots, uint32_t nchannels, uint64_t budget) {
  uint64_t ring = kMinRingBytes;
  while (ring * 2 <= requested && ring * 2 <= kMaxRingBytes) ring *= 2;
  for (; ring >= kMinRingBytes; ring /= 2) {
    SegmentLayout l{nslots, nchannels, ring};
    if (l.totalBytes() <= budget) return ring;
  }
  return 0;
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
