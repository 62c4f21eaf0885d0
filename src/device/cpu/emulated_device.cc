#include "device/cpu/emulated_device.h"

#include "device/cpu/reduce_kernels.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

namespace braid::device {

namespace {

// Flags are plain uint32_t words (host-mapped memory on a GPU); every access goes through an
// atomic_ref so the host, the stream workers and the agent agree on them.
uint32_t LoadFlag(const uint32_t* flag) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(flag)).load(std::memory_order_acquire);
}

// Private futexes: every waiter and writer of an emulated flag is in this process.
void FutexWait(const uint32_t* word, uint32_t seen, std::chrono::nanoseconds limit) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  syscall(SYS_futex, const_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}
void FutexWakeAll(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void StoreFlag(uint32_t* flag, uint32_t value) {
  std::atomic_ref<uint32_t>(*flag).store(value, std::memory_order_release);
  FutexWakeAll(flag);
}

// An emulated IPC handle: "braidemu", then the exporter's pid, its memfd's descriptor, the
// allocation's size and serial (also in the memfd's name, "braid-emulated-<pid>-<serial>").
struct EmulatedIpc {
  char magic[8];
  int32_t pid;
  int32_t fd;
  uint64_t size;
  uint64_t serial;
};
static_assert(sizeof(EmulatedIpc) <= IpcHandle::kBytes);
constexpr char kIpcMagic[8] = {'b', 'r', 'a', 'i', 'd', 'e', 'm', 'u'};

std::string MemfdName(int pid, uint64_t serial) {
  return "braid-emulated-" + std::to_string(pid) + "-" + std::to_string(serial);
}

std::atomic<uint64_t> g_serial{0};

size_t PageRound(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

struct EmulatedDevice::Stream {
  std::mutex mu;
  std::condition_variable work;  // an op was queued, or stop
  std::condition_variable idle;  // an op finished
  std::deque<std::function<Status()>> ops;
  uint64_t queued = 0;
  uint64_t finished = 0;
  std::atomic<bool> stop{false};
  std::atomic<bool> capturing{false};
  std::atomic<bool> paused{false};
  std::condition_variable resumed;  // paused went false, or stop
  Status error;  // the first op that failed; later ops still run (as on a GPU, the next sync says)
  std::thread worker;
};

EmulatedDevice::EmulatedDevice(Mode mode, std::chrono::microseconds flag_poll, bool single_queue)
    : mode_(mode), flag_poll_(flag_poll) {
  if (single_queue) {
    hardware_queue_ = std::make_unique<Stream>();
    hardware_queue_->worker = std::thread(&EmulatedDevice::runStream, hardware_queue_.get());
  }
}

EmulatedDevice::~EmulatedDevice() {
  std::unordered_map<StreamHandle, std::unique_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
  }
  for (auto& [h, st] : streams) {
    {
      std::lock_guard<std::mutex> lock(st->mu);
      st->stop = true;
    }
    st->work.notify_all();
    st->resumed.notify_all();
    if (st->worker.joinable()) st->worker.join();
  }
  if (hardware_queue_) {
    // Its work refers to the streams stopped above (their waits there now fail): it is drained
    // and joined before they are freed, at the end of this scope.
    {
      std::lock_guard<std::mutex> lock(hardware_queue_->mu);
      hardware_queue_->stop = true;
    }
    hardware_queue_->work.notify_all();
    hardware_queue_->worker.join();
  }
  for (auto& [addr, a] : allocations_) {
    if (a.kind == MemoryKind::kPinnedHost) {
      std::free(a.backing);
      continue;
    }
    unmap(addr, a);
  }
}

void EmulatedDevice::unmap(uintptr_t addr, const Allocation& a) {
  if (a.backing != reinterpret_cast<char*>(addr)) munmap(reinterpret_cast<void*>(addr), a.size);
  munmap(a.backing, a.size);
  if (a.fd >= 0) close(a.fd);
}

const char* EmulatedDevice::name() const {
  return mode_ == Mode::kSeparate ? "emulated" : "emulated-host";
}

EmulatedDevice::Allocations::iterator EmulatedDevice::allocationAt(uintptr_t addr) {
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) return allocations_.end();
  --it;
  return addr < it->first + it->second.size ? it : allocations_.end();
}

Result<PointerInfo> EmulatedDevice::classify(const void* p) {
  PointerInfo info;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocationAt(reinterpret_cast<uintptr_t>(p));
  if (it == allocations_.end()) return info;
  info.kind = it->second.kind;
  info.device = info.kind == MemoryKind::kPinnedHost ? -1 : 0;
  info.base = reinterpret_cast<const void*>(it->first);
  info.size = it->second.size;
  return info;
}

Result<void*> EmulatedDevice::allocate(size_t bytes, MemoryKind kind) {
  if (kind == MemoryKind::kPinnedHost) {
    Allocation a{};
    a.kind = kind;
    a.size = std::max<size_t>(bytes, 1);
    void* addr = nullptr;
    if (posix_memalign(&addr, 64, a.size) != 0)
      return SystemError("emulated device: cannot allocate " + std::to_string(bytes) +
                         " bytes of host-mapped memory");
    std::memset(addr, 0, a.size);
    a.backing = static_cast<char*>(addr);
    std::lock_guard<std::mutex> lock(mu_);
    allocations_[reinterpret_cast<uintptr_t>(addr)] = a;
    return addr;
  }
  // Device memory lives in a memfd, so that exportAllocation can share it with another process.
  const uint64_t serial = g_serial.fetch_add(1) + 1;
  const int fd =
      static_cast<int>(syscall(SYS_memfd_create, MemfdName(getpid(), serial).c_str(), MFD_CLOEXEC));
  if (fd < 0) return SystemError(ErrnoMessage("emulated device: memfd_create", errno));
  const size_t size = PageRound(bytes);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    return SystemError(
        ErrnoMessage("emulated device: sizing " + std::to_string(bytes) + " bytes", err));
  }
  return mapDevice(fd, size, serial, /*peer=*/false);
}

Result<void*> EmulatedDevice::mapDevice(int fd, size_t size, uint64_t serial, bool peer) {
  Allocation a{};
  a.kind = MemoryKind::kDevice;
  a.size = size;
  a.fd = fd;
  a.serial = serial;
  a.peer = peer;
  void* backing = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (backing == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return SystemError(
        ErrnoMessage("emulated device: mmap of " + std::to_string(size) + " bytes", err));
  }
  a.backing = static_cast<char*>(backing);
  void* addr = backing;
  if (mode_ == Mode::kSeparate) {
    // An address range of its own that the host cannot touch: the device pointer.
    addr = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      munmap(backing, size);
      close(fd);
      return SystemError(ErrnoMessage("emulated device: reserving device addresses", err));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[reinterpret_cast<uintptr_t>(addr)] = a;
  return addr;
}

Status EmulatedDevice::release(void* p, MemoryKind kind) {
  if (!p) return Status::Ok();
  Allocation a{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.end() || it->second.kind != kind)
      return InvalidArgument("emulated device: " + PointerText(p) + " is not the start of a live " +
                             MemoryKindName(kind) + " allocation");
    if (it->second.peer)
      return InvalidArgument("emulated device: " + PointerText(p) +
                             " is another process's allocation opened here: close it with "
                             "closePeerAllocation, not free it");
    if (it->second.stream_refs > 0) {
      unsafe_frees_.fetch_add(1);
      return InvalidUsage("emulated device: host-mapped memory at " + PointerText(p) +
                          " freed while " + std::to_string(it->second.stream_refs) +
                          " queued stream operations still use it (kept until the device ends)");
    }
    a = it->second;
    allocations_.erase(it);
  }
  if (kind == MemoryKind::kPinnedHost) {
    std::free(a.backing);
    return Status::Ok();
  }
  unmap(reinterpret_cast<uintptr_t>(p), a);
  return Status::Ok();
}

Result<IpcHandle> EmulatedDevice::exportAllocation(const void* base) {
  if (refuse_exports_.load())
    return SystemError("emulated device: exports refused (refuseExports, a test's)");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(base));
  if (it == allocations_.end() || it->second.kind != MemoryKind::kDevice || it->second.peer)
    return InvalidArgument("emulated device: cannot export " + PointerText(base) +
                           ": not the start of a device allocation made in this process");
  EmulatedIpc e{};
  std::memcpy(e.magic, kIpcMagic, sizeof(kIpcMagic));
  e.pid = static_cast<int32_t>(getpid());
  e.fd = it->second.fd;
  e.size = it->second.size;
  e.serial = it->second.serial;
  IpcHandle h;
  std::memcpy(h.bytes, &e, sizeof(e));
  return h;
}

Result<void*> EmulatedDevice::openPeerAllocation(const IpcHandle& h) {
  EmulatedIpc e{};
  std::memcpy(&e, h.bytes, sizeof(e));
  if (std::memcmp(e.magic, kIpcMagic, sizeof(kIpcMagic)) != 0 || e.pid <= 0 || e.fd < 0 ||
      e.size == 0)
    return InvalidArgument("emulated device: not an IPC handle of the emulated device");
  if (e.pid == getpid())
    return InvalidUsage(
        "emulated device: the IPC handle names an allocation of this process "
        "(use its pointer)");
  // The descriptor must still be the exporter's memfd of that allocation: a process that exited,
  // or freed the allocation (its descriptor closed or reused), is an error, not other bytes.
  const std::string link = "/proc/" + std::to_string(e.pid) + "/fd/" + std::to_string(e.fd);
  const std::string expect = "/memfd:" + MemfdName(e.pid, e.serial);
  char target[256] = {};
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n < 0 || std::string(target, static_cast<size_t>(n)).rfind(expect, 0) != 0)
    return SystemError("emulated device: the allocation of process " + std::to_string(e.pid) +
                       " that the IPC handle names is gone (" + link + ": " +
                       (n < 0 ? std::string(std::strerror(errno)) : std::string(target)) + ")");
  const int fd = open(link.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return SystemError(ErrnoMessage("emulated device: opening " + link, errno));
  // What was opened, named again (the exporter may have freed it between the two looks).
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t m = readlink(self.c_str(), target, sizeof(target) - 1);
  struct stat st {};
  if (m < 0 || std::string(target, static_cast<size_t>(m)).rfind(expect, 0) != 0 ||
      fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != e.size) {
    close(fd);
    return SystemError("emulated device: the allocation of process " + std::to_string(e.pid) +
                       " that the IPC handle names was freed while it was being opened");
  }
  return mapDevice(fd, e.size, e.serial, /*peer=*/true);
}

void EmulatedDevice::failAfter(FaultOp op, int pass, int fail) {
  std::lock_guard<std::mutex> lock(fault_mu_);
  faults_[static_cast<size_t>(op)] = FaultPlan{pass, fail};
}

Status EmulatedDevice::injectedFault(FaultOp op) {
  static constexpr const char* kNames[] = {"copyAsync",        "writeValue32", "waitValue32",
                                           "launchPeerReduce", "allocDevice",  "allocHostMapped"};
  static_assert(std::size(kNames) == sizeof(faults_) / sizeof(faults_[0]));
  std::lock_guard<std::mutex> lock(fault_mu_);
  FaultPlan& f = faults_[static_cast<size_t>(op)];
  if (f.fail == 0) return Status::Ok();
  if (f.pass > 0) {
    --f.pass;
    return Status::Ok();
  }
  --f.fail;
  injected_.fetch_add(1);
  return SystemError(std::string("emulated device: injected failure of ") +
                     kNames[static_cast<size_t>(op)]);
}

Status EmulatedDevice::launchPeerReduce(const PeerReduce& r, StreamHandle s) {
  BRAID_RETURN_IF_ERROR(injectedFault(FaultOp::kLaunch));
  if (!IsValidDataType(static_cast<int>(r.type)) || static_cast<int>(r.op) >= kNumReduceOps ||
      !r.wellFormed())
    return InvalidArgument(
        "emulated device: a peer reduce with a bad type or op, without a source or a "
        "destination, or pairwise with unequal counts of them");
  const size_t bytes = r.count * DataTypeSize(r.type);
  // The ranges must lie in allocations (or host memory) now, as a GPU would fault on them later
  // (late pointers: when the kernel reads them).
  for (const void* p : r.src) BRAID_RETURN_IF_ERROR(hostView(p, bytes).status());
  for (void* p : r.dst) BRAID_RETURN_IF_ERROR(hostView(p, bytes).status());
  if (r.late) BRAID_RETURN_IF_ERROR(hostView(r.late, sizeof(PeerPointers)).status());
  return enqueue(s,
                 [this, r, bytes]() -> Status {
                   if (LoadFlag(r.skip) == r.skip_value || r.count == 0) return Status::Ok();
                   std::vector<const void*> src = r.src;
                   std::vector<void*> dst = r.dst;
                   if (r.late) {
                     // As the kernel does: read once, after `skip`, from host-mapped memory.
                     BRAID_ASSIGN_OR_RETURN(void* t, hostView(r.late, sizeof(PeerPointers)));
                     PeerPointers late;
                     std::memcpy(&late, t, sizeof(late));
                     src.assign(late.src, late.src + r.late_src);
                     dst.assign(late.dst, late.dst + r.late_dst);
                   }
                   if (r.pairwise) {
                     for (size_t k = 0; k < src.size(); ++k) {
                       BRAID_ASSIGN_OR_RETURN(void* in, hostView(src[k], bytes));
                       BRAID_ASSIGN_OR_RETURN(void* out, hostView(dst[k], bytes));
                       std::memmove(out, in, bytes);
                     }
                     return Status::Ok();
                   }
                   std::vector<char> acc(bytes);
                   // Views resolved as the kernel runs: a peer's allocation is mapped here until
                   // its window goes.
                   BRAID_ASSIGN_OR_RETURN(void* first, hostView(src[0], bytes));
                   std::memcpy(acc.data(), first, bytes);
                   for (size_t k = 1; k < src.size(); ++k) {
                     BRAID_ASSIGN_OR_RETURN(void* in, hostView(src[k], bytes));
                     ReduceKernel(r.type, r.op, acc.data(), in, acc.data(), r.count);
                   }
                   if (r.divide_by > 1) DivideKernel(r.type, acc.data(), r.count, r.divide_by);
                   for (void* d : dst) {
                     BRAID_ASSIGN_OR_RETURN(void* out, hostView(d, bytes));
                     std::memcpy(out, acc.data(), bytes);
                   }
                   return Status::Ok();
                 },
                 {r.skip, r.late});
}

Status EmulatedDevice::closePeerAllocation(void* base) {
  Allocation a{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(base));
    if (it == allocations_.end() || !it->second.peer)
      return InvalidArgument("emulated device: " + PointerText(base) +
                             " is not a peer allocation opened here");
    a = it->second;
    allocations_.erase(it);
  }
  unmap(reinterpret_cast<uintptr_t>(base), a);
  return Status::Ok();
}

Result<void*> EmulatedDevice::allocDevice(size_t bytes) {
  BRAID_RETURN_IF_ERROR(injectedFault(FaultOp::kAllocDevice));
  return allocate(bytes, MemoryKind::kDevice);
}
Status EmulatedDevice::freeDevice(void* p) {
  return release(p, MemoryKind::kDevice);
}
Result<void*> EmulatedDevice::allocHostMapped(size_t bytes) {
  BRAID_RETURN_IF_ERROR(injectedFault(FaultOp::kAllocHostMapped));
  return allocate(bytes, MemoryKind::kPinnedHost);
}
Status EmulatedDevice::freeHostMapped(void* p) {
  return release(p, MemoryKind::kPinnedHost);
}

size_t EmulatedDevice::deviceAllocations() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [addr, a] : allocations_) n += a.kind == MemoryKind::kDevice ? 1 : 0;
  return n;
}

Result<void*> EmulatedDevice::hostView(const void* p, size_t bytes) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocationAt(addr);
  if (it == allocations_.end()) return const_cast<void*>(p);  // not ours: host memory
  const Allocation& a = it->second;
  if (bytes > a.size - (addr - it->first))
    return InvalidArgument("emulated device: " + std::to_string(bytes) + " bytes at " +
                           PointerText(p) + " run past the end of their " + MemoryKindName(a.kind) +
                           " allocation (" + std::to_string(a.size) + " bytes at " +
                           PointerText(reinterpret_cast<void*>(it->first)) + ")");
  return static_cast<void*>(a.backing + (addr - it->first));
}

// ------------------------------------------------------------------ streams

void EmulatedDevice::runStream(Stream* st) {
  for (;;) {
    std::function<Status()> op;
    {
      std::unique_lock<std::mutex> lock(st->mu);
      st->work.wait(lock, [&] { return st->stop.load() || !st->ops.empty(); });
      if (st->ops.empty()) return;  // stopped and drained
      op = std::move(st->ops.front());
      st->ops.pop_front();
    }
    Status s = op();
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (!s.ok() && st->error.ok()) st->error = std::move(s);
      ++st->finished;
    }
    st->idle.notify_all();
  }
}

Result<StreamHandle> EmulatedDevice::createStream() {
  auto st = std::make_unique<Stream>();
  Stream* raw = st.get();
  st->worker = std::thread(&EmulatedDevice::runStream, raw);
  std::lock_guard<std::mutex> lock(mu_);
  streams_[raw] = std::move(st);
  return static_cast<StreamHandle>(raw);
}

EmulatedDevice::Stream* EmulatedDevice::findStream(StreamHandle s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!s) {
    if (!default_stream_) {
      auto st = std::make_unique<Stream>();
      default_stream_ = st.get();
      st->worker = std::thread(&EmulatedDevice::runStream, default_stream_);
      // Keyed apart from every handle: the default stream is reached only as 0.
      streams_[static_cast<StreamHandle>(&default_stream_)] = std::move(st);
    }
    return default_stream_;
  }
  auto it = streams_.find(s);
  return it == streams_.end() ? nullptr : it->second.get();
}

Result<EmulatedDevice::Stream*> EmulatedDevice::liveStream(StreamHandle s) {
  Stream* st = findStream(s);
  if (!st)
    return InvalidArgument("stream " + PointerText(s) + " is not a live stream of the " +
                           std::string(name()) + " device");
  return st;
}

Status EmulatedDevice::checkStream(StreamHandle s) {
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  if (st->capturing.load())
    return InvalidUsage("stream " + PointerText(s) +
                        " is capturing a graph: braid cannot capture a stream-ordered call yet; "
                        "call it outside the capture");
  return Status::Ok();
}

Status EmulatedDevice::setCapturing(StreamHandle s, bool capturing) {
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  st->capturing = capturing;
  return Status::Ok();
}

Status EmulatedDevice::destroyStream(StreamHandle s) {
  if (!s) return InvalidArgument("the default stream (0) cannot be destroyed");
  std::unique_ptr<Stream> st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(s);
    if (it == streams_.end())
      return InvalidArgument("stream " + PointerText(s) + " is not a live stream of the " + name() +
                             " device");
    st = std::move(it->second);
    streams_.erase(it);
  }
  // The worker runs what was queued, then ends; a flag wait still pending fails (the stream is
  // going away), so destroying a stream never hangs.
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->stop = true;
  }
  st->work.notify_all();
  st->resumed.notify_all();
  st->worker.join();
  if (hardware_queue_) {
    // Its work runs in the hardware queue and refers to it: wait until all of it has run (its
    // waits fail now that it stopped; other streams' waits ahead of it may hold the queue, as
    // cudaStreamDestroy's pending work waits on a GPU).
    std::unique_lock<std::mutex> lock(st->mu);
    st->idle.wait(lock, [&] { return st->finished >= st->queued; });
  }
  return Status::Ok();
}

void EmulatedDevice::holdWhilePaused(Stream* st) {
  if (!st->paused.load()) return;
  std::unique_lock<std::mutex> lock(st->mu);
  st->resumed.wait(lock, [&] { return !st->paused.load() || st->stop.load(); });
}

Status EmulatedDevice::pauseStream(StreamHandle s) {
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  st->paused = true;
  return Status::Ok();
}

Status EmulatedDevice::resumeStream(StreamHandle s) {
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->paused = false;
  }
  st->resumed.notify_all();
  return Status::Ok();
}

Status EmulatedDevice::enqueue(StreamHandle s, std::function<Status()> op,
                               std::initializer_list<const void*> uses) {
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  // The host-mapped allocations the op touches stay in use until it has run.
  std::vector<uintptr_t> pinned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const void* p : uses) {
      auto it = allocationAt(reinterpret_cast<uintptr_t>(p));
      if (it == allocations_.end() || it->second.kind != MemoryKind::kPinnedHost) continue;
      ++it->second.stream_refs;
      pinned.push_back(it->first);
    }
  }
  op = [this, st, op = std::move(op), pinned = std::move(pinned)]() -> Status {
    holdWhilePaused(st);
    Status result = op();
    std::lock_guard<std::mutex> lock(mu_);
    for (uintptr_t base : pinned) {
      auto it = allocations_.find(base);
      if (it != allocations_.end()) --it->second.stream_refs;
    }
    return result;
  };
  if (hardware_queue_) {
    {
      std::lock_guard<std::mutex> lock(st->mu);
      ++st->queued;
    }
    // Run in the one queue; the stream counts it done (and keeps its error) as its own worker
    // would.
    Stream* hw = hardware_queue_.get();
    {
      std::lock_guard<std::mutex> lock(hw->mu);
      hw->ops.push_back([st, op = std::move(op)]() -> Status {
        Status s = op();
        // Notified under the lock: destroyStream may free the stream as soon as it sees the count.
        std::lock_guard<std::mutex> lock(st->mu);
        if (!s.ok() && st->error.ok()) st->error = std::move(s);
        ++st->finished;
        st->idle.notify_all();
        return Status::Ok();
      });
      ++hw->queued;
    }
    hw->work.notify_one();
    return Status::Ok();
  }
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->ops.push_back(std::move(op));
    ++st->queued;
  }
  st->work.notify_one();
  return Status::Ok();
}

Status EmulatedDevice::copyAsync(void* dst, const void* src, size_t bytes, StreamHandle s) {
  BRAID_RETURN_IF_ERROR(injectedFault(FaultOp::kCopy));
  if (bytes == 0) return checkStream(s);
  // Resolved now, so a bad range fails the call rather than the stream.
  BRAID_ASSIGN_OR_RETURN(void* to, hostView(dst, bytes));
  BRAID_ASSIGN_OR_RETURN(void* from, hostView(src, bytes));
  return enqueue(s,
                 [this, to, from, bytes, dst, src] {
                   if (copy_hook_) copy_hook_(dst, src, bytes);
                   std::memmove(to, from, bytes);
                   return Status::Ok();
                 },
                 {dst, src});
}

Status EmulatedDevice::writeValue32(StreamHandle s, uint32_t* flag, uint32_t value) {
  BRAID_RETURN_IF_ERROR(injectedFault(FaultOp::kWriteValue));
  BRAID_ASSIGN_OR_RETURN(PointerInfo info, classify(flag));
  if (info.kind != MemoryKind::kPinnedHost)
    return InvalidArgument("emulated device: flag " + PointerText(flag) +
                           " is not host-mapped memory");
  return enqueue(s,
                 [flag, value] {
                   StoreFlag(flag, value);
                   return Status::Ok();
                 },
                 {flag});
}

Status EmulatedDevice::waitValue32(StreamHandle s, const uint32_t* flag, uint32_t value) {
  BRAID_RETURN_IF_ERROR(injectedFault(FaultOp::kWaitValue));
  BRAID_ASSIGN_OR_RETURN(PointerInfo info, classify(flag));
  if (info.kind != MemoryKind::kPinnedHost)
    return InvalidArgument("emulated device: flag " + PointerText(flag) +
                           " is not host-mapped memory");
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  return enqueue(s,
                 [this, st, flag, value, poll = flag_poll_]() -> Status {
                   bool blocked = false;
                   Status result;
                   for (;;) {
                     holdWhilePaused(st);  // a paused stream does not look at the flag
                     const uint32_t seen = LoadFlag(flag);
                     if (FlagReached(seen, value)) {
                       // Paused meanwhile: it completes no wait, it holds and looks again.
                       if (st->paused.load() && !st->stop.load()) continue;
                       break;
                     }
                     if (st->stop.load()) {
                       result =
                           AbortedError("emulated stream stopped while waiting for flag " +
                                        PointerText(flag) + " to reach " + std::to_string(value));
                       break;
                     }
                     if (!blocked) blocked_waits_.fetch_add(1);
                     blocked = true;
                     FutexWait(flag, seen, poll);
                   }
                   if (blocked) blocked_waits_.fetch_sub(1);
                   return result;
                 },
                 {flag});
}

Status EmulatedDevice::launchHostFunction(StreamHandle s, std::function<void()> fn) {
  return enqueue(s, [fn = std::move(fn)] {
    fn();
    return Status::Ok();
  });
}

Status EmulatedDevice::synchronize(StreamHandle s) {
  BRAID_ASSIGN_OR_RETURN(Stream * st, liveStream(s));
  std::unique_lock<std::mutex> lock(st->mu);
  const uint64_t target = st->queued;
  st->idle.wait(lock, [&] { return st->finished >= target; });
  return st->error;
}

void EmulatedDevice::hostWriteFlag(uint32_t* flag, uint32_t value) {
  StoreFlag(flag, value);
}

bool EmulatedDevice::hostWaitFlag(const uint32_t* flag, uint32_t value,
                                  std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const uint32_t seen = LoadFlag(flag);
    if (FlagReached(seen, value)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    FutexWait(flag, seen, std::min<std::chrono::nanoseconds>(deadline - now, flag_poll_));
  }
}

}  // namespace braid::device
