// Sends and receives on the device (nccl/p2p_device.cc): the receiver copies the sender's device
// buffer with one kernel on its stream, the pair agreeing on a handshake view of the
// communicator. On the emulated device (BRAID_DEVICE=emulated), whose device memory the host
// cannot touch outside hostView and whose kernels run on the stream.
//
// Checked: a ring (a group of a send and a receive per rank), nccl-tests' all-to-all (a group of a
// send to and a receive from every rank, itself included), one send and one receive outside a
// group, every element size and several counts, 2 to 4 ranks, bit-exact against the blocks the
// test computes and against the same calls staged in the same run, and every job on the device
// path; a count that differs between sender and receiver fails both ranks naming it; a rank that
// stages against a rank on the device path fails both within seconds and never takes the
// handshake for data, even where the sizes agree.
//
// The shim's objects are linked into this binary with the core (braid_nccl_objects), so that the
// test's emulated device is the one the shim uses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

#include "device/cpu/emulated_device.h"
#include "multirank/harness.h"
#include "multirank/nccl_shim_job.h"
#include "nccl.h"
#include "nccl/device_scratch.h"
#include "nccl/p2p_device.h"
#include "nccl/peer_windows.h"

using braid::device::EmulatedDevice;
using braid_test::AllSucceeded;
using braid_test::DescribeOutcomes;
using braid_test::RunJob;
using braid_test::shim::InitNccl;

#undef CHECK_OR_FAIL
#define CHECK_OR_FAIL(cond, ...) CHECK_OR_FAIL_WITH(ncclGetLastError(nullptr), cond, __VA_ARGS__)

namespace {

braid_test::JobOptions Job(int nranks) {
  return braid_test::shim::Job(nranks, "emulated", 120);
}

// Byte b of the block rank `from` sends to rank `to` in round `round`.
unsigned char Byte(int from, int to, int round, size_t b) {
  return static_cast<unsigned char>(from * 37 + to * 11 + round * 5 + b * 7 + (b >> 8));
}

void Fill(unsigned char* p, int from, int to, int round, size_t bytes) {
  for (size_t b = 0; b < bytes; ++b) p[b] = Byte(from, to, round, b);
}

// Where the block for `to` is in rank `from`'s bytes: the expected content of a receive.
bool Holds(const unsigned char* p, int from, int to, int round, size_t bytes) {
  for (size_t b = 0; b < bytes; ++b)
    if (p[b] != Byte(from, to, round, b)) return false;
  return true;
}

// nccl-tests' all-to-all: one group of a send to and a receive from every rank.
ncclResult_t AllToAll(void* send, void* recv, size_t count, ncclDataType_t t, int nranks,
                      ncclComm_t comm, cudaStream_t stream) {
  const size_t block = count * braid::nccl::TypeSize(t);
  ncclResult_t r = ncclGroupStart();
  for (int q = 0; q < nranks && r == ncclSuccess; ++q) {
    r = ncclSend(static_cast<char*>(send) + block * q, count, t, q, comm, stream);
    if (r == ncclSuccess)
      r = ncclRecv(static_cast<char*>(recv) + block * q, count, t, q, comm, stream);
  }
  const ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

// `refusing`: a rank whose allocations cannot be shared (as CUDA IPC refuses managed and cuMem
// memory): its sends to other ranks go as bytes through host-mapped bounces, its receives still
// pull (or take bytes); every job stays on the device path either way.
int RingsAndAllToAll(const braidUniqueId& id, int rank, int nranks, int refusing = -1) {
  ncclComm_t comm = nullptr;
  EmulatedDevice* dev = nullptr;
  if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
  dev->refuseExports(rank == refusing);
  const uint64_t bounced0 = braid::nccl::P2pBouncedJobs();
  cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
  const size_t most = 5000 * 8 * static_cast<size_t>(nranks);
  void* send = *dev->allocDevice(most);
  void* recv = *dev->allocDevice(most);
  void* staged = *dev->allocDevice(most);
  const uint64_t jobs0 = braid::nccl::P2pDeviceJobs();
  uint64_t jobs = 0;
  int round = 0;
  for (ncclDataType_t t : {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64}) {
    // A new send buffer per type (maybe at the freed one's address, under a new handle): the
    // receivers' caches drop the freed allocation's mapping and map the new one.
    CHECK_OR_FAIL(dev->freeDevice(send).ok(), "free");
    send = *dev->allocDevice(most);
    for (size_t count : {size_t{1}, size_t{37}, size_t{5000}}) {
      ++round;
      const size_t block = count * braid::nccl::TypeSize(t);
      const size_t total = block * static_cast<size_t>(nranks);
      // A ring: send to the next rank, receive from the previous one, in one group.
      const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
      Fill(static_cast<unsigned char*>(*dev->hostView(send, block)), rank, next, round, block);
      std::memset(*dev->hostView(recv, block), 0xee, block);
      CHECK_OR_FAIL(ncclGroupStart() == ncclSuccess &&
                        ncclSend(send, count, t, next, comm, stream) == ncclSuccess &&
                        ncclRecv(recv, count, t, prev, comm, stream) == ncclSuccess &&
                        ncclGroupEnd() == ncclSuccess,
                    "ring type %d count %zu", static_cast<int>(t), count);
      ++jobs;
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      CHECK_OR_FAIL(Holds(static_cast<const unsigned char*>(*dev->hostView(recv, block)), prev,
                          rank, round, block),
                    "ring type %d count %zu: the block from rank %d differs", static_cast<int>(t),
                    count, prev);
      // All-to-all, on the device path and staged.
      for (int q = 0; q < nranks; ++q)
        Fill(static_cast<unsigned char*>(*dev->hostView(send, total)) + block * q, rank, q, round,
             block);
      std::memset(*dev->hostView(recv, total), 0xee, total);
      std::memset(*dev->hostView(staged, total), 0xee, total);
      CHECK_OR_FAIL(AllToAll(send, recv, count, t, nranks, comm, stream) == ncclSuccess,
                    "all-to-all type %d count %zu", static_cast<int>(t), count);
      ++jobs;
      braid::nccl::StageDeviceCallsForTesting(true);
      const ncclResult_t s = AllToAll(send, staged, count, t, nranks, comm, stream);
      braid::nccl::StageDeviceCallsForTesting(false);
      CHECK_OR_FAIL(s == ncclSuccess, "staged all-to-all");
      CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
      const auto* got = static_cast<const unsigned char*>(*dev->hostView(recv, total));
      for (int q = 0; q < nranks; ++q)
        CHECK_OR_FAIL(Holds(got + block * q, q, rank, round, block),
                      "all-to-all type %d count %zu: the block from rank %d differs",
                      static_cast<int>(t), count, q);
      CHECK_OR_FAIL(std::memcmp(got, *dev->hostView(staged, total), total) == 0,
                    "the device path and the staged path differ");
      // Outside a group: rank 0 sends to the last rank, which receives.
      if (rank == 0 || rank == nranks - 1) {
        const int peer = nranks - 1 - rank;
        if (rank == 0) {
          Fill(static_cast<unsigned char*>(*dev->hostView(send, block)), 0, peer, round, block);
          CHECK_OR_FAIL(ncclSend(send, count, t, peer, comm, stream) == ncclSuccess, "send");
        } else {
          std::memset(*dev->hostView(recv, block), 0xee, block);
          CHECK_OR_FAIL(ncclRecv(recv, count, t, peer, comm, stream) == ncclSuccess, "recv");
        }
        ++jobs;
        CHECK_OR_FAIL(dev->synchronize(stream).ok(), "synchronize");
        if (rank != 0)
          CHECK_OR_FAIL(Holds(static_cast<const unsigned char*>(*dev->hostView(recv, block)), peer,
                              rank, round, block),
                        "send type %d count %zu: the block differs", static_cast<int>(t), count);
      }
    }
  }
  CHECK_OR_FAIL(braid::nccl::P2pDeviceJobs() - jobs0 == jobs, "%llu of %llu jobs on the device",
                static_cast<unsigned long long>(braid::nccl::P2pDeviceJobs() - jobs0),
                static_cast<unsigned long long>(jobs));
  // The refusing rank bounced every job with a send to another rank (its ring sends and its
  // all-to-alls: two per round, with a third for rank 0's send outside a group); no other rank
  // bounced any.
  const uint64_t bounced = braid::nccl::P2pBouncedJobs() - bounced0;
  const uint64_t want = rank != refusing ? 0 : static_cast<uint64_t>(round) * (rank == 0 ? 3 : 2);
  CHECK_OR_FAIL(bounced == want, "rank %d bounced %llu jobs, not %llu", rank,
                static_cast<unsigned long long>(bounced), static_cast<unsigned long long>(want));
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess,
                "async error %d: %s", static_cast<int>(async), ncclGetLastError(comm));
  CHECK_OR_FAIL(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK_OR_FAIL(braid::nccl::DeviceScratchBytes() == 0, "the bounces outlived the communicator");
  CHECK_OR_FAIL(dev->destroyStream(stream).ok(), "destroy stream");
  CHECK_OR_FAIL(
      dev->freeDevice(send).ok() && dev->freeDevice(recv).ok() && dev->freeDevice(staged).ok(),
      "free");
  return 0;
}

// The communicator's asynchronous error once its stream-ordered calls are done.
ncclResult_t AsyncError(ncclComm_t comm, EmulatedDevice* dev, cudaStream_t stream) {
  (void)dev->synchronize(stream);
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
  return async;
}

}  // namespace

TEST(P2pDevice, RingsAndAllToAllBitExactTwoRanks) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return RingsAndAllToAll(id, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(P2pDevice, RingsAndAllToAllBitExactFourRanks) {
  auto out = RunJob(Job(4), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return RingsAndAllToAll(id, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 0's allocations cannot be shared: its sends reach ranks 1..3 as bytes, while theirs reach
// it (and each other) by mapping.
TEST(P2pDevice, SendsThatCannotBeSharedGoAsBytesBitExactFourRanks) {
  auto out = RunJob(Job(4), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return RingsAndAllToAll(id, rank, nranks, /*refusing=*/0);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The last rank's sends go as bytes (the first rank's own send outside a group does not).
TEST(P2pDevice, SendsThatCannotBeSharedGoAsBytesBitExactTwoRanks) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    return RingsAndAllToAll(id, rank, nranks, /*refusing=*/1);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A receive of fewer elements than the send: the receiver finds it in the handshake, runs no
// copy (its buffer untouched) and tells the sender; both fail naming the counts, in seconds.
// With the sender's allocation shared, and with its bytes sent (which the receiver takes all the
// same, so that the view's messages stay paired).
class P2pDeviceMismatch : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(SharedOrBytes, P2pDeviceMismatch, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Bytes" : "Shared"; });

TEST_P(P2pDeviceMismatch, ACountThatDiffersFailsBothRanksAndWritesNothing) {
  const bool bytes = GetParam();
  auto out = RunJob(Job(2), [bytes](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    dev->refuseExports(bytes);
    const uint64_t bounced0 = braid::nccl::P2pBouncedJobs();
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    void* buf = *dev->allocDevice(4096);
    std::memset(*dev->hostView(buf, 4096), 0x5a, 4096);
    const auto t0 = std::chrono::steady_clock::now();
    const ncclResult_t r = rank == 0 ? ncclSend(buf, 100, ncclFloat32, 1, comm, stream)
                                     : ncclRecv(buf, 50, ncclFloat32, 0, comm, stream);
    CHECK_OR_FAIL(r == ncclSuccess, "the call is queued (%d)", static_cast<int>(r));
    const ncclResult_t async = AsyncError(comm, dev, stream);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string why = ncclGetLastError(comm);
    CHECK_OR_FAIL(async != ncclSuccess, "rank %d: the mismatch went unnoticed", rank);
    CHECK_OR_FAIL(
        why.find("count 100") != std::string::npos && why.find("count 50") != std::string::npos,
        "rank %d: the error does not name the counts: %s", rank, why.c_str());
    CHECK_OR_FAIL(s < 10, "rank %d took %.1f s to fail", rank, s);
    // The sender's bytes went (or its buffer was shared), as the parameter says.
    const uint64_t bounced = braid::nccl::P2pBouncedJobs() - bounced0;
    CHECK_OR_FAIL(bounced == (bytes && rank == 0 ? 1u : 0u), "rank %d bounced %llu jobs", rank,
                  static_cast<unsigned long long>(bounced));
    const auto* p = static_cast<const unsigned char*>(*dev->hostView(buf, 4096));
    for (size_t b = 0; b < 4096; ++b)
      CHECK_OR_FAIL(p[b] == 0x5a, "rank %d: byte %zu was written", rank, b);
    (void)ncclCommAbort(comm);
    (void)dev->destroyStream(stream);
    (void)dev->freeDevice(buf);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A failure between two ranks leaves a third waiting for a call the failed rank will not run:
// rank 0 queues a receive from rank 2 (whose count differs) and then a send to rank 1. The
// receive fails on ranks 0 and 2; rank 0's send is then dropped, and the communicator revoked
// (StreamAgent::setOnDroppedCall), so rank 1 fails within seconds instead of BRAID_TIMEOUT.
TEST(P2pDevice, ARankThatDropsACallAfterAFailureFailsItsWaitingPeerFast) {
  auto out = RunJob(Job(3), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    void* buf = *dev->allocDevice(4096);
    void* other = *dev->allocDevice(4096);
    std::memset(*dev->hostView(buf, 4096), 0x5a, 4096);
    const auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
      CHECK_OR_FAIL(ncclRecv(buf, 50, ncclFloat32, 2, comm, stream) == ncclSuccess &&
                        ncclSend(other, 10, ncclFloat32, 1, comm, stream) == ncclSuccess,
                    "queued");
    } else if (rank == 1) {
      CHECK_OR_FAIL(ncclRecv(buf, 10, ncclFloat32, 0, comm, stream) == ncclSuccess, "queued");
    } else {
      CHECK_OR_FAIL(ncclSend(buf, 100, ncclFloat32, 0, comm, stream) == ncclSuccess, "queued");
    }
    const ncclResult_t async = AsyncError(comm, dev, stream);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string why = ncclGetLastError(comm);
    CHECK_OR_FAIL(async != ncclSuccess, "rank %d succeeded", rank);
    CHECK_OR_FAIL(s < 10, "rank %d took %.1f s to fail: %s", rank, s, why.c_str());
    if (rank != 1)
      CHECK_OR_FAIL(why.find("count 100") != std::string::npos, "rank %d: %s", rank, why.c_str());
    if (rank == 1) {
      const auto* p = static_cast<const unsigned char*>(*dev->hostView(buf, 4096));
      for (size_t b = 0; b < 4096; ++b)
        CHECK_OR_FAIL(p[b] == 0x5a, "rank 1: byte %zu was written", b);
    }
    // Ranks 0 and 2 keep the communicator (an abort would tell rank 1) until rank 1 has its
    // answer, or 30 s (then rank 1 has failed the time check above).
    const std::string done = "/tmp/braid-p2p-drop-" + std::to_string(getppid());
    if (rank == 1) {
      FILE* f = std::fopen(done.c_str(), "w");
      CHECK_OR_FAIL(f != nullptr, "cannot write %s", done.c_str());
      std::fclose(f);
    } else {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (access(done.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    (void)ncclCommAbort(comm);
    (void)dev->destroyStream(stream);
    (void)dev->freeDevice(buf);
    (void)dev->freeDevice(other);
    return 0;
  });
  std::remove(("/tmp/braid-p2p-drop-" + std::to_string(getpid())).c_str());  // the ranks' parent
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 1 receives into host memory (staged: braid's own receive on the communicator) what rank 0
// sends from device memory (the device path's handshake on its view), with a size equal to the
// handshake's: rank 1 must not take the handshake for data; both fail within seconds.
TEST(P2pDevice, AStagedPeerFailsBothFastAndNeverTakesTheHandshakeForData) {
  auto out = RunJob(Job(2), [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    ncclComm_t comm = nullptr;
    EmulatedDevice* dev = nullptr;
    if (InitNccl(id, rank, nranks, &comm, &dev) != 0) return 1;
    cudaStream_t stream = static_cast<cudaStream_t>(*dev->createStream());
    const size_t bytes = braid::nccl::P2pHandshakeBytesForTesting();
    const auto t0 = std::chrono::steady_clock::now();
    bool failed;
    std::string why;
    if (rank == 0) {
      void* buf = *dev->allocDevice(bytes);
      CHECK_OR_FAIL(ncclSend(buf, bytes, ncclUint8, 1, comm, stream) == ncclSuccess, "queued");
      failed = AsyncError(comm, dev, stream) != ncclSuccess;
      why = ncclGetLastError(comm);
      (void)dev->freeDevice(buf);
    } else {
      std::vector<unsigned char> host(bytes, 0x5a);
      failed = ncclRecv(host.data(), bytes, ncclUint8, 0, comm, stream) != ncclSuccess;
      why = ncclGetLastError(comm);
      for (unsigned char c : host) CHECK_OR_FAIL(c == 0x5a, "the handshake was taken for data");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_OR_FAIL(failed, "rank %d succeeded", rank);
    CHECK_OR_FAIL(s < 10, "rank %d took %.1f s to fail: %s", rank, s, why.c_str());
    (void)ncclCommAbort(comm);
    (void)dev->destroyStream(stream);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}
