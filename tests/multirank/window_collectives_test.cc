// Collectives on peer windows (nccl/window_collectives.cc): buffers registered with
// ncclCommWindowRegister on every rank of a node are reduced or copied on the device, each rank
// reading and writing its peers' buffers directly, with no staging through the host: all-reduce
// (each rank's segment of every input into every output), all-gather (each rank's block pushed
// into every output), reduce-scatter (each rank's block of every input pulled and reduced),
// broadcast (the root pushes), reduce (the root pulls), all-to-all (each rank pushes its blocks,
// one pairwise kernel), gather (each rank pushes into the root's output) and scatter (each rank
// pulls from the root's input; these two on the peer-buffer path, windows or not). On
// the emulated device (BRAID_DEVICE=emulated), whose peer reduce is a host function on the stream
// over memfd-shared device memory.
//
// Checked: every type and op, in and out of place, 2 to 4 ranks, the first five collectives
// bit-exact against the same call on plain device buffers (the staged host path) in the same run,
// all-to-all, gather and scatter against the blocks the test computes, and the
// window path taken for every window call and no other; the stream-order test on windows
// (1000 repetitions, the send buffer written late on the stream, the result read on the stream, no
// host synchronisation), also on one hardware queue; ranks whose buffers sit at different offsets
// fail every rank with the reason and write nothing; a rank on windows against a rank on plain
// buffers fails both, and a rank on host buffers against one on device buffers fails fast,
// nothing hangs.
//
// The shim's objects are linked into this binary with the core (braid_nccl_objects), so that the
// test's emulated device is the one the shim uses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu/emulated_device.h"
#include "device/cpu/reduce_kernels.h"
#include "device/peer_memory.h"
#include "multirank/harness.h"
#include "multirank/nccl_shim_job.h"
#include "nccl.h"
#include "nccl/device_scratch.h"
#include "nccl/peer_buffers.h"
#include "nccl/peer_windows.h"
#include "nccl/shim.h"
#include "nccl/stream_path.h"

using braid::device::EmulatedDevice;
using braid_test::AllSucceeded;
using braid_test::DescribeOutcomes;
using braid_test::JobOptions;
using braid_test::RunJob;
using braid_test::shim::InitNccl;

#undef CHECK_OR_FAIL
#define CHECK_OR_FAIL(cond, ...) CHECK_OR_FAIL_WITH(ncclGetLastError(nullptr), cond, __VA_ARGS__)

namespace {

// The emulated device (BRAID_DEVICE=emulated), 120 s guard.
JobOptions Job(int nranks, const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return braid_test::shim::Job(nranks, "emulated", 120, env);
}

// Element i of `rank`'s input, as the value `v` encoded in type `t`. Values are small integers
// chosen so that every order of reduction gives the same bits (sums and products stay exact in
// every type, fp8 included), so the staged path's result is the reference.
void Encode(ncclDataType_t t, double v, void* out) {
  switch (t) {
    case ncclInt8:
      *static_cast<int8_t*>(out) = static_cast<int8_t>(v);
      break;
    case ncclUint8:
      *static_cast<uint8_t*>(out) = static_cast<uint8_t>(v);
      break;
    case ncclInt32:
      *static_cast<int32_t*>(out) = static_cast<int32_t>(v);
      break;
    case ncclUint32:
      *static_cast<uint32_t*>(out) = static_cast<uint32_t>(v);
      break;
    case ncclInt64:
      *static_cast<int64_t*>(out) = static_cast<int64_t>(v);
      break;
    case ncclUint64:
      *static_cast<uint64_t*>(out) = static_cast<uint64_t>(v);
      break;
    case ncclFloat16:
      *static_cast<uint16_t*>(out) = braid::FloatToHalf(static_cast<float>(v));
      break;
    case ncclBfloat16:
      *static_cast<uint16_t*>(out) = braid::FloatToBf16(static_cast<float>(v));
      break;
    case ncclFloat32:
      *static_cast<float*>(out) = static_cast<float>(v);
      break;
    case ncclFloat64:
      *static_cast<double*>(out) = v;
      break;
    case ncclFloat8e4m3:
      *static_cast<uint8_t*>(out) = braid::FloatToFp8E4M3(static_cast<float>(v));
      break;
    case ncclFloat8e5m2:
      *static_cast<uint8_t*>(out) = braid::FloatToFp8E5M2(static_cast<float>(v));
      break;
    default:
      break;
  }
}

double Input(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i) {
  const bool is_unsigned = t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
  const size_t h = (i * 7 + static_cast<size_t>(rank) * 3) % 8;
  switch (op) {
    case ncclProd:
      return 1.0 + static_cast<double>(h % 2);  // 1 or 2
    case ncclMax:
    case ncclMin:
      return is_unsigned ? static_cast<double>(h) : static_cast<double>(h) - 3;
    default:
      return static_cast<double>(h % 2);  // sum and avg: 0 or 1
  }
}

// For the collectives that only move data: `bytes` bytes distinct for each tag and position (the
// type does not matter), so a block sent to the wrong place, or shifted, shows.
void Bytes(int tag, size_t bytes, unsigned char* out) {
  for (size_t j = 0; j < bytes; ++j) {
    const uint32_t x = static_cast<uint32_t>(tag) * 2654435761u ^ static_cast<uint32_t>(j) * 40503u;
    out[j] = static_cast<unsigned char>((x >> 11) ^ (x >> 23) ^ j);
  }
}

constexpr ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                     ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                     ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// `call` on the staged path (every rank stages the same calls).
template <typename F>
ncclResult_t Staged(F call) {
  braid::nccl::StageDeviceCallsForTesting(true);
  const ncclResult_t r = call();
  braid::nccl::StageDeviceCallsForTesting(false);
  return r;
}

// The "w" buffers take a device path: in windows, or (peer_buffers) plain device buffers outside
// any window (nccl/peer_buffers.h); the "p" buffers stage (StageDeviceCallsForTesting), the
// reference.
int EveryTypeAndOp(const braidUniqueId& id, int rank, int nranks, bool peer_buffers = false) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  const size_t counts[] = {1, 37, 4099};
  const size_t bytes = 4099 * 8;
  void *wsend = nullptr, *wrecv = nullptr;
  ncclWindow_t ws = nullptr, wr = nullptr;
  if (peer_buffers) {
    wsend = *dev->allocDevice(bytes);
    wrecv = *dev->allocDevice(bytes);
  } else {
    CHECK_OR_FAIL(
        ncclMemAlloc(&wsend, bytes) == ncclSuccess && ncclMemAlloc(&wrecv, bytes) == ncclSuccess,
        "ncclMemAlloc");
    CHECK_OR_FAIL(
        ncclCommWindowRegister(comm, wsend, bytes, &ws, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess &&
            ncclCommWindowRegister(comm, wrecv, bytes, &wr, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess,
        "window register");
  }
  void* psend = *dev->allocDevice(bytes);
  void* precv = *dev->allocDevice(bytes);
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  const auto device_calls = [peer_buffers] {
    return peer_buffers ? braid::nccl::PeerBufferCalls() : braid::nccl::WindowCalls();
  };
  const uint64_t window_calls = device_calls();
  const uint64_t peer_buffer_calls = braid::nccl::PeerBufferCalls();

  int calls = 0;
  int root_calls = 0;  // gather and scatter: the peer-buffer path, windows or not
  std::vector<unsigned char> in(bytes);
  for (ncclDataType_t t : kTypes)
    for (ncclRedOp_t op : kOps)
      for (size_t n : counts)
        for (bool in_place : {false, true}) {
          const size_t e = braid::nccl::TypeSize(t);
          for (size_t i = 0; i < n; ++i) Encode(t, Input(t, op, rank, i), in.data() + i * e);
          void* wsrc = in_place ? wrecv : wsend;
          void* psrc = in_place ? precv : psend;
          // The stream is idle here (synchronised below): the host may fill the buffers.
          std::memcpy(*dev->hostView(wsrc, n * e), in.data(), n * e);
          std::memcpy(*dev->hostView(psrc, n * e), in.data(), n * e);
          CHECK_OR_FAIL(ncclAllReduce(wsrc, wrecv, n, t, op, comm, stream) == ncclSuccess,
                        "window all-reduce type %d op %d n %zu", static_cast<int>(t),
                        static_cast<int>(op), n);
          CHECK_OR_FAIL(Staged([&] {
                          return ncclAllReduce(psrc, precv, n, t, op, comm, stream);
                        }) == ncclSuccess,
                        "staged all-reduce");
          CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
          ++calls;
          const auto* got = static_cast<const unsigned char*>(*dev->hostView(wrecv, n * e));
          const auto* want = static_cast<const unsigned char*>(*dev->hostView(precv, n * e));
          for (size_t i = 0; i < n * e; ++i)
            CHECK_OR_FAIL(got[i] == want[i],
                          "type %d op %d n %zu %s: byte %zu is %02x, the staged path's %02x",
                          static_cast<int>(t), static_cast<int>(op), n,
                          in_place ? "in place" : "out of place", i, got[i], want[i]);
        }
  // All-gather (the output in a window) and reduce-scatter (the input in a window), every type
  // (and op), in and out of place (the in-place block: this rank's of the larger buffer).
  for (ncclDataType_t t : kTypes)
    for (size_t n : {size_t{1}, size_t{37}, size_t{1000}})
      for (bool in_place : {false, true}) {
        const size_t e = braid::nccl::TypeSize(t);
        const size_t block = n * e;
        const size_t total = block * static_cast<size_t>(nranks);
        // All-gather: input block `rank`, output all blocks.
        for (size_t i = 0; i < n; ++i) Encode(t, Input(t, ncclMax, rank, i), in.data() + i * e);
        void* wsrc = in_place ? static_cast<char*>(wrecv) + block * rank : wsend;
        void* psrc = in_place ? static_cast<char*>(precv) + block * rank : psend;
        std::memcpy(*dev->hostView(wsrc, block), in.data(), block);
        std::memcpy(*dev->hostView(psrc, block), in.data(), block);
        CHECK_OR_FAIL(ncclAllGather(wsrc, wrecv, n, t, comm, stream) == ncclSuccess,
                      "window all-gather type %d n %zu", static_cast<int>(t), n);
        CHECK_OR_FAIL(
            Staged([&] { return ncclAllGather(psrc, precv, n, t, comm, stream); }) == ncclSuccess,
            "staged all-gather");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++calls;
        CHECK_OR_FAIL(
            std::memcmp(*dev->hostView(wrecv, total), *dev->hostView(precv, total), total) == 0,
            "all-gather type %d n %zu %s differs from the staged path", static_cast<int>(t), n,
            in_place ? "in place" : "out of place");
        // Broadcast from the last rank (in place: the root's output is its input) and ncclBcast.
        const int root = nranks - 1;
        for (size_t i = 0; i < n; ++i)
          Encode(t, Input(t, ncclMax, rank + 11, i), in.data() + i * e);
        void* wbsrc = in_place ? wrecv : wsend;
        void* pbsrc = in_place ? precv : psend;
        std::memcpy(*dev->hostView(wbsrc, block), in.data(), block);
        std::memcpy(*dev->hostView(pbsrc, block), in.data(), block);
        CHECK_OR_FAIL(ncclBroadcast(wbsrc, wrecv, n, t, root, comm, stream) == ncclSuccess,
                      "window broadcast");
        CHECK_OR_FAIL(Staged([&] {
                        return ncclBroadcast(pbsrc, precv, n, t, root, comm, stream);
                      }) == ncclSuccess,
                      "staged broadcast");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++calls;
        CHECK_OR_FAIL(
            std::memcmp(*dev->hostView(wrecv, block), *dev->hostView(precv, block), block) == 0,
            "broadcast type %d n %zu %s differs from the staged path", static_cast<int>(t), n,
            in_place ? "in place" : "out of place");
        CHECK_OR_FAIL(ncclBcast(wsend, n, t, 0, comm, stream) == ncclSuccess, "window bcast");
        CHECK_OR_FAIL(
            Staged([&] { return ncclBcast(psend, n, t, 0, comm, stream); }) == ncclSuccess,
            "staged bcast");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++calls;
        CHECK_OR_FAIL(
            std::memcmp(*dev->hostView(wsend, block), *dev->hostView(psend, block), block) == 0,
            "bcast type %d n %zu differs from the staged path", static_cast<int>(t), n);
        for (ncclRedOp_t op : kOps) {
          // Reduce to the root: every rank's input (in a window), the root's output.
          for (size_t i = 0; i < n; ++i) Encode(t, Input(t, op, rank, i), in.data() + i * e);
          std::memcpy(*dev->hostView(wsend, block), in.data(), block);
          std::memcpy(*dev->hostView(psend, block), in.data(), block);
          void* wrdst = in_place ? wsend : wrecv;
          void* prdst = in_place ? psend : precv;
          CHECK_OR_FAIL(ncclReduce(wsend, wrdst, n, t, op, root, comm, stream) == ncclSuccess,
                        "window reduce");
          CHECK_OR_FAIL(Staged([&] {
                          return ncclReduce(psend, prdst, n, t, op, root, comm, stream);
                        }) == ncclSuccess,
                        "staged reduce");
          CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
          ++calls;
          if (rank == root)
            CHECK_OR_FAIL(
                std::memcmp(*dev->hostView(wrdst, block), *dev->hostView(prdst, block), block) == 0,
                "reduce type %d op %d n %zu %s differs from the staged path", static_cast<int>(t),
                static_cast<int>(op), n, in_place ? "in place" : "out of place");
        }
        for (ncclRedOp_t op : kOps) {
          // Reduce-scatter: input all blocks, output block `rank`.
          for (int b = 0; b < nranks; ++b)
            for (size_t i = 0; i < n; ++i)
              Encode(t, Input(t, op, rank + b * 5, i), in.data() + (b * n + i) * e);
          std::memcpy(*dev->hostView(wsend, total), in.data(), total);
          std::memcpy(*dev->hostView(psend, total), in.data(), total);
          void* wdst = in_place ? static_cast<char*>(wsend) + block * rank : wrecv;
          void* pdst = in_place ? static_cast<char*>(psend) + block * rank : precv;
          CHECK_OR_FAIL(ncclReduceScatter(wsend, wdst, n, t, op, comm, stream) == ncclSuccess,
                        "window reduce-scatter type %d op %d n %zu", static_cast<int>(t),
                        static_cast<int>(op), n);
          CHECK_OR_FAIL(Staged([&] {
                          return ncclReduceScatter(psend, pdst, n, t, op, comm, stream);
                        }) == ncclSuccess,
                        "staged reduce-scatter");
          CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
          ++calls;
          CHECK_OR_FAIL(
              std::memcmp(*dev->hostView(wdst, block), *dev->hostView(pdst, block), block) == 0,
              "reduce-scatter type %d op %d n %zu %s differs from the staged path",
              static_cast<int>(t), static_cast<int>(op), n, in_place ? "in place" : "out of place");
        }
      }
  // All-to-all (the output in a window; out of place), gather and scatter (in place from root
  // 0, out of place to and from the last rank; the ranks off the root pass no buffer for the
  // side they do not use), every type, checked against the bytes each rank's blocks must hold.
  for (ncclDataType_t t : kTypes)
    for (size_t n : {size_t{1}, size_t{37}, size_t{1000}}) {
      const size_t e = braid::nccl::TypeSize(t);
      const size_t block = n * e;
      const size_t total = block * static_cast<size_t>(nranks);
      // All-to-all: rank s's block d is Bytes(s * 64 + d).
      std::vector<unsigned char> want(total);
      for (int d = 0; d < nranks; ++d) Bytes(rank * 64 + d, block, in.data() + block * d);
      for (int s = 0; s < nranks; ++s) Bytes(s * 64 + rank, block, want.data() + block * s);
      std::memcpy(*dev->hostView(wsend, total), in.data(), total);
      std::memset(*dev->hostView(wrecv, total), 0xee, total);
      CHECK_OR_FAIL(ncclAlltoAll(wsend, wrecv, n, t, comm, stream) == ncclSuccess,
                    "device all-to-all type %d n %zu", static_cast<int>(t), n);
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      ++calls;
      CHECK_OR_FAIL(std::memcmp(*dev->hostView(wrecv, total), want.data(), total) == 0,
                    "all-to-all type %d n %zu: a block differs from its sender's",
                    static_cast<int>(t), n);
      // In place, on the device path (from a copy in device scratch) and staged.
      std::memcpy(*dev->hostView(wrecv, total), in.data(), total);
      std::memcpy(*dev->hostView(precv, total), in.data(), total);
      CHECK_OR_FAIL(
          ncclAlltoAll(wrecv, wrecv, n, t, comm, stream) == ncclSuccess &&
              Staged([&] { return ncclAlltoAll(precv, precv, n, t, comm, stream); }) == ncclSuccess,
          "in-place all-to-all type %d n %zu", static_cast<int>(t), n);
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      ++calls;
      CHECK_OR_FAIL(std::memcmp(*dev->hostView(wrecv, total), want.data(), total) == 0,
                    "in-place all-to-all type %d n %zu: a block differs", static_cast<int>(t), n);
      CHECK_OR_FAIL(std::memcmp(*dev->hostView(precv, total), want.data(), total) == 0,
                    "staged in-place all-to-all type %d n %zu: a block differs",
                    static_cast<int>(t), n);
      for (bool in_place : {false, true}) {
        const int root = in_place ? 0 : nranks - 1;
        const bool here = in_place && rank == root;
        // Gather: rank s sends Bytes(s + 1000); the root's output holds them in rank order. In
        // place (NCCL's form): the root's input is its own block of the output.
        void* gsrc = here ? static_cast<char*>(wrecv) + block * rank : wsend;
        void* grecv = rank == root ? wrecv : nullptr;
        Bytes(rank + 1000, block, in.data());
        if (rank == root) std::memset(*dev->hostView(wrecv, total), 0xee, total);
        std::memcpy(*dev->hostView(gsrc, block), in.data(), block);
        CHECK_OR_FAIL(ncclGather(gsrc, grecv, n, t, root, comm, stream) == ncclSuccess,
                      "device gather type %d n %zu", static_cast<int>(t), n);
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++root_calls;
        if (rank == root) {
          for (int s = 0; s < nranks; ++s) Bytes(s + 1000, block, want.data() + block * s);
          CHECK_OR_FAIL(std::memcmp(*dev->hostView(wrecv, total), want.data(), total) == 0,
                        "gather type %d n %zu %s: the root's output differs", static_cast<int>(t),
                        n, in_place ? "in place" : "out of place");
        }
        // Scatter: the root's block d is Bytes(d + 2000); rank d receives it. In place: the
        // root's output is its own block of the input.
        void* ssend = rank == root ? wsend : nullptr;
        void* sdst = here ? static_cast<char*>(wsend) + block * rank : wrecv;
        if (rank == root) {
          for (int d = 0; d < nranks; ++d) Bytes(d + 2000, block, in.data() + block * d);
          std::memcpy(*dev->hostView(wsend, total), in.data(), total);
        }
        if (!here) std::memset(*dev->hostView(sdst, block), 0xee, block);
        CHECK_OR_FAIL(ncclScatter(ssend, sdst, n, t, root, comm, stream) == ncclSuccess,
                      "device scatter type %d n %zu", static_cast<int>(t), n);
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++root_calls;
        Bytes(rank + 2000, block, want.data());
        CHECK_OR_FAIL(std::memcmp(*dev->hostView(sdst, block), want.data(), block) == 0,
                      "scatter type %d n %zu %s: rank %d's output differs", static_cast<int>(t), n,
                      in_place ? "in place" : "out of place", rank);
      }
    }
  // On windows, gather and scatter take the peer-buffer path (window_collectives.cc), the others
  // the window path; with peer buffers, every call the peer-buffer path.
  const uint64_t root_path = braid::nccl::PeerBufferCalls() - peer_buffer_calls;
  CHECK_OR_FAIL(device_calls() - window_calls ==
                    static_cast<uint64_t>(calls + (peer_buffers ? root_calls : 0)),
                "%llu calls took the device path, want %d",
                static_cast<unsigned long long>(device_calls() - window_calls),
                calls + (peer_buffers ? root_calls : 0));
  CHECK_OR_FAIL(peer_buffers || root_path == static_cast<uint64_t>(root_calls),
                "%llu gathers and scatters took the peer-buffer path, want %d",
                static_cast<unsigned long long>(root_path), root_calls);
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                "async error %d", static_cast<int>(async));
  if (!peer_buffers)
    CHECK_OR_FAIL(ncclCommWindowDeregister(comm, ws) == ncclSuccess &&
                      ncclCommWindowDeregister(comm, wr) == ncclSuccess,
                  "deregister");
  CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
  if (peer_buffers)
    CHECK_OR_FAIL(dev->freeDevice(wsend).ok() && dev->freeDevice(wrecv).ok(), "free");
  else
    CHECK_OR_FAIL(ncclMemFree(wsend) == ncclSuccess && ncclMemFree(wrecv) == ncclSuccess, "free");
  CHECK_OR_FAIL(dev->freeDevice(psend).ok() && dev->freeDevice(precv).ok(), "free");
  return 0;
}

TEST(WindowCollectives, EveryTypeAndOpBitExactTwoRanks) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return EveryTypeAndOp(id, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(WindowCollectives, EveryTypeAndOpBitExactThreeRanks) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return EveryTypeAndOp(id, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(WindowCollectives, EveryTypeAndOpBitExactFourRanks) {
  auto out = RunJob(Job(4), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return EveryTypeAndOp(id, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The same on plain device buffers outside any window: the peer-buffer path (IPC mappings made
// per call and cached), bit-exact against the staged path in the same run.
TEST(WindowCollectives, PeerBuffersEveryTypeAndOpBitExactTwoRanks) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return EveryTypeAndOp(id, rank, nranks, /*peer_buffers=*/true);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(WindowCollectives, PeerBuffersEveryTypeAndOpBitExactFourRanks) {
  auto out = RunJob(Job(4), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return EveryTypeAndOp(id, rank, nranks, /*peer_buffers=*/true);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The stream-order test on windows: a host function on the stream writes the send buffer
// (late by a random 0-40 us), the all-reduce follows on the same stream, a host function reads the
// result: `reps` times with no host synchronisation. fp32 sums of small integers (exact in any
// order); every fifth in place.
int StreamOrderOnWindows(const braidUniqueId& id, int rank, int nranks, int reps) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  const size_t counts[] = {1, 7, 1000, 4099};
  const size_t bytes = 4099 * 4;
  void *send = nullptr, *recv = nullptr;
  CHECK_OR_FAIL(
      ncclMemAlloc(&send, bytes) == ncclSuccess && ncclMemAlloc(&recv, bytes) == ncclSuccess,
      "ncclMemAlloc");
  ncclWindow_t ws = nullptr, wr = nullptr;
  CHECK_OR_FAIL(
      ncclCommWindowRegister(comm, send, bytes, &ws, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess &&
          ncclCommWindowRegister(comm, recv, bytes, &wr, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess,
      "window register");
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  std::mt19937 rng(99 + rank);
  auto bad = std::make_shared<std::atomic<int>>(0);
  auto checked = std::make_shared<std::atomic<int>>(0);
  const uint64_t window_calls = braid::nccl::WindowCalls();

  for (int rep = 0; rep < reps; ++rep) {
    const size_t n = counts[rep % 4];
    void* src = rep % 5 == 4 ? recv : send;
    const int delay_us = static_cast<int>(rng() % 40);
    auto value = [](int r, int rep, size_t i) {
      return static_cast<float>((static_cast<uint32_t>(r + 1) * 7919u +
                                 static_cast<uint32_t>(rep) * 31u + static_cast<uint32_t>(i)) %
                                65536u);
    };
    CHECK_OR_FAIL(
        dev->launchHostFunction(stream,
                                [=] {
                                  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
                                  auto* f = static_cast<float*>(*dev->hostView(src, n * 4));
                                  for (size_t i = 0; i < n; ++i) f[i] = value(rank, rep, i);
                                })
            .ok(),
        "launch");
    CHECK_OR_FAIL(ncclAllReduce(src, recv, n, ncclFloat32, ncclSum, comm, stream) == ncclSuccess,
                  "ncclAllReduce rep %d", rep);
    CHECK_OR_FAIL(dev->launchHostFunction(stream,
                                          [=] {
                                            const auto* f = static_cast<const float*>(
                                                *dev->hostView(recv, n * 4));
                                            for (size_t i = 0; i < n; ++i) {
                                              float want = 0;
                                              for (int r = 0; r < nranks; ++r)
                                                want += value(r, rep, i);
                                              if (std::memcmp(&f[i], &want, 4) != 0) {
                                                if (bad->fetch_add(1) == 0)
                                                  std::fprintf(stderr,
                                                               "[rank %d] rep %d element %zu: "
                                                               "%g, want %g\n",
                                                               rank, rep, i, f[i], want);
                                                return;
                                              }
                                            }
                                            checked->fetch_add(1);
                                          })
                      .ok(),
                  "launch");
  }
  CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
  CHECK_OR_FAIL(bad->load() == 0, "%d of %d repetitions wrong", bad->load(), reps);
  CHECK_OR_FAIL(checked->load() == reps, "%d of %d repetitions checked", checked->load(), reps);
  CHECK_OR_FAIL(braid::nccl::WindowCalls() - window_calls == static_cast<uint64_t>(reps),
                "not every call took the window path");
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                "async error %d", static_cast<int>(async));
  CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
  CHECK_OR_FAIL(ncclMemFree(send) == ncclSuccess && ncclMemFree(recv) == ncclSuccess, "free");
  return 0;
}

TEST(WindowCollectives, OrderedOnTheStream1000TimesTwoRanks) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return StreamOrderOnWindows(id, rank, nranks, 1000);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(WindowCollectives, OrderedOnTheStreamFourRanks) {
  auto out = RunJob(Job(4), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return StreamOrderOnWindows(id, rank, nranks, 300);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM sets it): the device work is
// on the call's own stream, so nothing waits behind a wait for the agent.
TEST(WindowCollectives, OrderedOnOneHardwareQueue) {
  auto out = RunJob(Job(2, {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}}),
                    [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
                      return StreamOrderOnWindows(id, rank, nranks, 300);
                    });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 2's buffers sit 64 bytes further into the windows than the others': every rank's call
// fails with the reason (an asynchronous error, as NCCL reports a failed stream-ordered call), and
// no rank's output is touched.
TEST(WindowCollectives, DifferentOffsetsFailEveryRankAndWriteNothing) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t bytes = 8192, n = 1000;
    void *send = nullptr, *recv = nullptr;
    CHECK_OR_FAIL(
        ncclMemAlloc(&send, bytes) == ncclSuccess && ncclMemAlloc(&recv, bytes) == ncclSuccess,
        "ncclMemAlloc");
    ncclWindow_t ws = nullptr, wr = nullptr;
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, send, bytes, &ws, 0) == ncclSuccess &&
                      ncclCommWindowRegister(comm, recv, bytes, &wr, 0) == ncclSuccess,
                  "window register");
    std::memset(*dev->hostView(send, bytes), 1, bytes);
    std::memset(*dev->hostView(recv, bytes), 0x5a, bytes);
    const size_t shift = rank == 2 ? 64 : 0;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(ncclAllReduce(static_cast<char*>(send) + shift, static_cast<char*>(recv) + shift,
                                n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "the call is refused only once it runs");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclInvalidUsage,
                  "async error %d", static_cast<int>(async));
    const std::string why = ncclGetLastError(comm);
    CHECK_OR_FAIL(
        why.find("same offsets") != std::string::npos &&
            why.find("rank 2 has all-reduce on windows, send at offset 64") != std::string::npos,
        "message: %s", why.c_str());
    const auto* r = static_cast<const unsigned char*>(*dev->hostView(recv, bytes));
    for (size_t i = 0; i < bytes; ++i)
      CHECK_OR_FAIL(r[i] == 0x5a, "output byte %zu written (%02x)", i, r[i]);
    // A later call fails at once with the kept error.
    CHECK_OR_FAIL(ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream) != ncclSuccess,
                  "a call after the failure ran");
    CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(ncclMemFree(send) == ncclSuccess && ncclMemFree(recv) == ncclSuccess, "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 0's buffers are in windows, rank 1's are not: rank 0 takes the window path, rank 1 the
// staged one. The two calls do not match, and both ranks fail instead of hanging.
TEST(WindowCollectives, ARankOffTheWindowsFailsBothRanks) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t bytes = 8192, n = 1000;
    void *send = nullptr, *recv = nullptr;
    CHECK_OR_FAIL(
        ncclMemAlloc(&send, bytes) == ncclSuccess && ncclMemAlloc(&recv, bytes) == ncclSuccess,
        "ncclMemAlloc");
    ncclWindow_t ws = nullptr, wr = nullptr;
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, send, bytes, &ws, 0) == ncclSuccess &&
                      ncclCommWindowRegister(comm, recv, bytes, &wr, 0) == ncclSuccess,
                  "window register");
    void* plain = *dev->allocDevice(bytes);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    void* buf = rank == 0 ? send : plain;
    void* out_buf = rank == 0 ? recv : plain;
    CHECK_OR_FAIL(ncclAllReduce(buf, out_buf, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "submit");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess,
                  "mismatched paths ran as one call");
    const std::string why = ncclGetLastError(comm);
    CHECK_OR_FAIL(why.find("call mismatch") != std::string::npos, "message: %s", why.c_str());
    CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(dev->freeDevice(plain).ok() && ncclMemFree(send) == ncclSuccess &&
                      ncclMemFree(recv) == ncclSuccess,
                  "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A rank whose buffers are host memory (NCCL requires device memory; braid stages such a rank)
// against a rank whose buffers are device memory, never a hang: rank 0 takes the device path,
// rank 1 stages. The all-to-all fails on both with a call mismatch. A gather or scatter is
// sends and receives on the staged rank against the device path's exchange (a collective):
// where the staged rank receives (a scatter from rank 0, a gather into rank 1) the two are in a
// deadlock, which the core finds within about a second (Engine::p2pDeadlock) and fails on both
// as invalid usage; where it sends (a gather into rank 0, a scatter from rank 1) its send leaves
// at once and may succeed, and the device rank fails once the staged rank aborts. The device rank
// never succeeds, and no rank waits anything like BRAID_TIMEOUT.
int MixedHostAndDevice(const braidUniqueId& id, int rank, int nranks, int which) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  const size_t n = 100, block = n * 4, bytes = block * nranks;
  std::vector<unsigned char> host_send(bytes), host_recv(bytes, 0xee);
  const bool on_host = rank == 1;
  void* send = on_host ? host_send.data() : *dev->allocDevice(bytes);
  void* recv = on_host ? host_recv.data() : *dev->allocDevice(bytes);
  const auto view = [&](void* p) {
    return static_cast<unsigned char*>(on_host ? p : *dev->hostView(p, bytes));
  };
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  for (int d = 0; d < nranks; ++d) Bytes(rank * 8 + d, block, view(send) + block * d);
  std::memset(view(recv), 0xee, bytes);
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t r = ncclSuccess;
  if (which == 0) r = ncclAlltoAll(send, recv, n, ncclInt32, comm, stream);
  if (which == 1) r = ncclGather(send, recv, n, ncclInt32, 0, comm, stream);
  if (which == 2) r = ncclScatter(send, recv, n, ncclInt32, 0, comm, stream);
  if (which == 3) r = ncclGather(send, recv, n, ncclInt32, 1, comm, stream);
  if (which == 4) r = ncclScatter(send, recv, n, ncclInt32, 1, comm, stream);
  CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess, "get async error");
  const bool failed = r != ncclSuccess || async != ncclSuccess;
  const std::string why = ncclGetLastError(comm);
  CHECK_OR_FAIL(took < 20, "call %d took %.1f s: %s", which, took, why.c_str());
  const bool deadlock = which == 2 || which == 3;  // the staged rank receives
  if (which == 0 || deadlock || !on_host) {
    CHECK_OR_FAIL(failed, "call %d across host and device paths succeeded on rank %d", which, rank);
  }
  if (which == 0)
    CHECK_OR_FAIL(why.find("call mismatch") != std::string::npos, "all-to-all: message: %s",
                  why.c_str());
  if (deadlock && !on_host)
    CHECK_OR_FAIL(why.find("deadlock: rank 1") != std::string::npos, "call %d: message: %s", which,
                  why.c_str());
  if (deadlock && on_host)
    CHECK_OR_FAIL(why.find("a deadlock") != std::string::npos, "call %d: message: %s", which,
                  why.c_str());
  CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
  CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
  if (!on_host) CHECK_OR_FAIL(dev->freeDevice(send).ok() && dev->freeDevice(recv).ok(), "free");
  return 0;
}

TEST(WindowCollectives, HostAgainstDeviceBuffersFailsFastAndNeverHangs) {
  const char* names[] = {"all-to-all", "gather into rank 0", "scatter from rank 0",
                         "gather into rank 1", "scatter from rank 1"};
  for (int which : {0, 1, 2, 3, 4}) {
    auto out = RunJob(Job(2), [which](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
      return MixedHostAndDevice(id, rank, nranks, which);
    });
    EXPECT_TRUE(AllSucceeded(out)) << names[which] << ": " << DescribeOutcomes(out);
  }
}

// Peer buffers are mapped once and kept: the first all-reduce on two fresh buffers opens the
// peer's two allocations, the next 20 open nothing; buffers freed and allocated again (a new
// allocation, a new handle) are mapped anew and the results stay exact; the cache never holds
// more than the live allocations plus what it has not yet seen freed. 3 ranks as processes.
TEST(WindowCollectives, PeerBuffersAreMappedOnceAndFollowReallocation) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    braid::device::PeerMemoryMap* map = braid::device::ProcessPeerMemory();
    CHECK_OR_FAIL(map != nullptr, "no peer memory map");
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t n = 3000, bytes = n * sizeof(int32_t);
    const uint64_t calls0 = braid::nccl::PeerBufferCalls();
    int calls = 0;
    for (int round = 0; round < 3; ++round) {
      void* send = *dev->allocDevice(bytes);
      void* recv = *dev->allocDevice(bytes);
      const uint64_t opens0 = map->opens();
      for (int rep = 0; rep < 21; ++rep) {
        auto* in = static_cast<int32_t*>(*dev->hostView(send, bytes));
        for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 3 + rank * 7 + rep + round);
        CHECK_OR_FAIL(ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                      "all-reduce");
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++calls;
        const auto* got = static_cast<const int32_t*>(*dev->hostView(recv, bytes));
        for (size_t i = 0; i < n; ++i) {
          int32_t want = 0;
          for (int r = 0; r < nranks; ++r)
            want += static_cast<int32_t>(i * 3 + r * 7 + rep + round);
          CHECK_OR_FAIL(got[i] == want, "round %d rep %d element %zu: %d, want %d", round, rep, i,
                        got[i], want);
        }
        // Each peer's two allocations, opened by the first call only.
        const uint64_t want_opens = static_cast<uint64_t>(2 * (nranks - 1));
        CHECK_OR_FAIL(map->opens() - opens0 == want_opens, "round %d rep %d: %llu opens, want %llu",
                      round, rep, static_cast<unsigned long long>(map->opens() - opens0),
                      static_cast<unsigned long long>(want_opens));
      }
      CHECK_OR_FAIL(dev->freeDevice(send).ok() && dev->freeDevice(recv).ok(), "free");
    }
    CHECK_OR_FAIL(braid::nccl::PeerBufferCalls() - calls0 == static_cast<uint64_t>(calls),
                  "%llu calls on peer buffers, want %d",
                  static_cast<unsigned long long>(braid::nccl::PeerBufferCalls() - calls0), calls);
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d", static_cast<int>(async));
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    // The destroy closed every mapping the communicator held.
    CHECK_OR_FAIL(map->mapped() == 0, "%zu peer allocations still mapped", map->mapped());
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A peer allocation that cannot be mapped (here: gone, on the emulated device) fails the call on
// every rank with the failing rank's reason, writes nothing, and the next call maps
// again and succeeds. Rank 1 frees its input right after the call is queued but before its
// stream lets it run: rank 0 cannot open it.
TEST(WindowCollectives, APeerBufferThatCannotBeMappedFailsEveryRank) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t n = 1000, bytes = n * sizeof(int32_t);
    void* send = *dev->allocDevice(bytes);
    void* recv = *dev->allocDevice(bytes);
    std::memset(*dev->hostView(recv, bytes), 0x5a, bytes);
    // Held: the agent sees `ready` only after the free below.
    CHECK_OR_FAIL(dev->pauseStream(stream).ok(), "pause");
    CHECK_OR_FAIL(ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "submit");
    void* kept = send;
    if (rank == 1) {
      // Freed with its call queued (a program error NCCL leaves undefined): the peer's open fails.
      CHECK_OR_FAIL(dev->freeDevice(send).ok(), "free");
      kept = nullptr;
    }
    CHECK_OR_FAIL(dev->resumeStream(stream).ok(), "resume");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess,
                  "a call on an unmappable buffer succeeded");
    const std::string why = ncclGetLastError(comm);
    CHECK_OR_FAIL(why.find("rank 0 cannot map rank 1's device buffer") != std::string::npos,
                  "message: %s", why.c_str());
    const auto* untouched = static_cast<const unsigned char*>(*dev->hostView(recv, bytes));
    for (size_t i = 0; i < bytes; ++i)
      CHECK_OR_FAIL(untouched[i] == 0x5a, "byte %zu of the output was written", i);
    CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    if (kept) CHECK_OR_FAIL(dev->freeDevice(kept).ok(), "free");
    CHECK_OR_FAIL(dev->freeDevice(recv).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A call wrapped in a group of its own is the call (NCCL's rule, braid.h): rank 0 groups each
// call, rank 1 does not, and both take the device path as the call alone would, with exact
// results (all-reduce, gather into rank 1, scatter from rank 0). Before, every device call in a
// group staged, so the two ranks ran different paths and failed (a call mismatch, for gather and
// scatter a deadlock). A group of two calls stages them as one braid group on every rank.
TEST(WindowCollectives, AGroupOfOneCallTakesTheDevicePathAsTheCallAlone) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t n = 777, block = n * sizeof(int32_t), total = block * nranks;
    void* send = *dev->allocDevice(total);
    void* recv = *dev->allocDevice(total);
    const bool grouped = rank == 0;
    const auto call = [&](const auto& fn) {
      if (grouped && ncclGroupStart() != ncclSuccess) return ncclInternalError;
      ncclResult_t r = fn();
      if (grouped) {
        const ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess) r = e;
      }
      return r;
    };
    const uint64_t calls0 = braid::nccl::PeerBufferCalls();
    // All-reduce.
    auto* in = static_cast<int32_t*>(*dev->hostView(send, total));
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 5 + rank * 11);
    CHECK_OR_FAIL(call([&] {
                    return ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream);
                  }) == ncclSuccess,
                  "all-reduce");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    const auto* got = static_cast<const int32_t*>(*dev->hostView(recv, total));
    for (size_t i = 0; i < n; ++i)
      CHECK_OR_FAIL(got[i] == static_cast<int32_t>(2 * i * 5 + 11), "all-reduce element %zu: %d", i,
                    got[i]);
    // Gather into rank 1, scatter from rank 0.
    std::vector<unsigned char> want(total);
    Bytes(rank + 300, block, static_cast<unsigned char*>(*dev->hostView(send, block)));
    CHECK_OR_FAIL(call([&] {
                    return ncclGather(send, rank == 1 ? recv : nullptr, n, ncclInt32, 1, comm,
                                      stream);
                  }) == ncclSuccess,
                  "gather");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    if (rank == 1) {
      for (int s = 0; s < nranks; ++s) Bytes(s + 300, block, want.data() + block * s);
      CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv, total), want.data(), total) == 0,
                    "gather: the root's output differs");
    }
    if (rank == 0)
      for (int d = 0; d < nranks; ++d)
        Bytes(d + 400, block, static_cast<unsigned char*>(*dev->hostView(send, total)) + block * d);
    CHECK_OR_FAIL(call([&] {
                    return ncclScatter(rank == 0 ? send : nullptr, recv, n, ncclInt32, 0, comm,
                                       stream);
                  }) == ncclSuccess,
                  "scatter");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    Bytes(rank + 400, block, want.data());
    CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv, block), want.data(), block) == 0,
                  "scatter: rank %d's output differs", rank);
    const uint64_t took = braid::nccl::PeerBufferCalls() - calls0;
    CHECK_OR_FAIL(took == 3, "%llu of 3 calls on the device path (grouped %d)",
                  static_cast<unsigned long long>(took), grouped);
    // Two all-reduces in one group on two streams, on both ranks: ordered on both streams
    // together, so staged as one braid group, exact.
    void* recv2 = *dev->allocDevice(block);
    cudaStream_t stream2 = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group start");
    CHECK_OR_FAIL(
        ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess &&
            ncclAllReduce(send, recv2, n, ncclInt32, ncclMax, comm, stream2) == ncclSuccess,
        "grouped all-reduces");
    CHECK_OR_FAIL(ncclGroupEnd() == ncclSuccess, "group end");
    CHECK_OR_FAIL(dev->synchronize(stream).ok() && dev->synchronize(stream2).ok(), "synchronize");
    CHECK_OR_FAIL(braid::nccl::PeerBufferCalls() - calls0 == 3,
                  "a group on two streams took the device path");
    std::vector<int32_t> a(n), b(n);
    for (int r = 0; r < nranks; ++r) {
      std::vector<unsigned char> bytes(block);
      Bytes(r == 0 ? 400 : 300 + r, block, bytes.data());  // what each rank's send holds now
      const auto* v = reinterpret_cast<const int32_t*>(bytes.data());
      for (size_t i = 0; i < n; ++i) {
        a[i] = r == 0
                   ? v[i]
                   : static_cast<int32_t>(static_cast<uint32_t>(a[i]) +
                                          static_cast<uint32_t>(v[i]));  // (wraps, as the kernel)
        b[i] = r == 0 ? v[i] : std::max(b[i], v[i]);
      }
    }
    CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv, block), a.data(), block) == 0,
                  "grouped sum differs");
    CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv2, block), b.data(), block) == 0,
                  "grouped max differs");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d: %s", static_cast<int>(async), ncclGetLastError(comm));
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok() && dev->destroyStream(stream2).ok(),
                  "destroy stream");
    CHECK_OR_FAIL(
        dev->freeDevice(send).ok() && dev->freeDevice(recv).ok() && dev->freeDevice(recv2).ok(),
        "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A group of several collectives on one stream runs each as it would alone, in order: one rank
// groups them, the other issues them one by one (each rank in turn), and both run the same paths
// (NCCL runs both forms alike; before, the grouped rank staged them all and the two failed as a
// call mismatch). The group holds a call that depends on the one before it, one that stages (a
// pre-multiplied sum: no device path) between device calls, and a scatter of what the gather
// before it collected.
TEST(WindowCollectives, AGroupOfCollectivesOnOneStreamRunsEachCallsOwnPath) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t n = 1000, block = n * sizeof(int32_t);
    void* a = *dev->allocDevice(block);
    void* b = *dev->allocDevice(block);
    void* c = *dev->allocDevice(block);
    void* d = *dev->allocDevice(block);
    void* e = *dev->allocDevice(block * nranks);
    void* f = *dev->allocDevice(block);
    const int32_t three = 3;
    ncclRedOp_t times3;
    CHECK_OR_FAIL(ncclRedOpCreatePreMulSum(&times3, const_cast<int32_t*>(&three), ncclInt32,
                                           ncclScalarHostImmediate, comm) == ncclSuccess,
                  "premulsum");
    for (int grouper = 0; grouper < nranks; ++grouper) {
      const bool grouped = rank == grouper;
      auto* in = static_cast<int32_t*>(*dev->hostView(a, block));
      for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 5 + rank * 11 + grouper);
      for (void* p : {b, c, d, f}) std::memset(*dev->hostView(p, block), 0xee, block);
      std::memset(*dev->hostView(e, block * nranks), 0xee, block * nranks);
      const uint64_t calls0 = braid::nccl::PeerBufferCalls();
      if (grouped) CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess, "group start");
      CHECK_OR_FAIL(
          ncclAllReduce(a, b, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess &&
              ncclAllReduce(b, c, n, ncclInt32, ncclMax, comm, stream) == ncclSuccess &&
              ncclAllReduce(a, d, n, ncclInt32, times3, comm, stream) == ncclSuccess &&
              ncclGather(a, rank == 1 ? e : nullptr, n, ncclInt32, 1, comm, stream) ==
                  ncclSuccess &&
              ncclScatter(rank == 1 ? e : nullptr, f, n, ncclInt32, 1, comm, stream) == ncclSuccess,
          "the calls (grouped %d)", grouped);
      if (grouped) CHECK_OR_FAIL(ncclGroupEnd() == ncclSuccess, "group end");
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      const auto* got_b = static_cast<const int32_t*>(*dev->hostView(b, block));
      const auto* got_c = static_cast<const int32_t*>(*dev->hostView(c, block));
      const auto* got_d = static_cast<const int32_t*>(*dev->hostView(d, block));
      const auto* got_f = static_cast<const int32_t*>(*dev->hostView(f, block));
      for (size_t i = 0; i < n; ++i) {
        const auto sum = static_cast<int32_t>(2 * (i * 5 + grouper) + 11);
        CHECK_OR_FAIL(got_b[i] == sum && got_c[i] == sum && got_d[i] == 3 * sum,
                      "grouper %d element %zu: sum %d max %d times3 %d, want %d", grouper, i,
                      got_b[i], got_c[i], got_d[i], sum);
        CHECK_OR_FAIL(got_f[i] == in[i], "grouper %d: the scatter's element %zu is %d", grouper, i,
                      got_f[i]);
      }
      if (rank == 1) {
        const auto* got_e = static_cast<const int32_t*>(*dev->hostView(e, block * nranks));
        for (int s = 0; s < nranks; ++s)
          for (size_t i = 0; i < n; ++i)
            CHECK_OR_FAIL(got_e[s * n + i] == static_cast<int32_t>(i * 5 + s * 11 + grouper),
                          "grouper %d: the gather's block %d element %zu", grouper, s, i);
      }
      const uint64_t took = braid::nccl::PeerBufferCalls() - calls0;
      CHECK_OR_FAIL(took == 4, "grouper %d: %llu of 4 calls on the device path (grouped %d)",
                    grouper, static_cast<unsigned long long>(took), grouped);
    }
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d: %s", static_cast<int>(async), ncclGetLastError(comm));
    CHECK_OR_FAIL(ncclRedOpDestroy(times3, comm) == ncclSuccess, "op destroy");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    for (void* p : {a, b, c, d, e, f}) CHECK_OR_FAIL(dev->freeDevice(p).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A grouped call refused when the group is submitted (its buffer runs past its allocation) ends
// the group there, on every rank: ncclGroupEnd returns its error and the calls after it are not
// issued (each would pair with the peers' copy of the one before), and the communicator goes on.
TEST(WindowCollectives, AGroupStopsAtACallRefusedAtItsEnd) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    void* a = *dev->allocDevice(4096);
    void* b = *dev->allocDevice(4096);
    const uint64_t calls0 = braid::nccl::PeerBufferCalls();
    auto& tables = braid::nccl::PeerPointerPool::For(braid::device::ActiveDeviceRuntime());
    const size_t tables0 = tables.inUse();
    CHECK_OR_FAIL(
        ncclGroupStart() == ncclSuccess &&
            ncclAllReduce(a, b, 2000, ncclFloat32, ncclSum, comm, stream) == ncclSuccess &&
            ncclAllReduce(a, b, 10, ncclFloat32, ncclSum, comm, stream) == ncclSuccess,
        "grouped calls");
    const ncclResult_t r = ncclGroupEnd();
    CHECK_OR_FAIL(r == ncclInvalidArgument, "group end: %d", static_cast<int>(r));
    const std::string why = ncclGetLastError(nullptr);
    CHECK_OR_FAIL(why.find("past the end") != std::string::npos, "message: %s", why.c_str());
    CHECK_OR_FAIL(braid::nccl::PeerBufferCalls() - calls0 == 1, "%llu calls issued, want 1",
                  static_cast<unsigned long long>(braid::nccl::PeerBufferCalls() - calls0));
    // The refused call's pointer table is back in the pool (its kernel was never queued).
    CHECK_OR_FAIL(tables.inUse() == tables0, "%zu pointer tables held after the refusal, want %zu",
                  tables.inUse(), tables0);
    auto* in = static_cast<int32_t*>(*dev->hostView(a, 64));
    for (int i = 0; i < 16; ++i) in[i] = rank * 100 + i;
    CHECK_OR_FAIL(ncclAllReduce(a, b, 16, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "the next call");
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    const auto* got = static_cast<const int32_t*>(*dev->hostView(b, 64));
    for (int i = 0; i < 16; ++i) CHECK_OR_FAIL(got[i] == 100 + 2 * i, "element %d: %d", i, got[i]);
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(dev->freeDevice(a).ok() && dev->freeDevice(b).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A device error on one rank while it takes the device path (every rank chose it, so the peers'
// calls are queued): rank 0's scratch allocation, its kernel's launch after the copy into scratch
// was queued, or its `ready` write fails. Rank 0's call fails at once naming the device's error;
// rank 1 fails within seconds (the communicator revoked), not at BRAID_TIMEOUT (300 s) and
// never by taking rank 0's next call for this one, and its buffer is untouched. Rank 0 keeps the
// communicator, and makes its next call (which fails too), only once rank 1 has its answer: an
// abort would tell rank 1 itself, and a next call would end rank 1's wait (a call mismatch).
using Fault = EmulatedDevice::FaultOp;
int FailsPartWay(const braidUniqueId& id, int rank, int nranks, Fault fault) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  const size_t n = 100, bytes = n * 4 * nranks;
  void* buf = *dev->allocDevice(bytes);
  void* other = *dev->allocDevice(bytes);
  for (size_t b = 0; b < bytes; ++b)
    static_cast<unsigned char*>(*dev->hostView(buf, bytes))[b] = static_cast<unsigned char>(b * 7);
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  const uint64_t device_calls0 = braid::nccl::PeerBufferCalls();
  if (rank == 0) dev->failAfter(fault, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const ncclResult_t r = fault == Fault::kWriteValue
                             ? ncclAllReduce(buf, other, n, ncclInt32, ncclSum, comm, stream)
                             : ncclAlltoAll(buf, buf, n, ncclInt32, comm, stream);
  std::string why = ncclGetLastError(comm);
  if (rank == 0) {
    CHECK_OR_FAIL(dev->injectedFailures() == 1, "the fault was not reached: %s", why.c_str());
    CHECK_OR_FAIL(r == ncclSystemError || r == ncclUnhandledCudaError, "rank 0's call: %d, %s",
                  static_cast<int>(r), why.c_str());
    CHECK_OR_FAIL(why.find("injected failure") != std::string::npos, "rank 0: %s", why.c_str());
    if (fault != Fault::kAllocDevice)  // refused before it is counted
      CHECK_OR_FAIL(braid::nccl::PeerBufferCalls() - device_calls0 == 1, "not on the device path");
  } else {
    CHECK_OR_FAIL(r == ncclSuccess, "rank 1's call was refused: %s", why.c_str());
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess, "get async error");
    why = ncclGetLastError(comm);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_OR_FAIL(async != ncclSuccess, "rank 1 succeeded without rank 0");
    CHECK_OR_FAIL(s < 10, "rank 1 took %.1f s to fail: %s", s, why.c_str());
    const auto* p = static_cast<const unsigned char*>(*dev->hostView(buf, bytes));
    for (size_t b = 0; b < bytes; ++b)
      CHECK_OR_FAIL(p[b] == static_cast<unsigned char>(b * 7), "rank 1: byte %zu was written", b);
  }
  const std::string done = "/tmp/braid-part-way-" + std::to_string(getppid());
  if (rank == 1) {
    FILE* f = std::fopen(done.c_str(), "w");
    CHECK_OR_FAIL(f != nullptr, "cannot write %s", done.c_str());
    std::fclose(f);
  } else {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (access(done.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Only now the next call (one like rank 1's all-reduce), returned or on the stream, fails:
    // before the change rank 1's all-reduce took it for the failed one and succeeded.
    const ncclResult_t next = ncclAllReduce(other, other, n, ncclInt32, ncclSum, comm, stream);
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "the stream is released");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess, "get async error");
    CHECK_OR_FAIL(next != ncclSuccess || async != ncclSuccess, "rank 0's next call succeeded");
  }
  CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
  CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
  CHECK_OR_FAIL(dev->freeDevice(buf).ok() && dev->freeDevice(other).ok(), "free");
  return 0;
}

TEST(WindowCollectives, ADeviceErrorPartWayFailsThePeersFast) {
  const std::pair<Fault, const char*> faults[] = {
      {Fault::kAllocDevice, "the in-place all-to-all's scratch allocation"},
      {Fault::kLaunch, "the in-place all-to-all's launch, after its copy into scratch"},
      {Fault::kWriteValue, "the all-reduce's `ready`"}};
  for (const auto& [fault, what] : faults) {
    SCOPED_TRACE(what);
    auto out = RunJob(Job(2), [fault](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
      return FailsPartWay(id, rank, nranks, fault);
    });
    std::remove(("/tmp/braid-part-way-" + std::to_string(getpid())).c_str());
    EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
  }
}

// An in-place all-to-all on device memory sends from a copy of its input in device scratch, so a
// rank in place and ranks out of place take the device path alike (NCCL runs both), the scratch
// grows with the call (kept per communicator, reused), and the communicator frees it at destroy.
TEST(WindowCollectives, InPlaceAllToAllMixesWithOutOfPlaceAndFreesItsScratch) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t most = 20000, bytes = most * sizeof(int32_t) * nranks;
    void* send = *dev->allocDevice(bytes);
    void* recv = *dev->allocDevice(bytes);
    const size_t allocations = dev->deviceAllocations();
    const uint64_t calls0 = braid::nccl::PeerBufferCalls();
    int calls = 0;
    for (size_t n : {size_t{100}, most, size_t{7}})
      for (int in_place_rank = -1; in_place_rank <= nranks; ++in_place_rank) {
        // -1: every rank out of place; nranks: every rank in place; else that rank alone.
        const bool in_place = in_place_rank == nranks || in_place_rank == rank;
        const auto value = [&](int from, int to, size_t i) {
          return static_cast<int32_t>(from * 1000003 + to * 7919 + static_cast<int>(i) +
                                      in_place_rank * 13);
        };
        void* src = in_place ? recv : send;
        auto* in = static_cast<int32_t*>(*dev->hostView(src, bytes));
        for (int d = 0; d < nranks; ++d)
          for (size_t i = 0; i < n; ++i) in[d * n + i] = value(rank, d, i);
        if (!in_place) std::memset(*dev->hostView(recv, bytes), 0xee, bytes);
        CHECK_OR_FAIL(ncclAlltoAll(src, recv, n, ncclInt32, comm, stream) == ncclSuccess,
                      "all-to-all n %zu, in place on %d", n, in_place_rank);
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        ++calls;
        const auto* got = static_cast<const int32_t*>(*dev->hostView(recv, bytes));
        for (int s = 0; s < nranks; ++s)
          for (size_t i = 0; i < n; ++i)
            CHECK_OR_FAIL(got[s * n + i] == value(s, rank, i),
                          "n %zu, in place on %d: block %d element %zu is %d, want %d", n,
                          in_place_rank, s, i, got[s * n + i], value(s, rank, i));
      }
    CHECK_OR_FAIL(braid::nccl::PeerBufferCalls() - calls0 == static_cast<uint64_t>(calls),
                  "%llu of %d calls on the device path",
                  static_cast<unsigned long long>(braid::nccl::PeerBufferCalls() - calls0), calls);
    // Grown once past the first call's: the largest call's bytes, rounded to a power of two,
    // beside the first one's.
    const size_t held = braid::nccl::DeviceScratchBytes();
    CHECK_OR_FAIL(held >= most * sizeof(int32_t) * nranks && held < 4 * bytes,
                  "scratch holds %zu bytes", held);
    // In place inside a group on two streams (staged as one braid group, which runs its calls at
    // its end: the staged input's copy must live until then), beside an all-reduce.
    {
      const size_t n = 333;
      cudaStream_t stream2 = static_cast<cudaStream_t>(*dev->createStream());
      auto* in = static_cast<int32_t*>(*dev->hostView(recv, bytes));
      for (int d = 0; d < nranks; ++d)
        for (size_t i = 0; i < n; ++i)
          in[d * n + i] = rank * 100000 + d * 1000 + static_cast<int>(i);
      auto* one = static_cast<int32_t*>(*dev->hostView(send, sizeof(int32_t)));
      *one = rank + 1;
      CHECK_OR_FAIL(
          ncclGroupStart() == ncclSuccess &&
              ncclAlltoAll(recv, recv, n, ncclInt32, comm, stream) == ncclSuccess &&
              ncclAllReduce(send, send, 1, ncclInt32, ncclSum, comm, stream2) == ncclSuccess &&
              ncclGroupEnd() == ncclSuccess,
          "in-place all-to-all in a group on two streams");
      CHECK_OR_FAIL(dev->synchronize(stream).ok() && dev->synchronize(stream2).ok(), "synchronize");
      const auto* got = static_cast<const int32_t*>(*dev->hostView(recv, bytes));
      for (int s = 0; s < nranks; ++s)
        for (size_t i = 0; i < n; ++i)
          CHECK_OR_FAIL(got[s * n + i] == s * 100000 + rank * 1000 + static_cast<int>(i),
                        "grouped in place: block %d element %zu is %d", s, i, got[s * n + i]);
      CHECK_OR_FAIL(*static_cast<const int32_t*>(*dev->hostView(send, sizeof(int32_t))) == 6,
                    "grouped all-reduce");
      CHECK_OR_FAIL(dev->destroyStream(stream2).ok(), "destroy stream");
    }
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d: %s", static_cast<int>(async), ncclGetLastError(comm));
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(braid::nccl::DeviceScratchBytes() == 0 && dev->deviceAllocations() == allocations,
                  "the scratch outlived its communicator (%zu allocations, want %zu)",
                  dev->deviceAllocations(), allocations);
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(dev->freeDevice(send).ok() && dev->freeDevice(recv).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Buffers that cannot be exported on any rank (managed memory, cuMem allocations: the emulated
// device refuses every export here) stage on every rank alike. Once exports work again, the
// gather, the scatter and the all-to-all run on the device, and every result is exact.
TEST(WindowCollectives, UnexportableBuffersStageAlikeOnEveryRank) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;  // the probe exports: IPC on
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t n = 333, block = n * sizeof(int32_t), total = block * nranks;
    void* send = *dev->allocDevice(total);
    void* recv = *dev->allocDevice(total);
    const int root = 1;
    for (bool exports : {false, true}) {
      dev->refuseExports(!exports);
      const uint64_t device_calls = braid::nccl::PeerBufferCalls();
      std::vector<unsigned char> in(total), want(total);
      // Gather into the root.
      Bytes(rank + 10, block, in.data());
      std::memcpy(*dev->hostView(send, block), in.data(), block);
      std::memset(*dev->hostView(recv, total), 0xee, total);
      CHECK_OR_FAIL(ncclGather(send, rank == root ? recv : nullptr, n, ncclInt32, root, comm,
                               stream) == ncclSuccess,
                    "gather");
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      if (rank == root) {
        for (int s = 0; s < nranks; ++s) Bytes(s + 10, block, want.data() + block * s);
        CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv, total), want.data(), total) == 0,
                      "gather (exports %d): the root's output differs", exports);
      }
      // Scatter from the root.
      if (rank == root) {
        for (int d = 0; d < nranks; ++d) Bytes(d + 20, block, in.data() + block * d);
        std::memcpy(*dev->hostView(send, total), in.data(), total);
      }
      CHECK_OR_FAIL(ncclScatter(rank == root ? send : nullptr, recv, n, ncclInt32, root, comm,
                                stream) == ncclSuccess,
                    "scatter");
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      Bytes(rank + 20, block, want.data());
      CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv, block), want.data(), block) == 0,
                    "scatter (exports %d): rank %d's output differs", exports, rank);
      // All-to-all.
      for (int d = 0; d < nranks; ++d) Bytes(rank * 8 + d, block, in.data() + block * d);
      for (int s = 0; s < nranks; ++s) Bytes(s * 8 + rank, block, want.data() + block * s);
      std::memcpy(*dev->hostView(send, total), in.data(), total);
      CHECK_OR_FAIL(ncclAlltoAll(send, recv, n, ncclInt32, comm, stream) == ncclSuccess,
                    "all-to-all");
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      CHECK_OR_FAIL(std::memcmp(*dev->hostView(recv, total), want.data(), total) == 0,
                    "all-to-all (exports %d) differs", exports);
      ncclResult_t async = ncclSuccess;
      CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                    "async error %d (exports %d): %s", static_cast<int>(async), exports,
                    ncclGetLastError(comm));
      const uint64_t took = braid::nccl::PeerBufferCalls() - device_calls;
      CHECK_OR_FAIL(took == (exports ? 3u : 0u), "%llu calls on the device path (exports %d)",
                    static_cast<unsigned long long>(took), exports);
    }
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(dev->freeDevice(send).ok() && dev->freeDevice(recv).ok(), "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A buffer in several windows (registered more than once): every rank takes the oldest, so the
// call is the same on every rank and takes the window path.
TEST(WindowCollectives, OverlappingWindowsPickTheSameOnEveryRank) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t bytes = 16384, n = 1000;
    void *send = nullptr, *recv = nullptr;
    CHECK_OR_FAIL(
        ncclMemAlloc(&send, bytes) == ncclSuccess && ncclMemAlloc(&recv, bytes) == ncclSuccess,
        "ncclMemAlloc");
    // The send buffer's windows: the whole buffer, its second half, the whole again.
    std::vector<ncclWindow_t> wins(4);
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, send, bytes, &wins[0], 0) == ncclSuccess &&
                      ncclCommWindowRegister(comm, static_cast<char*>(send) + bytes / 2, bytes / 2,
                                             &wins[1], 0) == ncclSuccess &&
                      ncclCommWindowRegister(comm, send, bytes, &wins[2], 0) == ncclSuccess &&
                      ncclCommWindowRegister(comm, recv, bytes, &wins[3], 0) == ncclSuccess,
                  "window register");
    auto* in = static_cast<int32_t*>(*dev->hostView(send, bytes));
    for (size_t i = 0; i < bytes / 4; ++i) in[i] = static_cast<int32_t>(i) + rank;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const uint64_t before = braid::nccl::WindowCalls();
    for (size_t off : {size_t{0}, bytes / 2, size_t{4096}})
      CHECK_OR_FAIL(ncclAllReduce(static_cast<char*>(send) + off, static_cast<char*>(recv) + off, n,
                                  ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                    "all-reduce at %zu", off);
    CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
    ncclResult_t async = ncclSuccess;
    CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                  "async error %d: %s", static_cast<int>(async), ncclGetLastError(comm));
    CHECK_OR_FAIL(braid::nccl::WindowCalls() - before == 3, "not every call took the window path");
    const auto* got = static_cast<const int32_t*>(*dev->hostView(recv, bytes));
    for (size_t off : {size_t{0}, bytes / 2, size_t{4096}})
      for (size_t i = 0; i < n; ++i) {
        const size_t k = off / 4 + i;
        const int32_t want = static_cast<int32_t>(k) * nranks + nranks * (nranks - 1) / 2;
        CHECK_OR_FAIL(got[k] == want, "element %zu: %d, want %d", k, got[k], want);
      }
    for (ncclWindow_t w : wins)
      CHECK_OR_FAIL(ncclCommWindowDeregister(comm, w) == ncclSuccess, "deregister");
    CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(ncclMemFree(send) == ncclSuccess && ncclMemFree(recv) == ncclSuccess, "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// An abort while a window call has not ended on its stream (held here: the stream is paused
// before the call): the abort stops waiting for it, but the windows' mappings stay open (a kernel
// must not read unmapped memory), and the call, once its stream goes on, is told to skip. After
// an abort with nothing in flight the mappings are closed.
TEST(WindowCollectives, AbortKeepsTheMappingsOfACallThatHasNotEnded) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    const size_t bytes = 8192, n = 1000;
    void *send = nullptr, *recv = nullptr;
    CHECK_OR_FAIL(
        ncclMemAlloc(&send, bytes) == ncclSuccess && ncclMemAlloc(&recv, bytes) == ncclSuccess,
        "ncclMemAlloc");
    ncclWindow_t ws = nullptr, wr = nullptr;
    CHECK_OR_FAIL(ncclCommWindowRegister(comm, send, bytes, &ws, 0) == ncclSuccess &&
                      ncclCommWindowRegister(comm, recv, bytes, &wr, 0) == ncclSuccess,
                  "window register");
    CHECK_OR_FAIL(braid::device::ProcessPeerMemory()->mapped() == 2, "two peer allocations");
    if (rank == 1) {  // nothing in flight: the abort closes the mappings
      CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
      CHECK_OR_FAIL(braid::device::ProcessPeerMemory()->mapped() == 0, "mappings left open");
      CHECK_OR_FAIL(ncclMemFree(send) == ncclSuccess && ncclMemFree(recv) == ncclSuccess, "free");
      return 0;
    }
    std::memset(*dev->hostView(recv, bytes), 0x5a, bytes);
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    CHECK_OR_FAIL(dev->pauseStream(stream).ok(), "pause");
    CHECK_OR_FAIL(ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess,
                  "submit");
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_OR_FAIL(ncclCommAbort(comm) == ncclSuccess, "abort");
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string why = ncclGetLastError(nullptr);
    CHECK_OR_FAIL(why.find("mappings are left open") != std::string::npos, "message: %s",
                  why.c_str());
    CHECK_OR_FAIL(waited < 10, "the abort took %.1f s", waited);
    CHECK_OR_FAIL(braid::device::ProcessPeerMemory()->mapped() == 2,
                  "the mappings were closed under a call that may still run");
    CHECK_OR_FAIL(dev->resumeStream(stream).ok() && dev->synchronize(stream).ok(),
                  "the stream goes on");
    const auto* r = static_cast<const unsigned char*>(*dev->hostView(recv, bytes));
    for (size_t i = 0; i < bytes; ++i)
      CHECK_OR_FAIL(r[i] == 0x5a, "the skipped call wrote byte %zu", i);
    CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
    CHECK_OR_FAIL(ncclMemFree(send) == ncclSuccess && ncclMemFree(recv) == ncclSuccess, "free");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
