// NCCL's stream semantics for device buffers (issue 39), through the NCCL API, on the emulated
// device (BRAID_DEVICE=emulated: device memory the host cannot touch, streams run by threads;
// device/cpu/emulated_device.h). Host functions queued on a stream play the kernels: one writes
// the send buffer, the collective is queued on the same stream, one reads the result; the test
// never synchronises between them, so a collective that did not wait for the stream would read
// stale data, and a stream that did not wait for the collective would read a stale result. Also:
// every collective on device buffers, and the failure paths (a mismatch across ranks, a bad
// stream or buffer, destroy with calls queued, abort with a call waiting for its stream).
//
// The shim's objects are linked into this binary with the core (braid_nccl_objects), so that the
// test's emulated device is the one the shim uses.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu/emulated_device.h"
#include "multirank/harness.h"
#include "multirank/nccl_shim_job.h"
#include "nccl.h"
#include "nccl/known_buffers.h"
#include "nccl/stream_path.h"

using braid::device::EmulatedDevice;
using braid_test::AllSucceeded;
using braid_test::DescribeOutcomes;
using braid_test::JobOptions;
using braid_test::RunJob;
using braid_test::shim::InitNccl;
using braid_test::shim::Job;

#undef CHECK_OR_FAIL
#define CHECK_OR_FAIL(cond, ...) CHECK_OR_FAIL_WITH(ncclGetLastError(nullptr), cond, __VA_ARGS__)

namespace {

template <typename T>
T* View(EmulatedDevice* dev, void* p, size_t n) {
  return static_cast<T*>(*dev->hostView(p, n * sizeof(T)));
}

// A rank's contribution: small integers, so every sum is exact in fp32 whatever the order.
uint32_t Value(int rank, int rep, size_t i) {
  return (static_cast<uint32_t>(rank + 1) * 7919u + static_cast<uint32_t>(rep) * 31u +
          static_cast<uint32_t>(i)) %
         65536u;
}

// What the stream-order test does to a device, either through the emulated device's own API or
// through the CUDA driver API of the fake libcuda (tests/common/fake_libcuda.cc), which makes
// braid choose its CUDA runtime.
struct RankDevice {
  std::function<void*(size_t)> alloc;
  std::function<bool(void*)> free;
  std::function<cudaStream_t()> create_stream;
  std::function<bool(cudaStream_t, std::function<void()>)> launch;
  std::function<void*(void*, size_t)> view;
  std::function<bool(cudaStream_t)> synchronize;
  std::function<bool(cudaStream_t)> destroy_stream;
};

RankDevice Emulated(EmulatedDevice* dev) {
  RankDevice d;
  d.alloc = [dev](size_t b) { return *dev->allocDevice(b); };
  d.free = [dev](void* p) { return dev->freeDevice(p).ok(); };
  d.create_stream = [dev] { return static_cast<cudaStream_t>(*dev->createStream()); };
  d.launch = [dev](cudaStream_t s, std::function<void()> fn) {
    return dev->launchHostFunction(s, std::move(fn)).ok();
  };
  d.view = [dev](void* p, size_t b) { return *dev->hostView(p, b); };
  d.synchronize = [dev](cudaStream_t s) { return dev->synchronize(s).ok(); };
  d.destroy_stream = [dev](cudaStream_t s) { return dev->destroyStream(s).ok(); };
  return d;
}

#ifdef BRAID_FAKE_LIBCUDA
template <typename Fn>
Fn Sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

// The fake driver's entry points, as a CUDA program would call them.
RankDevice FakeCuda(void* lib) {
  using Ptr = unsigned long long;
  auto mem_alloc = Sym<int (*)(Ptr*, size_t)>(lib, "cuMemAlloc_v2");
  auto mem_free = Sym<int (*)(Ptr)>(lib, "cuMemFree_v2");
  auto stream_create = Sym<int (*)(void**, unsigned)>(lib, "cuStreamCreate");
  auto stream_destroy = Sym<int (*)(void*)>(lib, "cuStreamDestroy_v2");
  auto stream_sync = Sym<int (*)(void*)>(lib, "cuStreamSynchronize");
  auto launch_host = Sym<int (*)(void*, void (*)(void*), void*)>(lib, "cuLaunchHostFunc");
  auto host_view = Sym<void* (*)(void*, size_t)>(lib, "braidFakeCudaHostView");
  RankDevice d;
  d.alloc = [=](size_t b) {
    Ptr p = 0;
    return mem_alloc(&p, b) == 0 ? reinterpret_cast<void*>(p) : nullptr;
  };
  d.free = [=](void* p) { return mem_free(reinterpret_cast<Ptr>(p)) == 0; };
  d.create_stream = [=] {
    void* s = nullptr;
    stream_create(&s, 1);
    return static_cast<cudaStream_t>(s);
  };
  d.launch = [=](cudaStream_t s, std::function<void()> fn) {
    auto* f = new std::function<void()>(std::move(fn));
    return launch_host(
               s,
               [](void* arg) {
                 auto* g = static_cast<std::function<void()>*>(arg);
                 (*g)();
                 delete g;
               },
               f) == 0;
  };
  d.view = [=](void* p, size_t b) { return host_view(p, b); };
  d.synchronize = [=](cudaStream_t s) { return stream_sync(s) == 0; };
  d.destroy_stream = [=](cudaStream_t s) { return stream_destroy(s) == 0; };
  return d;
}
#endif

// The stream-order test: write the send buffer on the stream (late by a random few
// microseconds), all-reduce on the same stream, read the result on the stream; `reps` times, no
// host synchronisation in between. Alternates fp32 sum and int32 max; every fifth is in place.
// The stream's host functions copy what they use (`view`): they may run after an early return
// has destroyed `dev` (a temporary of the caller's).
int StreamOrder(const RankDevice& dev, ncclComm_t comm, int rank, int nranks, int reps) {
  const size_t counts[] = {1, 7, 1000, 4099};
  const size_t max_n = 4099;
  void* send = dev.alloc(max_n * 4);
  void* recv = dev.alloc(max_n * 4);
  CHECK_OR_FAIL(send && recv, "alloc");
  cudaStream_t stream = dev.create_stream();
  CHECK_OR_FAIL(stream != nullptr, "createStream");
  std::mt19937 rng(1234 + rank);
  auto bad = std::make_shared<std::atomic<int>>(0);
  auto checked = std::make_shared<std::atomic<int>>(0);
  for (int rep = 0; rep < reps; ++rep) {
    const size_t n = counts[rep % 4];
    const bool fp = rep % 2 == 0;
    const bool in_place = rep % 5 == 4;
    void* src = in_place ? recv : send;
    const int delay_us = static_cast<int>(rng() % 40);
    CHECK_OR_FAIL(dev.launch(stream,
                             [=, view = dev.view] {
                               std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
                               float* f = static_cast<float*>(view(src, n * 4));
                               int32_t* k = static_cast<int32_t*>(view(src, n * 4));
                               for (size_t i = 0; i < n; ++i) {
                                 const uint32_t v = Value(rank, rep, i);
                                 if (fp)
                                   f[i] = static_cast<float>(v);
                                 else
                                   k[i] = static_cast<int32_t>(v);
                               }
                             }),
                  "launch");
    CHECK_OR_FAIL(ncclAllReduce(src, recv, n, fp ? ncclFloat32 : ncclInt32, fp ? ncclSum : ncclMax,
                                comm, stream) == ncclSuccess,
                  "ncclAllReduce rep %d", rep);
    CHECK_OR_FAIL(dev.launch(stream,
                             [=, view = dev.view] {
                               const char* got = static_cast<const char*>(view(recv, n * 4));
                               for (size_t i = 0; i < n; ++i) {
                                 uint32_t want_bits, got_bits;
                                 if (fp) {
                                   float sum = 0;
                                   for (int r = 0; r < nranks; ++r)
                                     sum += static_cast<float>(Value(r, rep, i));
                                   std::memcpy(&want_bits, &sum, 4);
                                 } else {
                                   int32_t mx = 0;
                                   for (int r = 0; r < nranks; ++r)
                                     mx = std::max(mx, static_cast<int32_t>(Value(r, rep, i)));
                                   std::memcpy(&want_bits, &mx, 4);
                                 }
                                 std::memcpy(&got_bits, got + i * 4, 4);
                                 if (got_bits != want_bits) {
                                   if (bad->fetch_add(1) == 0)
                                     std::fprintf(stderr,
                                                  "[rank %d] rep %d element %zu: %08x, want %08x\n",
                                                  rank, rep, i, got_bits, want_bits);
                                   return;
                                 }
                               }
                               checked->fetch_add(1);
                             }),
                  "launch");
  }
  CHECK_OR_FAIL(dev.synchronize(stream), "synchronize");
  CHECK_OR_FAIL(bad->load() == 0, "%d of %d repetitions wrong", bad->load(), reps);
  CHECK_OR_FAIL(checked->load() == reps, "%d of %d repetitions checked", checked->load(), reps);
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                "async error %d", static_cast<int>(async));
  CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK_OR_FAIL(dev.destroy_stream(stream), "destroyStream");
  CHECK_OR_FAIL(dev.free(send) && dev.free(recv), "free");
  return 0;
}

int StreamOrderBody(const braidUniqueId& id, int rank, int nranks, int reps) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  return StreamOrder(Emulated(dev), comm, rank, nranks, reps);
}

TEST(DeviceStream, AllReduceOrderedOnTheStream1000TimesTwoRanks) {
  auto out =
      RunJob(Job(2, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        return StreamOrderBody(id, rank, nranks, 1000);
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// 4 ranks on a 2-core machine (a stream thread, an agent thread and braid's own per rank): the
// same 1000 repetitions, about 2 s.
TEST(DeviceStream, AllReduceOrderedOnTheStream1000TimesFourRanks) {
  auto out =
      RunJob(Job(4, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        return StreamOrderBody(id, rank, nranks, 1000);
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, which Megatron-LM sets): every stream's work
// runs through one FIFO, so the staging copies must be queued on the user's stream around the
// call; a copy on a stream of the agent's waited behind the user's stream's wait for `done`
// (a deadlock: the guard's timeout).
TEST(DeviceStream, AllReduceOrderedOnOneHardwareQueue) {
  JobOptions job = Job(2, "emulated");
  job.env.push_back({"CUDA_DEVICE_MAX_CONNECTIONS", "1"});
  auto out = RunJob(job, [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return StreamOrderBody(id, rank, nranks, 300);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Device memory that is host memory (BRAID_DEVICE=emulated-host): no staging, the same order.
TEST(DeviceStream, AllReduceOrderedOnTheStreamHostAccessibleDevice) {
  auto out = RunJob(Job(2, "emulated-host"),
                    [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
                      return StreamOrderBody(id, rank, nranks, 300);
                    });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

#ifdef BRAID_FAKE_LIBCUDA
// braid's CUDA runtime (src/device/cuda/cuda_runtime_driver.cc) over a fake libcuda.so.1 built on
// the emulated device: the driver's symbols bound, pointer attributes decoded, flags written and
// waited for with cuStreamWriteValue32/WaitValue32, copies with cuMemcpyAsync, the context set on
// the agent's thread; the stream-order test through it, and a capturing stream refused.
TEST(DeviceStream, CudaRuntimeOverAFakeDriver) {
  auto out = RunJob(Job(2, "cuda"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    void* lib = dlopen(BRAID_FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL);
    CHECK_OR_FAIL(lib != nullptr, "dlopen %s: %s", BRAID_FAKE_LIBCUDA, dlerror());
    ncclUniqueId nid;
    std::memcpy(&nid, &id, sizeof(nid));
    ncclComm_t comm = nullptr;
    CHECK_OR_FAIL(ncclCommInitRank(&comm, nranks, nid, rank) == ncclSuccess, "init");
    braid::device::DeviceRuntime* rt = braid::device::ActiveDeviceRuntime();
    CHECK_OR_FAIL(rt && std::string(rt->name()) == "cuda", "the CUDA runtime was not chosen (%s)",
                  rt ? rt->name() : "none");
    RankDevice dev = FakeCuda(lib);
    cudaStream_t stream = dev.create_stream();
    auto set_capturing = Sym<int (*)(void*, int)>(lib, "braidFakeCudaSetCapturing");
    void* buf = dev.alloc(4096);
    CHECK_OR_FAIL(set_capturing(stream, 1) == 0, "capture");
    ncclResult_t r = ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream);
    CHECK_OR_FAIL(r == ncclInvalidUsage, "capturing stream: %d", static_cast<int>(r));
    CHECK_OR_FAIL(
        std::string(ncclGetLastError(nullptr)).find("capturing a CUDA graph") != std::string::npos,
        "message: %s", ncclGetLastError(nullptr));
    CHECK_OR_FAIL(set_capturing(stream, 0) == 0, "capture end");
    CHECK_OR_FAIL(dev.free(buf) && dev.destroy_stream(stream), "free");
    if (StreamOrder(dev, comm, rank, nranks, 300) != 0) return 1;
    // The agent grew its staging buffer while the stream waited for it: a GPU would deadlock in
    // cuMemFreeHost had it freed the old one then (the fake counts such frees).
    auto frees_while_waiting = Sym<int (*)()>(lib, "braidFakeCudaFreesWhileWaiting");
    CHECK_OR_FAIL(frees_while_waiting() == 0, "%d cuMemFreeHost calls while a stream waited",
                  frees_while_waiting());
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}
#endif

// Every collective (and grouped sends/receives) on device buffers, queued back to back on one
// stream; results copied to host memory on the stream and checked after one synchronisation.
int EveryCollectiveBody(const braidUniqueId& id, int rank, int nranks) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  const size_t n = 333;  // elements per rank's block
  const size_t total = n * static_cast<size_t>(nranks);
  // ncclMemAlloc gives the device's memory when a device runtime is active.
  void* send = nullptr;
  CHECK_OR_FAIL(ncclMemAlloc(&send, total * 4) == ncclSuccess, "ncclMemAlloc");
  CHECK_OR_FAIL(dev->classify(send)->kind == braid::device::MemoryKind::kDevice,
                "ncclMemAlloc gave no device memory");
  void* recv = *dev->allocDevice(total * 4);
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  auto fill = [&](int tag) {
    return dev->launchHostFunction(stream, [=] {
      int32_t* p = View<int32_t>(dev, send, total);
      for (size_t i = 0; i < total; ++i) p[i] = static_cast<int32_t>(Value(rank, tag, i));
    });
  };
  auto clear = [&] {
    return dev->launchHostFunction(
        stream, [=] { std::memset(View<char>(dev, recv, total * 4), 0xee, total * 4); });
  };
  struct Result {
    const char* name;
    std::vector<int32_t> got, want;
  };
  std::vector<Result> results(8);
  auto keep = [&](Result& r, const char* name, size_t count, std::vector<int32_t> want) {
    r.name = name;
    r.got.assign(count, 0);
    r.want = std::move(want);
    return dev->copyAsync(r.got.data(), recv, count * 4, stream);  // device -> host on the stream
  };
  const int root = nranks - 1;
  auto V = [&](int r, int tag, size_t i) { return static_cast<int32_t>(Value(r, tag, i)); };
  std::vector<int32_t> w;

  CHECK_OR_FAIL(fill(1).ok() && clear().ok(), "launch");
  CHECK_OR_FAIL(ncclBroadcast(send, recv, total, ncclInt32, root, comm, stream) == ncclSuccess,
                "bcast");
  w.assign(total, 0);
  for (size_t i = 0; i < total; ++i) w[i] = V(root, 1, i);
  CHECK_OR_FAIL(keep(results[0], "broadcast", total, w).ok(), "copy");

  CHECK_OR_FAIL(fill(2).ok() && clear().ok(), "launch");
  CHECK_OR_FAIL(ncclReduceScatter(send, recv, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                "rs");
  w.assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int r = 0; r < nranks; ++r) w[i] += V(r, 2, rank * n + i);
  CHECK_OR_FAIL(keep(results[1], "reduce-scatter", n, w).ok(), "copy");

  CHECK_OR_FAIL(fill(3).ok() && clear().ok(), "launch");
  CHECK_OR_FAIL(ncclAllGather(send, recv, n, ncclInt32, comm, stream) == ncclSuccess, "ag");
  w.assign(total, 0);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i) w[r * n + i] = V(r, 3, i);
  CHECK_OR_FAIL(keep(results[2], "all-gather", total, w).ok(), "copy");

  CHECK_OR_FAIL(fill(4).ok() && clear().ok(), "launch");
  CHECK_OR_FAIL(
      ncclReduce(send, recv, total, ncclInt32, ncclMax, root, comm, stream) == ncclSuccess,
      "reduce");
  w.assign(total, static_cast<int32_t>(0xeeeeeeee));  // untouched off the root
  if (rank == root)
    for (size_t i = 0; i < total; ++i) {
      w[i] = V(0, 4, i);
      for (int r = 1; r < nranks; ++r) w[i] = std::max(w[i], V(r, 4, i));
    }
  CHECK_OR_FAIL(keep(results[3], "reduce", total, w).ok(), "copy");

  CHECK_OR_FAIL(fill(5).ok() && clear().ok(), "launch");
  CHECK_OR_FAIL(ncclAlltoAll(send, recv, n, ncclInt32, comm, stream) == ncclSuccess, "a2a");
  w.assign(total, 0);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i) w[r * n + i] = V(r, 5, rank * n + i);
  CHECK_OR_FAIL(keep(results[4], "all-to-all", total, w).ok(), "copy");

  // A ring of grouped sends and receives: one agent job running one braid group.
  CHECK_OR_FAIL(fill(6).ok() && clear().ok(), "launch");
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group");
  CHECK_OR_FAIL(ncclSend(send, n, ncclInt32, next, comm, stream) == ncclSuccess, "send");
  CHECK_OR_FAIL(ncclRecv(recv, n, ncclInt32, prev, comm, stream) == ncclSuccess, "recv");
  CHECK_OR_FAIL(ncclGroupEnd() == ncclSuccess, "group end");
  w.assign(n, 0);
  for (size_t i = 0; i < n; ++i) w[i] = V(prev, 6, i);
  CHECK_OR_FAIL(keep(results[5], "send/recv", n, w).ok(), "copy");

  CHECK_OR_FAIL(fill(7).ok() && clear().ok(), "launch");
  CHECK_OR_FAIL(ncclGather(send, recv, n, ncclInt32, root, comm, stream) == ncclSuccess, "gather");
  w.assign(total, static_cast<int32_t>(0xeeeeeeee));
  if (rank == root)
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < n; ++i) w[r * n + i] = V(r, 7, i);
  CHECK_OR_FAIL(keep(results[6], "gather", total, w).ok(), "copy");

  // In place: all-reduce of the send buffer into itself.
  CHECK_OR_FAIL(fill(8).ok(), "launch");
  CHECK_OR_FAIL(ncclAllReduce(send, send, total, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                "ar");
  CHECK_OR_FAIL(dev->copyAsync(recv, send, total * 4, stream).ok(), "copy");
  w.assign(total, 0);
  for (size_t i = 0; i < total; ++i)
    for (int r = 0; r < nranks; ++r) w[i] += V(r, 8, i);
  CHECK_OR_FAIL(keep(results[7], "all-reduce in place", total, w).ok(), "copy");

  CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
  for (const Result& r : results)
    CHECK_OR_FAIL(std::memcmp(r.got.data(), r.want.data(), r.want.size() * 4) == 0,
                  "%s: wrong result", r.name);
  CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroyStream");
  CHECK_OR_FAIL(ncclMemFree(send) == ncclSuccess && dev->freeDevice(recv).ok(), "free");
  CHECK_OR_FAIL(dev->deviceAllocations() == 0, "device memory leaked");
  return 0;
}

TEST(DeviceStream, EveryCollectiveOnDeviceBuffers) {
  for (int nranks : {2, 3}) {
    auto out = RunJob(Job(nranks, "emulated"),
                      [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
                        return EveryCollectiveBody(id, rank, nranks);
                      });
    EXPECT_TRUE(AllSucceeded(out)) << nranks << " ranks: " << DescribeOutcomes(out);
  }
}

// A count that differs between the ranks on the stream path: braid's call check fails it on every
// rank; every stream is released, the error is kept (ncclCommGetAsyncError, the next call), and
// the communicator is destroyed cleanly.
TEST(DeviceStream, MismatchedCountFailsEveryRankAndReleasesTheStream) {
  auto out =
      RunJob(Job(2, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        ncclComm_t comm = nullptr;
        EmulatedDevice* dev = nullptr;
        if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
        void* buf = *dev->allocDevice(4096);
        cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
        CHECK_OR_FAIL(
            ncclAllReduce(buf, buf, 100 + rank, ncclFloat32, ncclSum, comm, stream) == ncclSuccess,
            "the call is queued");
        std::atomic<bool> after{false};
        CHECK_OR_FAIL(dev->launchHostFunction(stream, [&] { after = true; }).ok(), "launch");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
        CHECK_OR_FAIL(after.load(), "work after the call ran");
        ncclResult_t async = ncclSuccess;
        CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess, "GetAsyncError");
        CHECK_OR_FAIL(async == ncclInvalidUsage, "async error %d", static_cast<int>(async));
        const std::string msg = ncclGetLastError(comm);
        CHECK_OR_FAIL(msg.find("mismatch") != std::string::npos &&
                          msg.find("stream-ordered") != std::string::npos,
                      "message: %s", msg.c_str());
        ncclResult_t next = ncclAllReduce(buf, buf, 10, ncclFloat32, ncclSum, comm, stream);
        CHECK_OR_FAIL(next == ncclInvalidUsage, "the next call reports it (%d)",
                      static_cast<int>(next));
        CHECK_OR_FAIL(
            std::string(ncclGetLastError(nullptr)).find("an earlier stream-ordered call failed") !=
                std::string::npos,
            "next call's message: %s", ncclGetLastError(nullptr));
        CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
        CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroyStream");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A stream that is not one, a buffer that runs past its allocation, a stream capturing a graph:
// refused at once with a message, nothing queued, and the communicator goes on working (host
// buffers too).
TEST(DeviceStream, BadStreamOrBufferIsRefusedClearly) {
  auto out = RunJob(Job(2, "emulated"), [](braidComm_t, int rank, int nranks,
                                           const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    void* buf = *dev->allocDevice(4096);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    int not_a_stream = 0;
    ncclResult_t r = ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm,
                                   reinterpret_cast<cudaStream_t>(&not_a_stream));
    CHECK_OR_FAIL(r == ncclInvalidArgument, "bad stream: %d", static_cast<int>(r));
    CHECK_OR_FAIL(
        std::string(ncclGetLastError(nullptr)).find("not a live stream") != std::string::npos,
        "message: %s", ncclGetLastError(nullptr));
    r = ncclAllReduce(buf, buf, 1025, ncclFloat32, ncclSum, comm, stream);  // 4100 bytes of 4096
    CHECK_OR_FAIL(r == ncclInvalidArgument, "overrun: %d", static_cast<int>(r));
    CHECK_OR_FAIL(
        std::string(ncclGetLastError(nullptr)).find("run past the end") != std::string::npos,
        "message: %s", ncclGetLastError(nullptr));
    // A stream capturing a graph: refused, naming it (NCCL would capture the call).
    CHECK_OR_FAIL(dev->setCapturing(stream, true).ok(), "capture");
    r = ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream);
    CHECK_OR_FAIL(r == ncclInvalidUsage, "capturing stream: %d", static_cast<int>(r));
    CHECK_OR_FAIL(
        std::string(ncclGetLastError(nullptr)).find("capturing a graph") != std::string::npos,
        "message: %s", ncclGetLastError(nullptr));
    CHECK_OR_FAIL(dev->setCapturing(stream, false).ok(), "capture end");
    // Still healthy: a device call, then a host call after it (which waits for it).
    CHECK_OR_FAIL(
        dev->launchHostFunction(stream, [=] { View<float>(dev, buf, 16)[0] = 1.0f + rank; }).ok(),
        "l");
    CHECK_OR_FAIL(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream) == ncclSuccess,
                  "device call");
    std::vector<float> host(16, 2.0f);
    CHECK_OR_FAIL(ncclAllReduce(host.data(), host.data(), 16, ncclFloat32, ncclSum, comm, stream) ==
                      ncclSuccess,
                  "host call");
    CHECK_OR_FAIL(host[0] == 2.0f * nranks, "host result %g", host[0]);
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    CHECK_OR_FAIL(View<float>(dev, buf, 16)[0] == 3.0f, "device result %g",
                  View<float>(dev, buf, 16)[0]);
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroyStream");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Destroy right after queuing: the queued calls still run (their streams go on), then the
// communicator goes.
TEST(DeviceStream, DestroyWaitsForQueuedCalls) {
  auto out =
      RunJob(Job(2, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        ncclComm_t comm = nullptr;
        EmulatedDevice* dev = nullptr;
        if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
        void* buf = *dev->allocDevice(4096);
        cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
        CHECK_OR_FAIL(
            dev->launchHostFunction(stream,
                                    [=] {
                                      std::this_thread::sleep_for(std::chrono::milliseconds(5));
                                      for (int i = 0; i < 64; ++i)
                                        View<int32_t>(dev, buf, 64)[i] = rank + i;
                                    })
                .ok(),
            "l");
        for (int k = 0; k < 3; ++k)
          CHECK_OR_FAIL(
              ncclAllReduce(buf, buf, 64, ncclInt32, ncclSum, comm, stream) == ncclSuccess, "call");
        CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
        for (int i = 0; i < 64; ++i) {
          int32_t v = 0;
          for (int r = 0; r < nranks; ++r) v += r + i;
          v *= nranks * nranks;  // three sums: x n ranks, twice more
          CHECK_OR_FAIL(View<int32_t>(dev, buf, 64)[i] == v, "element %d: %d, want %d", i,
                        View<int32_t>(dev, buf, 64)[i], v);
        }
        CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroyStream");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Abort with a call whose stream is blocked: the call fails without running, and the stream is
// released when it gets there; nothing hangs.
TEST(DeviceStream, AbortReleasesAStreamWhoseCallWaits) {
  auto out =
      RunJob(Job(2, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        ncclComm_t comm = nullptr;
        EmulatedDevice* dev = nullptr;
        if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
        void* buf = *dev->allocDevice(4096);
        cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
        std::mutex mu;
        std::condition_variable cv;
        bool open = false;
        CHECK_OR_FAIL(dev->launchHostFunction(stream,
                                              [&] {
                                                for (int i = 0; i < 64; ++i)
                                                  View<int32_t>(dev, buf, 64)[i] = 7;
                                                std::unique_lock<std::mutex> lock(mu);
                                                cv.wait(lock, [&] { return open; });
                                              })
                          .ok(),
                      "l");
        CHECK_OR_FAIL(ncclAllReduce(buf, buf, 64, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                      "call");
        CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
        {
          std::lock_guard<std::mutex> lock(mu);
          open = true;
        }
        cv.notify_all();
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
        CHECK_OR_FAIL(View<int32_t>(dev, buf, 64)[0] == 7, "the aborted call did not run");
        CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroyStream");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A gate on a stream: the stream's later work waits until open() (no sleep: the test decides).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool is_open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return is_open; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      is_open = true;
    }
    cv.notify_all();
  }
};

// PyTorch's pattern: ncclRedOpCreatePreMulSum, the all-reduce on a stream, ncclRedOpDestroy at
// once. The call is still queued (its stream is held) when the operator is destroyed: it must
// still reduce with the operator's scalar, and an operator created after the destroy must not
// change it.
TEST(DeviceStream, PreMulSumDestroyedRightAfterTheCall) {
  auto out = RunJob(Job(2, "emulated", 30), [](braidComm_t, int rank, int nranks,
                                               const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t n = 257;
    void* buf = *dev->allocDevice(n * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    auto gate = std::make_shared<Gate>();  // outlives an early return
    CHECK_OR_FAIL(dev->launchHostFunction(stream,
                                          [=] {
                                            gate->wait();
                                            float* p = View<float>(dev, buf, n);
                                            for (size_t i = 0; i < n; ++i)
                                              p[i] = static_cast<float>(rank * 100 + i);
                                          })
                      .ok(),
                  "launch");
    float scalar = 2.0f;
    ncclRedOp_t op;
    CHECK_OR_FAIL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate,
                                           comm) == ncclSuccess,
                  "create");
    CHECK_OR_FAIL(ncclAllReduce(buf, buf, n, ncclFloat32, op, comm, stream) == ncclSuccess,
                  "all-reduce");
    CHECK_OR_FAIL(ncclRedOpDestroy(op, comm) == ncclSuccess, "destroy");
    // Another operator now: it must not be the one the queued call uses.
    float other = 5.0f;
    ncclRedOp_t op2;
    CHECK_OR_FAIL(ncclRedOpCreatePreMulSum(&op2, &other, ncclFloat32, ncclScalarHostImmediate,
                                           comm) == ncclSuccess,
                  "create 2");
    gate->open();
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d: %s", static_cast<int>(async), ncclGetLastError(comm));
    const float* p = View<float>(dev, buf, n);
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < nranks; ++r) want += 2.0f * static_cast<float>(r * 100 + i);
      CHECK_OR_FAIL(std::memcmp(&p[i], &want, 4) == 0, "element %zu: %g, want %g", i, p[i], want);
    }
    CHECK_OR_FAIL(ncclRedOpDestroy(op2, comm) == ncclSuccess, "destroy 2");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy comm");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(buf).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A device all-reduce whose stream is late on rank 0, then ncclCommSplit on the user's thread:
// the split's all-gather must come after the queued all-reduce on every rank (not beside it), so
// both give exact results.
TEST(DeviceStream, SplitWaitsForQueuedStreamCalls) {
  auto out = RunJob(Job(2, "emulated", 30), [](braidComm_t, int rank, int nranks,
                                               const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t n = 1000;
    void* buf = *dev->allocDevice(n * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(
        dev->launchHostFunction(stream,
                                [=] {
                                  // Late on one rank only: provokes the race.
                                  if (rank == 0)
                                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
                                  int32_t* p = View<int32_t>(dev, buf, n);
                                  for (size_t i = 0; i < n; ++i)
                                    p[i] = static_cast<int32_t>(Value(rank, 0, i));
                                })
            .ok(),
        "launch");
    CHECK_OR_FAIL(ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "all-reduce");
    ncclComm_t sub = nullptr;
    CHECK_OR_FAIL(ncclCommSplit(comm, 0, nranks - rank, &sub, nullptr) == ncclSuccess, "split: %s",
                  ncclGetLastError(nullptr));
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    const int32_t* p = View<int32_t>(dev, buf, n);
    for (size_t i = 0; i < n; ++i) {
      int32_t want = 0;
      for (int r = 0; r < nranks; ++r) want += static_cast<int32_t>(Value(r, 0, i));
      CHECK_OR_FAIL(p[i] == want, "element %zu: %d, want %d", i, p[i], want);
    }
    int sub_rank = -1;
    CHECK_OR_FAIL(ncclCommUserRank(sub, &sub_rank) == ncclSuccess && sub_rank == nranks - 1 - rank,
                  "split rank %d", sub_rank);
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d", static_cast<int>(async));
    CHECK_OR_FAIL(ncclCommDestroy(sub) == ncclSuccess && ncclCommDestroy(comm) == ncclSuccess,
                  "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(buf).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A zero-count send and receive in a group beside device sends and receives: neutral (NCCL does
// nothing for them), not a host call that would make the group "mix" host and device calls.
TEST(DeviceStream, ZeroCountCallsInAGroupAreNeutral) {
  auto out = RunJob(Job(2, "emulated", 30), [](braidComm_t, int rank, int nranks,
                                               const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t n = 100;
    void* send = *dev->allocDevice(n * 4);
    void* recv = *dev->allocDevice(n * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(dev->launchHostFunction(stream,
                                          [=] {
                                            int32_t* p = View<int32_t>(dev, send, n);
                                            for (size_t i = 0; i < n; ++i)
                                              p[i] = static_cast<int32_t>(Value(rank, 1, i));
                                          })
                      .ok(),
                  "launch");
    const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group");
    CHECK_OR_FAIL(ncclSend(send, 0, ncclInt32, next, comm, stream) == ncclSuccess, "send 0");
    CHECK_OR_FAIL(ncclRecv(recv, 0, ncclInt32, prev, comm, stream) == ncclSuccess, "recv 0");
    CHECK_OR_FAIL(ncclSend(send, n, ncclInt32, next, comm, stream) == ncclSuccess, "send: %s",
                  ncclGetLastError(nullptr));
    CHECK_OR_FAIL(ncclRecv(recv, n, ncclInt32, prev, comm, stream) == ncclSuccess, "recv: %s",
                  ncclGetLastError(nullptr));
    CHECK_OR_FAIL(ncclGroupEnd() == ncclSuccess, "group end: %s", ncclGetLastError(nullptr));
    // Outside a group too: returns at once, the stream's calls stay queued.
    CHECK_OR_FAIL(ncclAllReduce(send, send, 0, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "zero all-reduce");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    const int32_t* p = View<int32_t>(dev, recv, n);
    for (size_t i = 0; i < n; ++i)
      CHECK_OR_FAIL(p[i] == static_cast<int32_t>(Value(prev, 1, i)), "element %zu: %d", i, p[i]);
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(
        dev->destroyStream(stream).ok() && dev->freeDevice(send).ok() && dev->freeDevice(recv).ok(),
        "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A group over two communicators on one stream, listed in a different order on each rank: NCCL
// runs it as one launch; braid must queue both `ready` writes before either wait, or rank 0's
// stream waits for A while rank 1's waits for B. Wall-clock guarded (20 s).
// Two independent communicators (a split would be a view of the first, which braid requires every
// rank to call in one order): the second one's id is made here, before the ranks are forked.
// `one_queue`: the streams share one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1).
void GroupOverTwoCommunicators(bool one_queue) {
  // The second communicator's id comes from a rendezvous process of its own, as the job's does:
  // ncclGetUniqueId here would start the service thread in this process, and a rank forked while
  // that thread allocates can inherit ASan's allocator lock held (both ranks then hang; seen in
  // CI, 2026-11-29).
  braidUniqueId second;
  const pid_t second_root = braid_test::StartRootProcess(&second);
  ASSERT_GT(second_root, 0);
  braid_test::RootProcessGuard second_guard{second_root};
  ncclUniqueId id_b;
  static_assert(sizeof(id_b) == sizeof(second));
  std::memcpy(&id_b, &second, sizeof(id_b));
  JobOptions job = Job(2, "emulated", 20);
  if (one_queue) job.env.push_back({"CUDA_DEVICE_MAX_CONNECTIONS", "1"});
  auto out = RunJob(job, [id_b](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t a = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &a, &dev) != 0) return 1;
    ncclComm_t b = nullptr;
    CHECK_OR_FAIL(ncclCommInitRank(&b, nranks, id_b, rank) == ncclSuccess, "second comm");
    const size_t n = 64;
    void* x = *dev->allocDevice(n * 4);
    void* y = *dev->allocDevice(n * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(dev->launchHostFunction(stream,
                                          [=] {
                                            int32_t* px = View<int32_t>(dev, x, n);
                                            int32_t* py = View<int32_t>(dev, y, n);
                                            for (size_t i = 0; i < n; ++i) {
                                              px[i] = static_cast<int32_t>(Value(rank, 2, i));
                                              py[i] = static_cast<int32_t>(Value(rank, 3, i));
                                            }
                                          })
                      .ok(),
                  "launch");
    CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group");
    if (rank == 0) {
      CHECK_OR_FAIL(ncclAllReduce(x, x, n, ncclInt32, ncclSum, a, stream) == ncclSuccess, "a");
      CHECK_OR_FAIL(ncclAllReduce(y, y, n, ncclInt32, ncclSum, b, stream) == ncclSuccess, "b");
    } else {
      CHECK_OR_FAIL(ncclAllReduce(y, y, n, ncclInt32, ncclSum, b, stream) == ncclSuccess, "b");
      CHECK_OR_FAIL(ncclAllReduce(x, x, n, ncclInt32, ncclSum, a, stream) == ncclSuccess, "a");
    }
    CHECK_OR_FAIL(ncclGroupEnd() == ncclSuccess, "group end: %s", ncclGetLastError(nullptr));
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    for (ncclComm_t c : {a, b}) {
      ncclResult_t async = ncclSuccess;
      CHECK_OR_FAIL(ncclCommGetAsyncError(c, &async) == ncclSuccess && async == ncclSuccess,
                    "async error %d: %s", static_cast<int>(async), ncclGetLastError(c));
    }
    for (size_t i = 0; i < n; ++i) {
      int32_t wx = 0, wy = 0;
      for (int r = 0; r < nranks; ++r) {
        wx += static_cast<int32_t>(Value(r, 2, i));
        wy += static_cast<int32_t>(Value(r, 3, i));
      }
      CHECK_OR_FAIL(View<int32_t>(dev, x, n)[i] == wx && View<int32_t>(dev, y, n)[i] == wy,
                    "element %zu: x %d (want %d) y %d (want %d)", i, View<int32_t>(dev, x, n)[i],
                    wx, View<int32_t>(dev, y, n)[i], wy);
    }
    CHECK_OR_FAIL(ncclCommDestroy(b) == ncclSuccess && ncclCommDestroy(a) == ncclSuccess,
                  "destroy");
    CHECK_OR_FAIL(
        dev->destroyStream(stream).ok() && dev->freeDevice(x).ok() && dev->freeDevice(y).ok(),
        "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(DeviceStream, GroupOverTwoCommunicatorsInAnyOrder) {
  GroupOverTwoCommunicators(false);
}

// The same on one hardware queue: every stream's work in one FIFO, so a copy that waited behind
// the stream's wait for `done` would never run (the agent queues none).
TEST(DeviceStream, GroupOverTwoCommunicatorsOnOneHardwareQueue) {
  GroupOverTwoCommunicators(true);
}

// A thread that holds a reference to the agent (it polls ncclCommGetAsyncError) while the
// communicator is destroyed: destroy still waits for the queued calls and stops the agent.
TEST(DeviceStream, DestroyWithAPollingThread) {
  auto out = RunJob(
      Job(2, "emulated", 30), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        ncclComm_t comm = nullptr;
        EmulatedDevice* dev = nullptr;
        if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
        void* buf = *dev->allocDevice(4096);
        cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
        CHECK_OR_FAIL(dev->launchHostFunction(stream,
                                              [=] {
                                                for (int i = 0; i < 64; ++i)
                                                  View<int32_t>(dev, buf, 64)[i] = rank + i;
                                              })
                          .ok(),
                      "l");
        std::atomic<bool> stop{false};
        std::atomic<int> polls{0};
        std::thread poller([&] {
          while (!stop.load()) {
            ncclResult_t e;
            (void)ncclCommGetAsyncError(comm, &e);
            polls.fetch_add(1);
          }
        });
        while (polls.load() < 10) std::this_thread::yield();
        for (int k = 0; k < 20; ++k)
          CHECK_OR_FAIL(
              ncclAllReduce(buf, buf, 64, ncclInt32, ncclSum, comm, stream) == ncclSuccess, "call");
        const ncclResult_t destroyed = ncclCommFinalize(comm);
        stop = true;
        poller.join();
        CHECK_OR_FAIL(destroyed == ncclSuccess, "finalize");
        CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
        for (int i = 0; i < 64; ++i) {
          int64_t v = 0;
          for (int r = 0; r < nranks; ++r) v += r + i;
          for (int k = 1; k < 20; ++k) v *= nranks;
          CHECK_OR_FAIL(View<int32_t>(dev, buf, 64)[i] == static_cast<int32_t>(v), "element %d", i);
        }
        CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(buf).ok(), "free");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The staging cap is the communicator's, as its init read BRAID_STAGING_MAX_BYTES: a value set
// after init (here: no cap) does not reach the agent its first device call makes.
TEST(DeviceStream, StagingCapIsTheOneInitRead) {
  JobOptions job = Job(2, "emulated");
  job.env.push_back({"BRAID_STAGING_MAX_BYTES", "65536"});
  auto out = RunJob(job, [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    setenv("BRAID_STAGING_MAX_BYTES", "0", 1);
    void* buf = *dev->allocDevice(64 * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(std::memset(View<int32_t>(dev, buf, 64), 0, 64 * 4) != nullptr, "clear");
    CHECK_OR_FAIL(ncclAllReduce(buf, buf, 64, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "call");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    const uint64_t cap = braid::nccl::StagingStatsOf(comm).cap;
    CHECK_OR_FAIL(cap == 65536, "the agent's cap is %llu, not init's 65536",
                  static_cast<unsigned long long>(cap));
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(buf).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Large element-wise calls run in pieces (BRAID_STAGING_CHUNK_BYTES, 64K here): all-reduce out of
// place and in place, reduce, broadcast and ncclBcast on 40000 int32 (3 pieces, the last short),
// 3 ranks, bit-exact; the agent counts the pieces it ran.
TEST(DeviceStream, LargeCallsRunInPiecesBitExact) {
  JobOptions job = Job(3, "emulated");
  job.env.push_back({"BRAID_STAGING_CHUNK_BYTES", "64K"});
  job.env.push_back({"BRAID_DEVICE_IPC", "0"});  // the staged path (peer buffers run whole)
  auto out = RunJob(job, [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t n = 40000;
    void* send = *dev->allocDevice(n * 4);
    void* recv = *dev->allocDevice(n * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    auto fill = [&](void* buf, int tag) {
      int32_t* p = View<int32_t>(dev, buf, n);
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(Value(rank, tag, i));
    };
    auto V = [](int r, int tag, size_t i) { return static_cast<int32_t>(Value(r, tag, i)); };
    const int root = 1;
    // Each step: fill (host view, stream idle), call, synchronise, compare.
    fill(send, 1);
    CHECK_OR_FAIL(ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "all-reduce");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    for (size_t i = 0; i < n; ++i) {
      int32_t want = 0;
      for (int r = 0; r < nranks; ++r) want += V(r, 1, i);
      CHECK_OR_FAIL(View<int32_t>(dev, recv, n)[i] == want, "all-reduce element %zu", i);
    }
    fill(recv, 2);
    CHECK_OR_FAIL(ncclAllReduce(recv, recv, n, ncclInt32, ncclMax, comm, stream) == ncclSuccess,
                  "all-reduce in place");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    for (size_t i = 0; i < n; ++i) {
      int32_t want = V(0, 2, i);
      for (int r = 1; r < nranks; ++r) want = std::max(want, V(r, 2, i));
      CHECK_OR_FAIL(View<int32_t>(dev, recv, n)[i] == want, "in place element %zu", i);
    }
    fill(send, 3);
    std::memset(View<int32_t>(dev, recv, n), 0xee, n * 4);
    CHECK_OR_FAIL(ncclReduce(send, recv, n, ncclInt32, ncclSum, root, comm, stream) == ncclSuccess,
                  "reduce");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    for (size_t i = 0; i < n; ++i) {
      int32_t want = static_cast<int32_t>(0xeeeeeeee);
      if (rank == root) {
        want = 0;
        for (int r = 0; r < nranks; ++r) want += V(r, 3, i);
      }
      CHECK_OR_FAIL(View<int32_t>(dev, recv, n)[i] == want, "reduce element %zu", i);
    }
    fill(send, 4);
    CHECK_OR_FAIL(ncclBroadcast(send, recv, n, ncclInt32, root, comm, stream) == ncclSuccess,
                  "broadcast");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    for (size_t i = 0; i < n; ++i)
      CHECK_OR_FAIL(View<int32_t>(dev, recv, n)[i] == V(root, 4, i), "broadcast element %zu", i);
    fill(recv, 6);
    CHECK_OR_FAIL(ncclBcast(recv, n, ncclInt32, root, comm, stream) == ncclSuccess, "bcast");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
    for (size_t i = 0; i < n; ++i)
      CHECK_OR_FAIL(View<int32_t>(dev, recv, n)[i] == V(root, 6, i), "bcast element %zu", i);
    const auto stats = braid::nccl::StagingStatsOf(comm);
    // 3 pieces per call; the reduce's receive buffer is staged on the root only, but every rank
    // stages its send buffer, so every rank runs every call in pieces.
    CHECK_OR_FAIL(stats.pieces == 5 * 3, "%llu pieces, not 15",
                  static_cast<unsigned long long>(stats.pieces));
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroyStream");
    CHECK_OR_FAIL(dev->freeDevice(send).ok() && dev->freeDevice(recv).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Every rank cuts a large call alike, whatever its path: rank 0's BRAID_STAGING_CHUNK_BYTES wins
// (rank 1 asks for another), and a rank whose buffers are host memory (the host path), a rank
// that groups the call and a rank on device buffers run the same pieces: 3 ranks, all-reduce of
// 100000 int32 (7 pieces of 64K), then a broadcast, bit-exact on every rank.
TEST(DeviceStream, EveryPathCutsALargeCallAlike) {
  auto out =
      RunJob(Job(3, "emulated"), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        setenv("BRAID_STAGING_CHUNK_BYTES", rank == 1 ? "256K" : "64K", 1);
        // Staged: on peer buffers the device rank would run the call whole, on the device, and
        // fail against the host-buffer rank (a program must give NCCL device buffers everywhere).
        setenv("BRAID_DEVICE_IPC", "0", 1);
        ncclComm_t comm = nullptr;
        EmulatedDevice* dev = nullptr;
        if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
        const size_t n = 100000;
        std::vector<int32_t> host(n);
        void* device = *dev->allocDevice(n * 4);
        cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
        // Rank 0: host buffers; rank 1: device buffers in a group; rank 2: device buffers.
        int32_t* data = rank == 0 ? host.data() : View<int32_t>(dev, device, n);
        void* buf = rank == 0 ? static_cast<void*>(host.data()) : device;
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<int32_t>(Value(rank, 1, i));
        if (rank == 1) CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group");
        CHECK_OR_FAIL(ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                      "all-reduce");
        if (rank == 1) CHECK_OR_FAIL(ncclGroupEnd() == ncclSuccess, "group end");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
        data = rank == 0 ? host.data() : View<int32_t>(dev, device, n);
        for (size_t i = 0; i < n; ++i) {
          int32_t want = 0;
          for (int r = 0; r < nranks; ++r) want += static_cast<int32_t>(Value(r, 1, i));
          CHECK_OR_FAIL(data[i] == want, "all-reduce element %zu: %d, want %d", i, data[i], want);
        }
        if (rank == 2)
          for (size_t i = 0; i < n; ++i) data[i] = static_cast<int32_t>(Value(rank, 2, i));
        CHECK_OR_FAIL(ncclBcast(buf, n, ncclInt32, 2, comm, stream) == ncclSuccess, "bcast");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "sync");
        data = rank == 0 ? host.data() : View<int32_t>(dev, device, n);
        for (size_t i = 0; i < n; ++i)
          CHECK_OR_FAIL(data[i] == static_cast<int32_t>(Value(2, 2, i)), "bcast element %zu", i);
        ncclResult_t async = ncclSuccess;
        CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                      "async error %d", static_cast<int>(async));
        CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
        CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(device).ok(), "free");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A count mismatch between ranks where one rank's call is in a group and another's is on host
// buffers: every rank gets the error, no stream hangs (3 ranks: host 100, grouped device 50 and
// device 50, then the same with the counts agreeing).
TEST(DeviceStream, MismatchAcrossPathsFailsEveryRank) {
  auto out = RunJob(
      Job(3, "emulated", 60), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
        ncclComm_t comm = nullptr;
        EmulatedDevice* dev = nullptr;
        if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
        std::vector<int32_t> host(100, 1);
        void* device = *dev->allocDevice(400);
        cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
        void* buf = rank == 0 ? static_cast<void*>(host.data()) : device;
        const size_t count = rank == 0 ? 100 : 50;
        if (rank == 1) CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group");
        ncclResult_t r = ncclAllReduce(buf, buf, count, ncclInt32, ncclSum, comm, stream);
        if (rank == 1) {
          const ncclResult_t e = ncclGroupEnd();
          if (r == ncclSuccess) r = e;
        }
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
        ncclResult_t async = ncclSuccess;
        CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess, "GetAsyncError");
        CHECK_OR_FAIL(r == ncclInvalidUsage || async == ncclInvalidUsage,
                      "rank %d: the mismatch was not reported (call %d, async %d)", rank,
                      static_cast<int>(r), static_cast<int>(async));
        (void)ncclCommAbort(comm);
        CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(device).ok(), "free");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Allocations whose lifetime the shim sees are classified from its table, not by the runtime:
// ncclMemAlloc'd memory until ncclMemFree, a registered buffer until its deregistration. A
// buffer the shim never saw allocated is asked about every call. Results stay exact throughout.
TEST(DeviceStream, KnownAllocationsAreClassifiedWithoutTheRuntime) {
  auto out = RunJob(Job(2, "emulated"), [](braidComm_t, int rank, int nranks,
                                           const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    using braid::nccl::KnownAllocationCounts;
    const size_t n = 64;
    void* mem = nullptr;
    CHECK_OR_FAIL(ncclMemAlloc(&mem, n * 4) == ncclSuccess, "ncclMemAlloc");
    void* raw = *dev->allocDevice(n * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    // Ten in-place all-reduces on `buf`; returns the table's hits they made.
    auto calls = [&](void* buf, const char* what) -> int64_t {
      std::memset(View<int32_t>(dev, buf, n), 0, n * 4);
      const uint64_t before = KnownAllocationCounts().hits;
      for (int k = 0; k < 10; ++k) {
        if (k == 0) {
          int32_t* p = View<int32_t>(dev, buf, n);
          for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(rank + i);
        }
        if (ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, comm, stream) != ncclSuccess) return -1;
      }
      if (!dev->synchronize(stream).ok()) return -1;
      const int32_t* p = View<int32_t>(dev, buf, n);
      for (size_t i = 0; i < n; ++i) {
        int64_t v = 0;
        for (int r = 0; r < nranks; ++r) v += r + static_cast<int64_t>(i);
        for (int k = 1; k < 10; ++k) v *= nranks;
        if (p[i] != static_cast<int32_t>(v)) {
          std::fprintf(stderr, "[rank %d] %s: element %zu is %d\n", rank, what, i, p[i]);
          return -1;
        }
      }
      return static_cast<int64_t>(KnownAllocationCounts().hits - before);
    };
    // Two buffers a call (send and receive), ten calls.
    CHECK_OR_FAIL(calls(mem, "ncclMemAlloc'd") == 20, "ncclMemAlloc'd buffer: not from the table");
    CHECK_OR_FAIL(calls(raw, "unregistered") == 0, "unregistered buffer: from the table");
    void* handle = nullptr;
    CHECK_OR_FAIL(ncclCommRegister(comm, raw, n * 4, &handle) == ncclSuccess, "register");
    CHECK_OR_FAIL(calls(raw, "registered") == 20, "registered buffer: not from the table");
    CHECK_OR_FAIL(ncclCommDeregister(comm, handle) == ncclSuccess, "deregister");
    CHECK_OR_FAIL(calls(raw, "deregistered") == 0, "deregistered buffer: still in the table");
    const size_t known = KnownAllocationCounts().allocations;
    CHECK_OR_FAIL(ncclMemFree(mem) == ncclSuccess, "ncclMemFree");
    CHECK_OR_FAIL(KnownAllocationCounts().allocations == known - 1, "freed memory still known");
    // A registration left at destroy goes with the communicator (the buffer may be freed next,
    // and its addresses reused).
    CHECK_OR_FAIL(ncclCommRegister(comm, raw, n * 4, &handle) == ncclSuccess, "register");
    CHECK_OR_FAIL(KnownAllocationCounts().allocations == known, "registered buffer not known");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(KnownAllocationCounts().allocations == known - 1,
                  "a destroyed communicator's registration is still known");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->freeDevice(raw).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
