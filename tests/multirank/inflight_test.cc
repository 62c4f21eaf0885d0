// Many operations in flight on one communicator (issue 8): non-blocking collectives of mixed
// kinds and sizes issued back to back all complete bit-exact; point-to-point calls outside a
// group complete in either order; a small collective completes while an earlier operation is
// still pending (no head-of-line blocking); a dead peer fails every pending operation.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

constexpr float kSentinel = -12345.0f;

// Rank r's input element i of operation k: integers of magnitude < 1000, so every sum over up to
// 8 ranks is exact in float and any reduction order gives the same bits.
float In(int k, int r, uint64_t i) {
  return static_cast<float>(static_cast<int64_t>((r * 7 + i * 13 + k * 3) % 1000) - 500);
}

enum Kind { kAllReduce, kAllGather, kBroadcast, kReduceScatter, kAllToAll, kReduce, kNumKinds };

struct Call {
  Kind kind;
  size_t count;  // as in the C API
  int root;
  std::vector<float> send, recv;
  braidRequest_t req = nullptr;
};

// Operation k of the sequence: kinds cycle, sizes alternate between the express lane (a few
// elements) and the bulk lanes (> 64 KiB), roots move.
Call MakeCall(int k, int rank, int n) {
  Call c;
  c.kind = static_cast<Kind>(k % kNumKinds);
  c.count = k % 2 == 0 ? 5 + k : 20000 + 333 * k;
  c.root = (k + 1) % n;
  size_t send_n = c.count, recv_n = c.count;
  if (c.kind == kAllGather) recv_n = c.count * n;
  if (c.kind == kReduceScatter) send_n = c.count * n;
  if (c.kind == kAllToAll) send_n = recv_n = c.count * n;
  c.send.resize(send_n);
  for (size_t i = 0; i < send_n; ++i) c.send[i] = In(k, rank, i);
  c.recv.assign(recv_n, kSentinel);
  return c;
}

braidResult_t Issue(Call& c, braidComm_t comm) {
  const float* s = c.send.data();
  float* r = c.recv.data();
  switch (c.kind) {
    case kAllReduce:
      return braidIallReduce(s, r, c.count, braidFloat32, braidSum, comm, &c.req);
    case kAllGather:
      return braidIallGather(s, r, c.count, braidFloat32, comm, &c.req);
    case kBroadcast:
      return braidIbroadcast(s, r, c.count, braidFloat32, c.root, comm, &c.req);
    case kReduceScatter:
      return braidIreduceScatter(s, r, c.count, braidFloat32, braidSum, comm, &c.req);
    case kAllToAll:
      return braidIallToAll(s, r, c.count, braidFloat32, comm, &c.req);
    default:
      return braidIreduce(s, r, c.count, braidFloat32, braidSum, c.root, comm, &c.req);
  }
}

// The reference, computed here from In(): the index of the first wrong element, or -1.
int64_t FirstWrong(const Call& c, int k, int rank, int n) {
  auto sum = [&](uint64_t i) {
    float s = 0;
    for (int q = 0; q < n; ++q) s += In(k, q, i);
    return s;
  };
  for (size_t i = 0; i < c.recv.size(); ++i) {
    float want;
    switch (c.kind) {
      case kAllReduce:
        want = sum(i);
        break;
      case kAllGather:
        want = In(k, static_cast<int>(i / c.count), i % c.count);
        break;
      case kBroadcast:
        want = In(k, c.root, i);
        break;
      case kReduceScatter:
        want = sum(rank * c.count + i);
        break;
      case kAllToAll:
        want = In(k, static_cast<int>(i / c.count), rank * c.count + i % c.count);
        break;
      default:
        want = rank == c.root ? sum(i) : kSentinel;
        break;
    }
    if (c.recv[i] != want) return static_cast<int64_t>(i);
  }
  return -1;
}

using Param = std::tuple<int, std::string>;  // ranks, transport
class Inflight : public ::testing::TestWithParam<Param> {
 protected:
  JobOptions Options(std::vector<std::pair<std::string, std::string>> extra = {}) const {
    JobOptions opt;
    opt.nranks = std::get<0>(GetParam());
    opt.timeout_s = 240;
    opt.env = {{"BRAID_TRANSPORTS", std::get<1>(GetParam())}, {"BRAID_TIMEOUT", "60"}};
    for (auto& e : extra) opt.env.push_back(e);
    return opt;
  }
};

// K = 1..16 non-blocking collectives back to back, waited for in reverse order (completion
// order is not assumed), each checked bit for bit.
int RunBatches(braidComm_t comm, int rank, int n) {
  int k0 = 0;
  for (int K : {1, 2, 3, 5, 8, 16}) {
    std::vector<Call> calls;
    for (int j = 0; j < K; ++j) calls.push_back(MakeCall(k0 + j, rank, n));
    for (auto& c : calls)
      if (Issue(c, comm) != braidSuccess) {
        std::fprintf(stderr, "[rank %d] issue failed: %s\n", rank, braidGetLastError(comm));
        return 1;
      }
    for (int j = K - 1; j >= 0; --j)
      if (braidWait(&calls[j].req, -1) != braidSuccess) {
        std::fprintf(stderr, "[rank %d] op %d of %d: %s\n", rank, k0 + j, K,
                     braidGetLastError(comm));
        return 2;
      }
    for (int j = 0; j < K; ++j) {
      int64_t bad = FirstWrong(calls[j], k0 + j, rank, n);
      if (bad >= 0) {
        std::fprintf(stderr, "[rank %d] op %d (kind %d, count %zu): element %lld is %g\n", rank,
                     k0 + j, calls[j].kind, calls[j].count, static_cast<long long>(bad),
                     calls[j].recv[bad]);
        return 3;
      }
    }
    k0 += K;
  }
  return 0;
}

TEST_P(Inflight, MixedNonBlockingCollectivesBackToBackAreBitExact) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    return RunBatches(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A window smaller than the batch: the rest wait in the queue, results are the same.
TEST_P(Inflight, WindowSmallerThanTheBatch) {
  for (const char* window : {"1", "3"}) {
    auto out = RunJob(Options({{"BRAID_MAX_INFLIGHT", window}}),
                      [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
                        return RunBatches(comm, rank, n);
                      });
    EXPECT_TRUE(AllSucceeded(out))
        << "BRAID_MAX_INFLIGHT=" << window << ": " << DescribeOutcomes(out);
  }
}

// braidIrecv then braidIsend outside a group (and the other order) on a ring: used to wait until
// BRAID_TIMEOUT, since the receive ran alone and the matching send was queued behind the peer's.
TEST_P(Inflight, PointToPointOutsideAGroupInEitherOrder) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    for (int order = 0; order < 2; ++order) {
      for (size_t count : {size_t{3}, size_t{100000}}) {
        std::vector<float> out_buf(count), in_buf(count, kSentinel);
        for (size_t i = 0; i < count; ++i) out_buf[i] = In(order, rank, i);
        braidRequest_t rr = nullptr, sr = nullptr;
        braidResult_t a, b;
        if (order == 0) {
          a = braidIrecv(in_buf.data(), count, braidFloat32, left, comm, &rr);
          b = braidIsend(out_buf.data(), count, braidFloat32, right, comm, &sr);
        } else {
          b = braidIsend(out_buf.data(), count, braidFloat32, right, comm, &sr);
          a = braidIrecv(in_buf.data(), count, braidFloat32, left, comm, &rr);
        }
        if (a != braidSuccess || b != braidSuccess || braidWait(&rr, -1) != braidSuccess ||
            braidWait(&sr, -1) != braidSuccess) {
          std::fprintf(stderr, "[rank %d] order %d count %zu: %s\n", rank, order, count,
                       braidGetLastError(comm));
          return 1;
        }
        for (size_t i = 0; i < count; ++i)
          if (in_buf[i] != In(order, left, i)) return 2;
      }
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Overlap, shown causally: rank 0 posts a receive that rank 1 satisfies only after a second
// all-reduce, which rank 0 enters only after the first one returned and it saw the receive still
// pending. So operation k+1 (the all-reduce) completed while operation k (the receive) had not:
// with one operation at a time this job cannot finish.
TEST_P(Inflight, SmallCollectiveCompletesWhileAnEarlierReceiveIsPending) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    float x = static_cast<float>(rank + 1), sum = 0;
    const float want = static_cast<float>(n * (n + 1) / 2);
    std::vector<float> msg(1000, 0.0f);
    braidRequest_t rr = nullptr;
    if (rank == 0 && braidIrecv(msg.data(), msg.size(), braidFloat32, 1, comm, &rr) != braidSuccess)
      return 1;
    if (braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm) != braidSuccess || sum != want) {
      std::fprintf(stderr, "[rank %d] first all-reduce: %s\n", rank, braidGetLastError(comm));
      return 2;
    }
    if (rank == 0) {
      int done = 1;
      if (braidTest(&rr, &done) != braidSuccess || done) {
        std::fprintf(stderr, "[rank 0] the receive completed before its send was issued\n");
        return 3;
      }
    }
    if (braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm) != braidSuccess || sum != want)
      return 4;
    if (rank == 1) {
      std::vector<float> data(1000, 7.0f);
      if (braidSend(data.data(), data.size(), braidFloat32, 0, comm) != braidSuccess) return 5;
    }
    if (rank == 0) {
      if (braidWait(&rr, -1) != braidSuccess) return 6;
      for (float v : msg)
        if (v != 7.0f) return 7;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A blocking call issued while the progress thread streams a large operation takes the loop
// over on the caller's thread and hands it back (Engine::driveUntilDone); the large operation
// goes on under the thread and under braidWait, which drives too. Local steps of large calls run
// in pieces of the loop's per-pass budget (the out-of-place all-gather's own block, AVG's
// division of 2^20 + 3 elements, the pre-multiplied sum's scaling): all bit-exact. The board is
// off so that the small calls use the engine on shm too.
// The first wrong element of an all-gather of operation k's inputs (per_rank each), or -1.
int64_t FirstWrongGathered(const std::vector<float>& gathered, size_t per_rank, int k) {
  for (size_t i = 0; i < gathered.size(); ++i)
    if (gathered[i] != In(k, static_cast<int>(i / per_rank), i % per_rank))
      return static_cast<int64_t>(i);
  return -1;
}

int LargeBehindSmall(braidComm_t comm, int rank, int n) {
  const size_t per_rank = 300001, big = (size_t{1} << 20) + 3;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> in(per_rank), gathered(per_rank * n, kSentinel);
    for (size_t i = 0; i < per_rank; ++i) in[i] = In(rep, rank, i);
    braidRequest_t req = nullptr;
    if (braidIallGather(in.data(), gathered.data(), per_rank, braidFloat32, comm, &req) !=
        braidSuccess)
      return 1;
    float x = static_cast<float>(rank + 1), sum = 0;
    if (braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm) != braidSuccess ||
        sum != static_cast<float>(n * (n + 1) / 2)) {
      std::fprintf(stderr, "[rank %d] small all-reduce: %s (sum %g)\n", rank,
                   braidGetLastError(comm), sum);
      return 2;
    }
    std::vector<float> v(big), avg(big, kSentinel), scaled(big, kSentinel);
    for (size_t i = 0; i < big; ++i) v[i] = In(rep + 1, rank, i);
    braidRedOp_t premul;
    const float two = 2.0f;
    if (braidAllReduce(v.data(), avg.data(), big, braidFloat32, braidAvg, comm) != braidSuccess ||
        braidRedOpCreatePreMulSum(&premul, &two, braidFloat32, comm) != braidSuccess ||
        braidAllReduce(v.data(), scaled.data(), big, braidFloat32, premul, comm) != braidSuccess ||
        braidRedOpDestroy(premul, comm) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] large all-reduce: %s\n", rank, braidGetLastError(comm));
      return 3;
    }
    if (braidWait(&req, -1) != braidSuccess) return 4;
    if (const int64_t bad = FirstWrongGathered(gathered, per_rank, rep); bad >= 0) {
      std::fprintf(stderr, "[rank %d] all-gather element %lld is %g\n", rank,
                   static_cast<long long>(bad), gathered[bad]);
      return 5;
    }
    for (size_t i = 0; i < big; ++i) {
      float s = 0;  // integers: exact in any order
      for (int q = 0; q < n; ++q) s += In(rep + 1, q, i);
      if (avg[i] != s / static_cast<float>(n) || scaled[i] != 2.0f * s) {
        std::fprintf(stderr, "[rank %d] element %zu: avg %g scaled %g, sum %g\n", rank, i, avg[i],
                     scaled[i], s);
        return 6;
      }
    }
  }
  return 0;
}

TEST_P(Inflight, BlockingCallsDriveTheLoopWhileALargeOperationRuns) {
  // BRAID_INLINE=0: the same calls with callers that only sleep (the thread drives everything).
  for (const char* inline_blocking : {"1", "0"}) {
    auto out = RunJob(Options({{"BRAID_ONESHOT_BYTES", "0"}, {"BRAID_INLINE", inline_blocking}}),
                      [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
                        return LargeBehindSmall(comm, rank, n);
                      });
    EXPECT_TRUE(AllSucceeded(out))
        << "BRAID_INLINE=" << inline_blocking << ": " << DescribeOutcomes(out);
  }
}

// One thread waits on a large all-gather (and drives the loop for it) while another issues
// blocking calls on the same communicator: the blocking caller finds the loop taken and waits
// for its operation, which the waiting thread drives along with its own.
TEST_P(Inflight, BlockingCallsWhileAnotherThreadWaits) {
  auto out = RunJob(Options({{"BRAID_ONESHOT_BYTES", "0"}}), [](braidComm_t comm, int rank, int n,
                                                                const braidUniqueId&) {
    const size_t per_rank = 400000;
    std::vector<float> in(per_rank), gathered(per_rank * n, kSentinel);
    for (size_t i = 0; i < per_rank; ++i) in[i] = In(9, rank, i);
    braidRequest_t req = nullptr;
    if (braidIallGather(in.data(), gathered.data(), per_rank, braidFloat32, comm, &req) !=
        braidSuccess)
      return 1;
    braidResult_t waited = braidErrInternal;
    std::thread waiter([&] { waited = braidWait(&req, -1); });
    int bad = 0;
    for (int k = 0; k < 20; ++k) {
      float x = static_cast<float>(rank + k), sum = 0;
      const float want = static_cast<float>(n * (n - 1) / 2 + n * k);
      if (braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm) != braidSuccess || sum != want)
        ++bad;
    }
    waiter.join();
    if (bad || waited != braidSuccess) {
      std::fprintf(stderr, "[rank %d] %d bad all-reduces, wait %d: %s\n", rank, bad, waited,
                   braidGetLastError(comm));
      return 2;
    }
    if (FirstWrongGathered(gathered, per_rank, 9) >= 0) return 3;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Polling a large operation with braidWait(req, 0) leaves the loop to the progress thread (a wait
// that is already over takes nothing over), so the operation completes, bit-exact.
TEST_P(Inflight, PollingWithAZeroTimeoutLetsTheOperationComplete) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t per_rank = 500000;
    std::vector<float> in(per_rank), gathered(per_rank * n, kSentinel);
    for (size_t i = 0; i < per_rank; ++i) in[i] = In(11, rank, i);
    braidRequest_t req = nullptr;
    if (braidIallGather(in.data(), gathered.data(), per_rank, braidFloat32, comm, &req) !=
        braidSuccess)
      return 1;
    long polls = 0;
    braidResult_t rc;
    while ((rc = braidWait(&req, 0)) == braidErrTimeout) {
      if (req == nullptr) return 2;  // a timed-out request stays valid
      ++polls;
      std::this_thread::yield();
    }
    if (rc != braidSuccess) {
      std::fprintf(stderr, "[rank %d] after %ld polls: %s\n", rank, polls, braidGetLastError(comm));
      return 3;
    }
    if (FirstWrongGathered(gathered, per_rank, 11) >= 0) return 4;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// braidWait with a timeout drives the loop until its deadline and gives up with a timeout; the
// request stays valid and completes later (the progress thread takes the loop back). The send
// is issued only after the timed-out wait, ordered by an all-reduce.
TEST_P(Inflight, WaitThatTimesOutLeavesTheRequestValid) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> msg(50000, kSentinel);
    braidRequest_t rr = nullptr;
    if (rank == 0) {
      if (braidIrecv(msg.data(), msg.size(), braidFloat32, n - 1, comm, &rr) != braidSuccess)
        return 1;
      if (braidWait(&rr, 100) != braidErrTimeout || rr == nullptr) {
        std::fprintf(stderr, "[rank 0] the wait did not time out: %s\n", braidGetLastError(comm));
        return 2;
      }
    }
    float x = 1, y = 0;
    if (braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm) != braidSuccess) return 3;
    if (rank == n - 1) {
      std::vector<float> data(msg.size());
      for (size_t i = 0; i < data.size(); ++i) data[i] = In(4, rank, i);
      if (braidSend(data.data(), data.size(), braidFloat32, 0, comm) != braidSuccess) return 4;
    }
    if (rank == 0) {
      if (braidWait(&rr, -1) != braidSuccess) return 5;
      for (size_t i = 0; i < msg.size(); ++i)
        if (msg[i] != In(4, n - 1, i)) return 6;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The last rank dies while the others have several operations pending: every one of them fails
// (none hangs, none succeeds).
TEST_P(Inflight, DeadPeerFailsEveryPendingOperation) {
  auto opt = Options();
  opt.env.push_back({"BRAID_TIMEOUT", "10"});  // later entries win (setenv in order)
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<Call> calls;
    for (int k = 0; k < 6; ++k) calls.push_back(MakeCall(k, rank, n));
    // Everyone is up, and connected to its butterfly partners: the all-reduce makes those
    // connections (lazily), and the barrier, on the same ones, ends only once every rank has
    // finished the all-reduce. Without the barrier the last rank could die while a slow rank
    // still waited to connect for the all-reduce, after a fast one had already reported the
    // death; a rank that knows the communicator failed gives up connecting, and so that
    // all-reduce failed too (rightly: the test's sync point was not one).
    float x = 1, y;
    const braidResult_t up = braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm);
    const braidResult_t synced = up == braidSuccess ? braidBarrier(comm) : up;
    if (rank == n - 1) raise(SIGKILL);
    if (synced != braidSuccess) {
      std::fprintf(stderr, "[rank %d] the sync before the death: %s\n", rank,
                   braidGetLastError(comm));
      return 1;
    }
    // Once one pending operation has seen the death the communicator is failed, and a later
    // call fails as it is issued rather than returning a request: both count as failing.
    int failed = 0;
    for (auto& c : calls)
      if (Issue(c, comm) != braidSuccess) {
        if (braidGetLastError(comm)[0] == '\0') return 2;  // failed without saying why
        ++failed;
        c.req = nullptr;
      }
    for (auto& c : calls) {
      if (!c.req) continue;
      braidResult_t rc = braidWait(&c.req, 30000);
      if (rc == braidErrTimeout && c.req) return 3;  // still pending after 30 s: a hang
      if (rc != braidSuccess) ++failed;
    }
    if (failed != static_cast<int>(calls.size())) return 4;  // each needs the dead rank
    return 0;
  });
  const int n = std::get<0>(GetParam());
  for (int r = 0; r + 1 < n; ++r) EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
  EXPECT_EQ(out[n - 1].exit_code, 128 + SIGKILL) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Inflight,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values("shm", "tcp")),
                         RanksTransportName<::testing::TestParamInfo<Param>>);
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, Inflight,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values("ucx")),
                         RanksTransportName<::testing::TestParamInfo<Param>>);
#endif

}  // namespace
}  // namespace braid_test
