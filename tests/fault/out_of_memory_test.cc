// Running out of memory is an error with a message, never an exception through the C API or a
// crash (issue 7 item 5: a pre-multiplied-sum all-reduce of 640 MiB under `ulimit -v` ended in
// std::bad_alloc and exit 134). Runs in a forked child whose address space is capped just above
// what it already uses, so the engine's scratch for the call cannot be had: the frames of a
// quantized all-gather (a pre-multiplied sum on one rank now scales in its copy and needs none).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "../common/proc_state.h"
#include "braid/braid.h"
#include "../common/sanitizers.h"
#include "multirank/harness.h"

namespace {

// A pipe's write end, armed by a test: the next allocation by operator new writes a byte to it
// and fails (std::bad_alloc), once.
std::atomic<int> fail_next_new{-1};

}  // namespace

// This binary's operator new (the library's allocations come here too): malloc's, as the
// standard one, which the standard operator delete (free) pairs with, but for a failure armed
// above. Not under ASan, whose own operator new must pair with its delete.
#if !BRAID_TEST_UNDER_ASAN
void* operator new(std::size_t n) {
  if (fail_next_new.load(std::memory_order_relaxed) >= 0) {
    const int fd = fail_next_new.exchange(-1);
    if (fd >= 0) {
      const char c = 1;
      (void)!write(fd, &c, 1);
      throw std::bad_alloc();
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
#endif

namespace {

int Child() {
  alarm(60);  // wall-clock guard: a hang ends in SIGALRM, which the parent reports
  braidUniqueId id;
  braidComm_t comm = nullptr;
  if (braidGetUniqueId(&id) != braidSuccess || braidCommInitRank(&comm, 1, id, 0) != braidSuccess)
    return 10;
  const size_t count = size_t{64} << 20;  // 256 MiB of floats
  std::vector<float> in(count, 1.0f), out(count, 0.0f);
  braidQuantConfig_t quant{};
  quant.bits = 8;
  quant.blockSize = 2048;
  quant.symmetric = 1;
  // Its INT8 frames need another 64 MiB and more: allow 16 MiB more than now.
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max =
      static_cast<rlim_t>(braid_test_common::AddressSpaceBytes() + (16ll << 20));
  if (setrlimit(RLIMIT_AS, &lim) != 0) return 12;
  braidResult_t rc =
      braidAllGatherQuantized(in.data(), out.data(), count, braidFloat32, &quant, comm);
  const char* msg = braidGetLastError(comm);
  if (rc != braidErrSystem || !std::strstr(msg, "out of memory")) {
    std::fprintf(stderr, "rc=%d: %s\n", rc, msg);
    return 1;
  }
  // The input is untouched; the process goes on.
  for (size_t i = 0; i < count; i += 4099)
    if (in[i] != 1.0f) return 2;
  braidCommDestroy(comm);
  return 0;
}

TEST(OutOfMemory, HugeQuantizedAllGatherIsASystemErrorNotACrash) {
#if BRAID_TEST_UNDER_ASAN
  GTEST_SKIP() << "ASan reserves terabytes of shadow memory: RLIMIT_AS cannot be applied";
#endif
  std::fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(Child());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status)
                                 << (WTERMSIG(status) == SIGABRT ? " (an uncaught bad_alloc)" : "");
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Two ranks over shared memory, with a wall-clock guard (and `env` besides).
braid_test::JobOptions TwoRanksOnShm(std::vector<std::pair<std::string, std::string>> env = {}) {
  braid_test::JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "30"}};
  for (auto& e : env) opt.env.push_back(std::move(e));
  return opt;
}

// A small non-blocking call that starts on the board and must wait for a peer is made an
// operation and a request only then (Engine::startCall). When that allocation fails, the call,
// started already (its peers count on it), is not failed: it completes on the caller's thread as
// a blocking call would, and the request says so. Rank 1 calls only once rank 0's allocation has
// failed (the failing operator new writes to the pipe it waits on), so rank 0's call must wait.
TEST(OutOfMemory, ASmallNonBlockingCallWithNoMemoryForItsRequestCompletesOnTheCaller) {
#if BRAID_TEST_UNDER_ASAN
  GTEST_SKIP() << "the test's operator new is not built under ASan";
#endif
  int failed[2];
  ASSERT_EQ(pipe(failed), 0);
  const braid_test::JobOptions opt = TwoRanksOnShm();
  auto out =
      braid_test::RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        float in[16], res[16];
        const auto fill = [&](int round) {
          for (int i = 0; i < 16; ++i) in[i] = static_cast<float>((rank + 1) * i + round);
          std::fill(res, res + 16, -1.0f);
        };
        const auto exact = [&](int round) {
          for (int i = 0; i < 16; ++i)
            if (res[i] != static_cast<float>(3 * i + 2 * round)) return false;
          return true;
        };
        // Calls of the shape, waited for: the engine keeps a spare that can take the next one.
        for (int k = 0; k < 4; ++k) {
          fill(k);
          braidRequest_t req = nullptr;
          CHECK_OR_FAIL(
              braidIallReduce(in, res, 16, braidFloat32, braidSum, comm, &req) == braidSuccess &&
                  braidWait(&req, -1) == braidSuccess && exact(k),
              "warm-up call %d", k);
        }
        fill(4);
        if (rank == 0) {
          braidRequest_t req = nullptr;
          fail_next_new.store(failed[1]);
          const braidResult_t rc = braidIallReduce(in, res, 16, braidFloat32, braidSum, comm, &req);
          const bool fired = fail_next_new.exchange(-1) < 0;
          CHECK_OR_FAIL(fired, "no allocation was made (the call did not wait for rank 1?)");
          CHECK_OR_FAIL(rc == braidSuccess && req, "the call failed: %d %s", rc,
                        braidGetLastError(comm));
          CHECK_OR_FAIL(exact(4), "the call returned before it completed");
          CHECK_OR_FAIL(braidWait(&req, -1) == braidSuccess, "wait: %s", braidGetLastError(comm));
        } else {
          char c;
          CHECK_OR_FAIL(read(failed[0], &c, 1) == 1, "gate");
          CHECK_OR_FAIL(
              braidAllReduce(in, res, 16, braidFloat32, braidSum, comm) == braidSuccess && exact(4),
              "rank 1's call: %s", braidGetLastError(comm));
        }
        // The communicator goes on.
        fill(5);
        CHECK_OR_FAIL(
            braidAllReduce(in, res, 16, braidFloat32, braidSum, comm) == braidSuccess && exact(5),
            "the call after: %s", braidGetLastError(comm));
        (void)nranks;
        return 0;
      });
  close(failed[0]);
  close(failed[1]);
  EXPECT_TRUE(braid_test::AllSucceeded(out)) << braid_test::DescribeOutcomes(out);
}

// A non-blocking call issued while another is in flight gets its operation under the same claim
// that activates or queues it (Engine::startCall on a busy engine). When that allocation fails,
// nothing is issued: the call fails with out of memory, the call in flight is untouched, and the
// same call issued again completes. With BRAID_INLINE=0 the operation is made under the engine's
// lock and queued; otherwise (nobody else driving) the caller activates it, or queues it when the
// thread drives: each path must fail the same way. Rank 1 calls only once rank 0's allocation has
// failed (the failing operator new writes to the pipe it waits on), so rank 0's first call is
// still in flight.
void ExpectACallBehindOneInFlightFailsCleanly(const char* inline_blocking) {
#if BRAID_TEST_UNDER_ASAN
  GTEST_SKIP() << "the test's operator new is not built under ASan";
#endif
  int failed[2];
  ASSERT_EQ(pipe(failed), 0);
  const braid_test::JobOptions opt = TwoRanksOnShm({{"BRAID_INLINE", inline_blocking}});
  auto out = braid_test::RunJob(opt, [&](braidComm_t comm, int rank, int nranks,
                                         const braidUniqueId&) {
    float a_in[16], a_out[16], b_in[16], b_out[16];
    for (int i = 0; i < 16; ++i) {
      a_in[i] = static_cast<float>((rank + 1) * i);
      b_in[i] = static_cast<float>((rank + 1) * i + 7);
    }
    std::fill(a_out, a_out + 16, -1.0f);
    std::fill(b_out, b_out + 16, -1.0f);
    const auto exact = [](const float* res, int add) {
      for (int i = 0; i < 16; ++i)
        if (res[i] != static_cast<float>(3 * i + add)) return false;
      return true;
    };
    braidRequest_t a = nullptr, b = nullptr;
    if (rank == 0) {
      CHECK_OR_FAIL(
          braidIallReduce(a_in, a_out, 16, braidFloat32, braidSum, comm, &a) == braidSuccess,
          "call A: %s", braidGetLastError(comm));
      CHECK_OR_FAIL(a != nullptr, "call A completed before rank 1 called");
      fail_next_new.store(failed[1]);
      const braidResult_t rc = braidIallReduce(b_in, b_out, 16, braidFloat32, braidSum, comm, &b);
      const bool fired = fail_next_new.exchange(-1) < 0;
      CHECK_OR_FAIL(fired, "call B made no allocation");
      CHECK_OR_FAIL(rc == braidErrSystem && b == nullptr &&
                        std::strstr(braidGetLastError(comm), "out of memory"),
                    "call B: rc=%d req=%p: %s", rc, static_cast<void*>(b), braidGetLastError(comm));
      // Issued again, it is the same call B for the peers.
      CHECK_OR_FAIL(
          braidIallReduce(b_in, b_out, 16, braidFloat32, braidSum, comm, &b) == braidSuccess,
          "call B again: %s", braidGetLastError(comm));
    } else {
      char c;
      CHECK_OR_FAIL(read(failed[0], &c, 1) == 1, "gate");
      CHECK_OR_FAIL(
          braidIallReduce(a_in, a_out, 16, braidFloat32, braidSum, comm, &a) == braidSuccess &&
              braidIallReduce(b_in, b_out, 16, braidFloat32, braidSum, comm, &b) == braidSuccess,
          "rank 1's calls: %s", braidGetLastError(comm));
    }
    CHECK_OR_FAIL(braidWait(&a, -1) == braidSuccess && exact(a_out, 0), "call A: %s",
                  braidGetLastError(comm));
    CHECK_OR_FAIL(braidWait(&b, -1) == braidSuccess && exact(b_out, 14), "call B: %s",
                  braidGetLastError(comm));
    (void)nranks;
    return 0;
  });
  close(failed[0]);
  close(failed[1]);
  EXPECT_TRUE(braid_test::AllSucceeded(out)) << braid_test::DescribeOutcomes(out);
}

TEST(OutOfMemory, ANonBlockingCallBehindOneInFlightWithNoMemoryIsNotIssued) {
  ExpectACallBehindOneInFlightFailsCleanly("1");
}

TEST(OutOfMemory, AQueuedNonBlockingCallWithNoMemoryIsNotIssued) {
  ExpectACallBehindOneInFlightFailsCleanly("0");
}

}  // namespace
