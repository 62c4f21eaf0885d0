// Peer windows (nccl/peer_windows.h; issue 39's intra-node GPU path): ncclCommWindowRegister maps
// the node's peers' window memory into each rank, through the device runtime's IPC handles
// (separate processes) or by address (ranks of one process). On the emulated device
// (BRAID_DEVICE=emulated: memfd-backed device memory the host cannot touch) and on braid's CUDA
// runtime over the fake driver (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle).
// Checked: each rank reads every peer's window bytes through its mapping and writes into every
// peer's window, each allocation is opened once per process however many windows lie in it,
// deregistration and destroy close the mappings, and a bad window or a mapping that fails on one
// rank fails the registration on every rank with that rank's reason, nothing left mapped.
//
// The shim's objects are linked into this binary with the core (braid_nccl_objects), so that the
// test's emulated device is the one the shim uses.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu/emulated_device.h"
#include "device/peer_memory.h"
#include "multirank/harness.h"
#include "multirank/nccl_shim_job.h"
#include "nccl.h"
#include "nccl/peer_windows.h"

using braid::device::EmulatedDevice;
using braid::device::ProcessPeerMemory;
using braid::nccl::WindowPeerPointer;
using braid_test::AllSucceeded;
using braid_test::DescribeOutcomes;
using braid_test::JobOptions;
using braid_test::RunJob;
using braid_test::shim::Job;
using braid_test::shim::JoinNccl;

#undef CHECK_OR_FAIL
#define CHECK_OR_FAIL(cond, ...) CHECK_OR_FAIL_WITH(ncclGetLastError(nullptr), cond, __VA_ARGS__)

namespace {

// Rank r's window bytes.
unsigned char Byte(int r, size_t i) {
  return static_cast<unsigned char>((i * 131 + static_cast<size_t>(r) * 17 + 5) & 0xff);
}

constexpr size_t kWindow = 3 * 4096 + 100;  // bytes of each rank's window
constexpr size_t kSlot = 64;                // each rank writes its own slot of every window

// A host-memory barrier on `comm` (a one-element all-reduce).
bool Barrier(ncclComm_t comm) {
  int one = 1, sum = 0;
  return ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, comm, nullptr) == ncclSuccess;
}

int MapsAndUsesPeerWindows(const braidUniqueId& id, int rank, int nranks) {
  ncclComm_t comm = nullptr;
  if (JoinNccl(id, rank, nranks, &comm) != 0) return 1;
  auto* dev = dynamic_cast<EmulatedDevice*>(braid::device::ActiveDeviceRuntime());
  CHECK_OR_FAIL(dev != nullptr, "BRAID_DEVICE=emulated did not select the emulated device");
  // Each rank's window at its own offset into an allocation: peers must map the allocation and
  // add the owner's offset.
  const size_t offset = 4096 * static_cast<size_t>(rank + 1) + 8 * static_cast<size_t>(rank);
  char* alloc = static_cast<char*>(*dev->allocDevice(offset + 2 * kWindow));
  char* window = alloc + offset;
  auto* mine = static_cast<unsigned char*>(*dev->hostView(window, kWindow));
  for (size_t i = 0; i < kWindow; ++i) mine[i] = Byte(rank, i);
  const uint64_t opens_before = ProcessPeerMemory()->opens();

  ncclWindow_t win = nullptr;
  CHECK_OR_FAIL(
      ncclCommWindowRegister(comm, window, kWindow, &win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess,
      "window register");
  CHECK_OR_FAIL(WindowPeerPointer(win, rank) == window, "own entry is not the window");
  CHECK_OR_FAIL(ProcessPeerMemory()->mapped() == static_cast<size_t>(nranks - 1),
                "%zu peer allocations mapped", ProcessPeerMemory()->mapped());
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  std::vector<unsigned char> seen(kWindow);
  for (int r = 0; r < nranks; ++r) {
    void* p = WindowPeerPointer(win, r);
    CHECK_OR_FAIL(p != nullptr, "rank %d's window is not mapped", r);
    CHECK_OR_FAIL(
        dev->copyAsync(seen.data(), p, kWindow, stream).ok() && dev->synchronize(stream).ok(),
        "copy from rank %d's window", r);
    for (size_t i = 0; i < kWindow; ++i)
      CHECK_OR_FAIL(seen[i] == Byte(r, i), "rank %d's window byte %zu: %u, want %u", r, i, seen[i],
                    Byte(r, i));
  }
  // Everyone has read everything before anyone writes.
  CHECK_OR_FAIL(Barrier(comm), "barrier");
  const std::vector<unsigned char> mark(kSlot, static_cast<unsigned char>(0xa0 + rank));
  for (int r = 0; r < nranks; ++r)
    CHECK_OR_FAIL(dev->copyAsync(static_cast<char*>(WindowPeerPointer(win, r)) + kSlot * rank,
                                 mark.data(), kSlot, stream)
                      .ok(),
                  "copy into rank %d's window", r);
  CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
  CHECK_OR_FAIL(Barrier(comm), "barrier");
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < kSlot; ++i)
      CHECK_OR_FAIL(mine[kSlot * r + i] == 0xa0 + r, "rank %d's mark in my window: byte %zu is %u",
                    r, i, mine[kSlot * r + i]);

  // A second window in the same allocations: mapped without opening them again.
  ncclWindow_t win2 = nullptr;
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, window + kWindow, kWindow, &win2, 0) == ncclSuccess,
                "second window");
  CHECK_OR_FAIL(ProcessPeerMemory()->opens() == opens_before + static_cast<uint64_t>(nranks - 1),
                "the allocations were opened again: %llu opens",
                static_cast<unsigned long long>(ProcessPeerMemory()->opens() - opens_before));
  for (int r = 0; r < nranks; ++r)
    CHECK_OR_FAIL(static_cast<char*>(WindowPeerPointer(win2, r)) ==
                      static_cast<char*>(WindowPeerPointer(win, r)) + kWindow,
                  "rank %d's second window is not kWindow past its first", r);
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, win) == ncclSuccess, "deregister");
  CHECK_OR_FAIL(WindowPeerPointer(win, 0) == nullptr, "a deregistered window still answers");
  CHECK_OR_FAIL(ProcessPeerMemory()->mapped() == static_cast<size_t>(nranks - 1),
                "the second window lost its mappings");
  // The destroy drops the registration left, and its mappings.
  CHECK_OR_FAIL(Barrier(comm), "barrier");
  CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK_OR_FAIL(ProcessPeerMemory()->mapped() == 0, "%zu peer allocations still mapped",
                ProcessPeerMemory()->mapped());
  CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(alloc).ok(), "free");
  CHECK_OR_FAIL(dev->deviceAllocations() == 0, "%zu device allocations left",
                dev->deviceAllocations());
  return 0;
}

TEST(PeerWindows, NodePeersMapEachOthersWindowsThreeRanks) {
  auto out =
      RunJob(Job(3, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        return MapsAndUsesPeerWindows(id, rank, nranks);
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(PeerWindows, NodePeersMapEachOthersWindowsHostAccessibleDevice) {
  auto out = RunJob(Job(2, "emulated-host"),
                    [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
                      return MapsAndUsesPeerWindows(id, rank, nranks);
                    });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(PeerWindows, ABadWindowFailsEveryRankAndMapsNothing) {
  auto out = RunJob(Job(3, "emulated"), [](braidComm_t, int rank, int nranks,
                                           const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (JoinNccl(id, rank, nranks, &comm) != 0) return 1;
    auto* dev = dynamic_cast<EmulatedDevice*>(braid::device::ActiveDeviceRuntime());
    CHECK_OR_FAIL(dev != nullptr, "no emulated device");
    char* alloc = static_cast<char*>(*dev->allocDevice(kWindow));
    const size_t size = dev->classify(alloc)->size;
    // Rank 1's window runs a byte past its allocation.
    ncclWindow_t win = nullptr;
    ncclResult_t r = ncclCommWindowRegister(comm, alloc + 1, rank == 1 ? size : size - 1, &win, 0);
    CHECK_OR_FAIL(r == ncclInvalidArgument, "a bad window registered: %d", static_cast<int>(r));
    const std::string why = ncclGetLastError(nullptr);
    CHECK_OR_FAIL(why.find("rank 1's window") != std::string::npos &&
                      why.find("run past the end") != std::string::npos,
                  "message: %s", why.c_str());
    CHECK_OR_FAIL(ProcessPeerMemory()->mapped() == 0, "mapped after a failed registration");
    // The communicator is fine: a good window registers next, on every rank.
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, alloc, size, &win, 0) == ncclSuccess, "register");
    for (int p = 0; p < nranks; ++p)
      CHECK_OR_FAIL(WindowPeerPointer(win, p) != nullptr, "rank %d not mapped", p);
    CHECK_OR_FAIL(ncclCommWindowDeregister(comm, win) == ncclSuccess, "deregister");
    CHECK_OR_FAIL(Barrier(comm), "barrier");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->freeDevice(alloc).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Two ranks as threads of one process: each other's windows by address, nothing opened.
TEST(PeerWindows, RanksOfOneProcessUseEachOthersAddresses) {
  auto out = RunJob(Job(1, "emulated"), [](braidComm_t, int rank, int, const braidUniqueId&) {
    ncclUniqueId nid;
    CHECK_OR_FAIL(ncclGetUniqueId(&nid) == ncclSuccess, "unique id");
    // Initialised together (each init waits for the other), then each registers its window.
    char* windows[2] = {nullptr, nullptr};
    void* peers[2] = {nullptr, nullptr};
    int failed[2] = {0, 0};
    std::vector<std::thread> threads;
    ncclComm_t comms[2] = {nullptr, nullptr};
    if (!braid::device::ChooseDeviceRuntime()) return 2;
    auto* dev = dynamic_cast<EmulatedDevice*>(braid::device::ActiveDeviceRuntime());
    CHECK_OR_FAIL(dev != nullptr, "no emulated device");
    for (int t = 0; t < 2; ++t) windows[t] = static_cast<char*>(*dev->allocDevice(kWindow));
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        ncclWindow_t win = nullptr;
        if (ncclCommInitRank(&comms[t], 2, nid, t) != ncclSuccess ||
            ncclCommWindowRegister(comms[t], windows[t], kWindow, &win, 0) != ncclSuccess) {
          failed[t] = 1;
          return;
        }
        peers[t] = WindowPeerPointer(win, 1 - t);
        if (ncclCommWindowDeregister(comms[t], win) != ncclSuccess ||
            ncclCommDestroy(comms[t]) != ncclSuccess)
          failed[t] = 1;
      });
    for (auto& th : threads) th.join();
    CHECK_OR_FAIL(!failed[0] && !failed[1], "a thread's init, register or destroy failed");
    CHECK_OR_FAIL(peers[0] == windows[1] && peers[1] == windows[0],
                  "a rank of the same process is not reached by its address");
    CHECK_OR_FAIL(ProcessPeerMemory()->opens() == 0, "opened a handle of this process");
    for (char* w : windows) CHECK_OR_FAIL(dev->freeDevice(w).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Host-memory windows register as before and map nothing.
TEST(PeerWindows, HostMemoryWindowsAreNotMapped) {
  auto out = RunJob(Job(2, "none"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (JoinNccl(id, rank, nranks, &comm) != 0) return 1;
    std::vector<char> buf(kWindow);
    ncclWindow_t win = nullptr;
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, buf.data(), buf.size(), &win, 0) == ncclSuccess,
                  "register");
    CHECK_OR_FAIL(WindowPeerPointer(win, rank) == buf.data(), "own entry");
    CHECK_OR_FAIL(WindowPeerPointer(win, 1 - rank) == nullptr, "a host window was mapped");
    CHECK_OR_FAIL(ncclCommWindowDeregister(comm, win) == ncclSuccess, "deregister");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

#ifdef BRAID_FAKE_LIBCUDA
template <typename Fn>
Fn Sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

// braid's CUDA runtime (cuIpc* of the driver API) over the fake driver: the windows map, and a
// cuIpcOpenMemHandle that fails on one rank fails the registration on every rank.
TEST(PeerWindows, OverTheCudaRuntimeOfAFakeDriver) {
  auto out = RunJob(Job(3, "cuda"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    void* lib = dlopen(BRAID_FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL);
    CHECK_OR_FAIL(lib != nullptr, "dlopen %s: %s", BRAID_FAKE_LIBCUDA, dlerror());
    ncclComm_t comm = nullptr;
    if (JoinNccl(id, rank, nranks, &comm) != 0) return 1;
    braid::device::DeviceRuntime* rt = braid::device::ActiveDeviceRuntime();
    CHECK_OR_FAIL(rt && std::string(rt->name()) == "cuda", "the CUDA runtime was not chosen");
    using Ptr = unsigned long long;
    auto mem_alloc = Sym<int (*)(Ptr*, size_t)>(lib, "cuMemAlloc_v2");
    auto mem_free = Sym<int (*)(Ptr)>(lib, "cuMemFree_v2");
    auto host_view = Sym<void* (*)(void*, size_t)>(lib, "braidFakeCudaHostView");
    auto fail_opens = Sym<void (*)(int)>(lib, "braidFakeCudaFailIpcOpens");
    Ptr d = 0;
    CHECK_OR_FAIL(mem_alloc(&d, kWindow) == 0, "cuMemAlloc");
    char* window = reinterpret_cast<char*>(d);
    auto* mine = static_cast<unsigned char*>(host_view(window, kWindow));
    for (size_t i = 0; i < kWindow; ++i) mine[i] = Byte(rank, i);
    ncclWindow_t win = nullptr;
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, window, kWindow, &win, 0) == ncclSuccess,
                  "register");
    for (int r = 0; r < nranks; ++r) {
      auto* peer = static_cast<unsigned char*>(host_view(WindowPeerPointer(win, r), kWindow));
      CHECK_OR_FAIL(peer != nullptr, "rank %d's window is not a device mapping", r);
      for (size_t i = 0; i < kWindow; ++i)
        CHECK_OR_FAIL(peer[i] == Byte(r, i), "rank %d's byte %zu", r, i);
    }
    // An all-reduce on windows runs the peer-reduce kernel: loaded from the library's fatbin
    // (cuModuleLoadData), looked up (cuModuleGetFunction) and launched (cuLaunchKernel) on the
    // stream, which the fake driver runs as the emulated device's peer reduce. A build without
    // the kernels (no nvcc) stages instead.
    {
      auto stream_create = Sym<int (*)(void**, unsigned)>(lib, "cuStreamCreate");
      auto stream_sync = Sym<int (*)(void*)>(lib, "cuStreamSynchronize");
      auto stream_destroy = Sym<int (*)(void*)>(lib, "cuStreamDestroy_v2");
      auto launches = Sym<int (*)()>(lib, "braidFakeCudaKernelLaunches");
      Ptr out = 0;
      CHECK_OR_FAIL(mem_alloc(&out, kWindow) == 0, "cuMemAlloc");
      ncclWindow_t wout = nullptr;
      CHECK_OR_FAIL(ncclCommWindowRegister(comm, reinterpret_cast<void*>(out), kWindow, &wout,
                                           NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess,
                    "register the output window");
      void* stream = nullptr;
      CHECK_OR_FAIL(stream_create(&stream, 1) == 0, "cuStreamCreate");
      const int launched = launches();
      const uint64_t window_calls = braid::nccl::WindowCalls();
      // Bytes as uint8 sums: element i is the sum of every rank's Byte(r, i), mod 256.
      CHECK_OR_FAIL(ncclAllReduce(window, reinterpret_cast<void*>(out), kWindow, ncclUint8, ncclSum,
                                  comm, static_cast<cudaStream_t>(stream)) == ncclSuccess,
                    "ncclAllReduce on windows");
      CHECK_OR_FAIL(stream_sync(stream) == 0, "cuStreamSynchronize");
      const auto* got =
          static_cast<const unsigned char*>(host_view(reinterpret_cast<void*>(out), kWindow));
      for (size_t i = 0; i < kWindow; ++i) {
        unsigned sum = 0;
        for (int r = 0; r < nranks; ++r) sum += Byte(r, i);
        CHECK_OR_FAIL(got[i] == static_cast<unsigned char>(sum), "byte %zu: %u, want %u", i, got[i],
                      sum & 0xff);
      }
      if (rt->peerReduceAvailable()) {
        CHECK_OR_FAIL(launches() == launched + 1, "%d kernel launches, want 1",
                      launches() - launched);
        CHECK_OR_FAIL(braid::nccl::WindowCalls() == window_calls + 1,
                      "the call did not take the window path");
      }
      // All-to-all on the same windows: one pairwise kernel per rank (the flag travels in the
      // kernel's argument block; read as a reduce it would sum the blocks): block j of rank s's
      // input lands in block s of rank j's output.
      const size_t block = kWindow / static_cast<size_t>(nranks);
      const int before = launches();
      const uint64_t window_calls_before = braid::nccl::WindowCalls();
      CHECK_OR_FAIL(ncclAlltoAll(window, reinterpret_cast<void*>(out), block, ncclUint8, comm,
                                 static_cast<cudaStream_t>(stream)) == ncclSuccess,
                    "ncclAlltoAll on windows");
      CHECK_OR_FAIL(stream_sync(stream) == 0, "cuStreamSynchronize");
      for (int s = 0; s < nranks; ++s)
        for (size_t i = 0; i < block; ++i) {
          const unsigned char want = Byte(s, block * static_cast<size_t>(rank) + i);
          CHECK_OR_FAIL(got[block * static_cast<size_t>(s) + i] == want,
                        "all-to-all: block %d byte %zu is %u, want %u", s, i,
                        got[block * static_cast<size_t>(s) + i], want);
        }
      if (rt->peerReduceAvailable()) {
        CHECK_OR_FAIL(launches() == before + 1, "all-to-all: %d kernel launches, want 1",
                      launches() - before);
        CHECK_OR_FAIL(braid::nccl::WindowCalls() == window_calls_before + 1,
                      "the all-to-all did not take the window path");
      }
      ncclResult_t async = ncclSuccess;
      CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                    "async error %d", static_cast<int>(async));
      CHECK_OR_FAIL(stream_destroy(stream) == 0, "cuStreamDestroy");
      CHECK_OR_FAIL(ncclCommWindowDeregister(comm, wout) == ncclSuccess, "deregister output");
      CHECK_OR_FAIL(mem_free(out) == 0, "cuMemFree");
    }
    CHECK_OR_FAIL(ncclCommWindowDeregister(comm, win) == ncclSuccess, "deregister");
    CHECK_OR_FAIL(ProcessPeerMemory()->mapped() == 0, "mapped after deregistration");
    // Rank 2's driver cannot map its first peer: every rank fails, naming it.
    if (rank == 2) fail_opens(1);
    ncclResult_t r = ncclCommWindowRegister(comm, window, kWindow, &win, 0);
    CHECK_OR_FAIL(r == ncclUnhandledCudaError, "registered with a failing map: %d",
                  static_cast<int>(r));
    const std::string why = ncclGetLastError(nullptr);
    CHECK_OR_FAIL(why.find("rank 2 cannot map rank 0's window") != std::string::npos &&
                      why.find("cuIpcOpenMemHandle") != std::string::npos,
                  "message: %s", why.c_str());
    CHECK_OR_FAIL(ProcessPeerMemory()->mapped() == 0, "mapped after a failed registration");
    CHECK_OR_FAIL(Barrier(comm), "barrier");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(mem_free(d) == 0, "cuMemFree");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}
#endif

}  // namespace
