// Mismatched calls fail on every rank, never return success with wrong data, and lose nothing
// (spec/reliability.md item 7, issue 7 item 1). Before a collective moves data its ranks agree
// on the call (BRAID_VERIFY_CALLS, default on): a differing collective, count, type, op or root
// on any rank makes every rank return invalid usage naming the sequence number and both calls,
// with no byte of any user buffer written, and the communicator stays usable.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Contains(const char* hay, const std::string& needle) {
  return std::strstr(hay, needle.c_str()) != nullptr;
}

constexpr float kSentinel = -7.25f;

// After a mismatch: a checked all-reduce must succeed bit-exactly on every rank and the
// communicator must report no asynchronous error (nothing was torn down).
int StillUsable(braidComm_t comm, int rank, int nranks) {
  std::vector<float> in(4099), out(4099);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 7 + rank) % 13);
  if (braidAllReduce(in.data(), out.data(), in.size(), braidFloat32, braidSum, comm) !=
      braidSuccess) {
    std::fprintf(stderr, "[rank %d] all-reduce after the mismatch: %s\n", rank,
                 braidGetLastError(comm));
    return 10;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += static_cast<float>((i * 7 + r) % 13);
    if (out[i] != want) {
      std::fprintf(stderr, "[rank %d] element %zu: %g, want %g\n", rank, i, out[i], want);
      return 11;
    }
  }
  braidResult_t async = braidSuccess;
  braidCommGetAsyncError(comm, &async);
  if (async != braidSuccess) {
    std::fprintf(stderr, "[rank %d] async error %d after a clean mismatch\n", rank, async);
    return 12;
  }
  return 0;
}

// Whether a receive buffer still holds only kSentinel (a failed call wrote none of it).
bool Untouched(int rank, const std::vector<float>& recv) {
  for (size_t i = 0; i < recv.size(); ++i)
    if (recv[i] != kSentinel) {
      std::fprintf(stderr, "[rank %d] receive buffer written at %zu despite the mismatch\n", rank,
                   i);
      return false;
    }
  return true;
}

// Checks what every rank must see: invalid usage within the timeout, a message naming the
// sequence number and both sides (`want` substrings), an untouched receive buffer.
int ExpectMismatch(braidResult_t rc, braidComm_t comm, int rank, Clock::time_point t0,
                   const std::vector<std::string>& want, const std::vector<float>& recv) {
  const char* msg = braidGetLastError(comm);
  bool ok = rc == braidErrInvalidUsage && SecondsSince(t0) < 12 && Contains(msg, "call mismatch");
  for (const auto& w : want) ok = ok && Contains(msg, w);
  if (!ok) {
    std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, SecondsSince(t0), msg);
    return 1;
  }
  return Untouched(rank, recv) ? 0 : 2;
}

using Param = std::tuple<int, std::string>;  // ranks, transport
class CallMismatch : public ::testing::TestWithParam<Param> {
 protected:
  JobOptions Options() const {
    JobOptions opt;
    opt.nranks = std::get<0>(GetParam());
    opt.timeout_s = 60;
    opt.env = {{"BRAID_TRANSPORTS", std::get<1>(GetParam())}, {"BRAID_TIMEOUT", "10"}};
    return opt;
  }
};

// The reported defect: rank 0 broadcasts from root 0 while the others use root 1. Rank 0 only
// sends, so no receiver check ever reached it; it returned success while holding other data.
TEST_P(CallMismatch, BroadcastRootsDifferSmallAndLarge) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    for (size_t count : {size_t{1000}, size_t{1} << 20}) {
      std::vector<float> buf(count, kSentinel);
      const int root = rank == 0 ? 0 : 1;
      if (rank == root) std::fill(buf.begin(), buf.end(), 1.0f + rank);
      auto t0 = Clock::now();
      braidResult_t rc = braidBroadcast(buf.data(), buf.data(), count, braidFloat32, root, comm);
      // The root's buffer is its input: unchanged, like every other rank's (sentinel).
      std::vector<float> expect_untouched;
      if (rank != root) expect_untouched = buf;
      if (int e = ExpectMismatch(rc, comm, rank, t0, {"root=0", "root=1"}, expect_untouched))
        return e;
      if (rank == root)
        for (float v : buf)
          if (v != 1.0f + rank) return 3;
      if (int e = StillUsable(comm, rank, n)) return e;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 0 broadcasts while the others all-reduce: the root used to return success.
TEST_P(CallMismatch, BroadcastAgainstAllReduce) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> in(1000, 1.0f), recv(1000, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc =
        rank == 0 ? braidBroadcast(in.data(), in.data(), in.size(), braidFloat32, 0, comm)
                  : braidAllReduce(in.data(), recv.data(), in.size(), braidFloat32, braidSum, comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"broadcast", "allreduce", "#0"}, recv))
      return e;
    return StillUsable(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Reduce with differing roots used to end in a timeout instead of invalid usage.
TEST_P(CallMismatch, ReduceRootsDiffer) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> in(5000, 2.0f), recv(5000, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc =
        braidReduce(in.data(), recv.data(), in.size(), braidFloat32, braidSum, rank % 2, comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"reduce(", "root=0", "root=1"}, recv)) return e;
    return StillUsable(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// One rank (the last) differs in count, type or op; the others agree with each other. Ranks
// that never exchange a byte with it must fail all the same. Two calls in a row, so the second
// carries sequence number #1 (numbering goes on after a mismatch).
TEST_P(CallMismatch, OneRankDiffersInCountTypeOrOp) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const bool odd = rank == n - 1;
    std::vector<float> in(2048, 1.0f), recv(2048, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc =
        braidAllReduce(in.data(), recv.data(), odd ? 2048 : 1024, braidFloat32, braidSum, comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"count=1024", "count=2048", "#0"}, recv))
      return e;
    t0 = Clock::now();
    rc = braidAllReduce(in.data(), recv.data(), 1024, odd ? braidInt32 : braidFloat32, braidSum,
                        comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"int32, sum", "float, sum", "#1"}, recv))
      return e;
    t0 = Clock::now();
    rc =
        braidAllReduce(in.data(), recv.data(), 1024, braidFloat32, odd ? braidMax : braidSum, comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"max", "sum", "#2"}, recv)) return e;
    t0 = Clock::now();
    rc = braidAllGather(in.data(), recv.data(), odd ? 3 : 2, braidFloat32, comm);
    if (int e =
            ExpectMismatch(rc, comm, rank, t0, {"allgather(count=3", "allgather(count=2"}, recv))
      return e;
    return StillUsable(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A barrier against an all-reduce (the barrier carries no data, so only the agreement sees it).
TEST_P(CallMismatch, BarrierAgainstAllReduce) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    std::vector<float> in(64, 1.0f), recv(64, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc =
        rank == 1 ? braidBarrier(comm)
                  : braidAllReduce(in.data(), recv.data(), in.size(), braidFloat32, braidSum, comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"barrier", "allreduce"},
                               rank == 1 ? std::vector<float>() : recv))
      return e;
    return StillUsable(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A small all-reduce against a large one: on a power of two of ranks beyond two the small call
// carries its agreement in its butterfly's data and the large one runs the agreement alone
// (wire_header.h); every rank must fail alike all the same. The engine's path on every
// transport: no small-message board (where ranks have a core each, the board would take the
// small call and the engine the large one; that split fails on both ranks, but not cleanly:
// the board's own comparison covers calls that both fit it).
TEST_P(CallMismatch, SmallAgainstLargeAllReduce) {
  JobOptions opt = Options();
  opt.env.push_back({"BRAID_ONESHOT_BYTES", "0"});
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t large = size_t{1} << 15;  // 128 KiB of floats: beyond the express lane
    const size_t count = rank == n - 1 ? large : 1024;
    std::vector<float> in(large, 1.0f), recv(large, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(in.data(), recv.data(), count, braidFloat32, braidSum, comm);
    if (int e = ExpectMismatch(rc, comm, rank, t0, {"count=1024", "count=32768", "#0"}, recv))
      return e;
    return StillUsable(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// In place, the buffer is the input: a mismatch must leave it as it was on every rank, also where
// the news of the conflict arrives only in a later round of the butterfly, after the earlier
// rounds' data was combined (rank 0's second partner hears of the last rank's call from its own).
TEST_P(CallMismatch, InPlaceCallsKeepTheirInput) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const bool odd = rank == n - 1;
    for (size_t count : {size_t{2}, size_t{1000}}) {
      std::vector<float> buf((count + 1) * n);  // room for the last rank's larger call
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank * 100000 + i);
      const std::vector<float> input = buf;
      auto t0 = Clock::now();
      braidResult_t rc = braidAllReduce(buf.data(), buf.data(), odd ? count + 1 : count,
                                        braidFloat32, braidSum, comm);
      if (int e = ExpectMismatch(rc, comm, rank, t0, {"count=" + std::to_string(count), "#"}, {}))
        return e;
      if (buf != input) {
        std::fprintf(stderr, "[rank %d] all-reduce of %zu: the input changed\n", rank, count);
        return 3;
      }
      t0 = Clock::now();
      rc = braidAllGather(buf.data() + rank * (odd ? count + 1 : count), buf.data(),
                          odd ? count + 1 : count, braidFloat32, comm);
      if (int e = ExpectMismatch(rc, comm, rank, t0, {"allgather(count=", "#"}, {})) return e;
      if (buf != input) {
        std::fprintf(stderr, "[rank %d] all-gather of %zu: the buffer changed\n", rank, count);
        return 4;
      }
      const size_t mine = odd ? count + 1 : count;
      t0 = Clock::now();
      rc = braidReduceScatter(buf.data(), buf.data() + rank * mine, mine, braidFloat32, braidSum,
                              comm);
      if (int e = ExpectMismatch(rc, comm, rank, t0, {"reducescatter(count=", "#"}, {})) return e;
      if (buf != input) {
        std::fprintf(stderr, "[rank %d] reduce-scatter of %zu: the input changed\n", rank, count);
        return 5;
      }
    }
    return StillUsable(comm, rank, n);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, CallMismatch,
                         ::testing::Values(Param{2, "shm"}, Param{2, "tcp"}, Param{3, "shm"},
                                           Param{3, "tcp"}, Param{4, "shm"}, Param{4, "tcp"},
                                           Param{8, "tcp"}),
                         RanksTransportName<::testing::TestParamInfo<Param>>);
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, CallMismatch,
                         ::testing::Values(Param{2, "ucx"}, Param{3, "ucx"}, Param{4, "ucx"},
                                           Param{8, "ucx"}),
                         RanksTransportName<::testing::TestParamInfo<Param>>);
#endif

// The engine's path on two ranks (no small-message board: tcp).
JobOptions TwoRanksOverTcp() {
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "10"}};
  return opt;
}

// On two ranks a call whose data starts with one exchange carries the agreement in that first
// message (wire_header.h, CallConflict): no agreement message of its own. Every message of an
// 8-byte all-reduce is a 48-byte header and 8 bytes (padded) of data, so the bytes sent per call
// are a multiple of 56; a separate 48-byte agreement message would break that. A barrier is
// the agreement alone: one header each way.
TEST(CallAgreement, TwoRanksCarryItInTheFirstDataMessage) {
  auto out = RunJob(TwoRanksOverTcp(), [](braidComm_t comm, int rank, int, const braidUniqueId&) {
    const int peer = 1 - rank;
    auto sent = [&] {
      uint64_t s = 0;
      return braidCommPeerTraffic(comm, peer, &s, nullptr, nullptr, 0) == braidSuccess
                 ? s
                 : ~uint64_t{0};
    };
    float in[2] = {1.0f + rank, 2.0f}, res[2] = {};
    uint64_t before = sent();
    if (braidAllReduce(in, res, 2, braidFloat32, braidSum, comm) != braidSuccess) return 1;
    const uint64_t call = sent() - before;
    if (res[0] != 3.0f || res[1] != 4.0f) return 2;
    before = sent();
    if (braidBarrier(comm) != braidSuccess) return 3;
    const uint64_t barrier = sent() - before;
    if (call == 0 || call % 56 != 0 || barrier != 48) {
      std::fprintf(stderr, "[rank %d] all-reduce sent %llu bytes, barrier %llu\n", rank,
                   static_cast<unsigned long long>(call), static_cast<unsigned long long>(barrier));
      return 4;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Beyond two ranks, on a power of two, a small call whose data moves in the agreement's
// butterfly carries the agreement in every round's message: per call, each rank sends one
// message to each butterfly partner (rank XOR 2^k) and nothing to anyone else. A message is a
// 48-byte header and its data: 8 bytes for an all-reduce of two floats, 2^k blocks of two floats
// in round k of an all-gather, N / 2^(k+1) in a reduce-scatter's; a barrier's is a header alone.
class CarriedAgreement : public ::testing::TestWithParam<int> {};

TEST_P(CarriedAgreement, RidesInTheButterflysData) {
  JobOptions opt;
  opt.nranks = GetParam();
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "10"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    auto sent = [&] {
      std::vector<uint64_t> s(n, 0);
      for (int p = 0; p < n; ++p)
        if (p != rank && braidCommPeerTraffic(comm, p, &s[p], nullptr, nullptr, 0) != braidSuccess)
          s[p] = ~uint64_t{0};
      return s;
    };
    // `bytes(d)`: what goes to the partner at distance d = 2^k.
    auto check = [&](const char* what, const std::vector<uint64_t>& before, auto bytes) {
      const std::vector<uint64_t> after = sent();
      for (int p = 0; p < n; ++p) {
        if (p == rank) continue;
        const int d = p ^ rank;
        const uint64_t want = (d & (d - 1)) == 0 ? bytes(d) : 0;  // partners differ in one bit
        if (after[p] - before[p] != want) {
          std::fprintf(stderr, "[rank %d] %s sent %llu bytes to rank %d, want %llu\n", rank, what,
                       static_cast<unsigned long long>(after[p] - before[p]), p,
                       static_cast<unsigned long long>(want));
          return false;
        }
      }
      return true;
    };
    for (bool in_place : {false, true}) {
      float in[2] = {1.0f + rank, 2.0f * rank}, res[2] = {};
      float* out_buf = in_place ? in : res;
      auto before = sent();
      if (braidAllReduce(in, out_buf, 2, braidFloat32, braidSum, comm) != braidSuccess) return 1;
      if (!check("the all-reduce", before, [](int) { return 56; })) return 2;
      const float s = static_cast<float>(n);
      if (out_buf[0] != s + s * (s - 1) / 2 || out_buf[1] != s * (s - 1)) return 3;

      std::vector<float> all(2 * n, kSentinel), mine = {1.0f * rank, 2.0f * rank};
      std::copy(mine.begin(), mine.end(), all.begin() + 2 * rank);
      before = sent();
      if (braidAllGather(in_place ? all.data() + 2 * rank : mine.data(), all.data(), 2,
                         braidFloat32, comm) != braidSuccess)
        return 4;
      if (!check("the all-gather", before, [](int d) { return 48 + 8 * d; })) return 5;
      for (int r = 0; r < n; ++r)
        if (all[2 * r] != 1.0f * r || all[2 * r + 1] != 2.0f * r) return 6;

      std::vector<float> input(2 * n), part(2, kSentinel);
      for (int i = 0; i < 2 * n; ++i) input[i] = static_cast<float>(i + rank);
      before = sent();
      float* scattered = in_place ? input.data() + 2 * rank : part.data();
      if (braidReduceScatter(input.data(), scattered, 2, braidFloat32, braidSum, comm) !=
          braidSuccess)
        return 7;
      if (!check("the reduce-scatter", before, [n](int d) { return 48 + 8 * (n / (2 * d)); }))
        return 8;
      for (int i = 0; i < 2; ++i)
        if (scattered[i] != n * static_cast<float>(2 * rank + i) + s * (s - 1) / 2) return 9;
    }
    auto before = sent();
    if (braidBarrier(comm) != braidSuccess) return 10;
    if (!check("the barrier", before, [](int) { return 48; })) return 11;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(CallAgreement, CarriedAgreement, ::testing::Values(4, 8));

// Calls on either side of what the board takes (one_sided_run.h: every call of a communicator on
// one host, whatever runs it, posts its signature on the board in one numbering): a rank whose
// call runs on the board against one whose call runs on the engine's streams, in either order of
// sizes and kinds, blocking or not. Every rank fails at once (well before BRAID_TIMEOUT) with
// invalid usage naming both calls, writes no receive buffer, and the communicator stays usable:
// the next matched call succeeds, bit-exact.
struct Straddle {
  const char* name;
  int nranks;
  // The call rank r makes (the last rank's differs); returns its result.
  braidResult_t (*call)(braidComm_t comm, int rank, int n, std::vector<float>& in,
                        std::vector<float>& recv);
};

braidResult_t AllGatherSmallAgainstLarge(braidComm_t comm, int rank, int n, std::vector<float>& in,
                                         std::vector<float>& recv) {
  // BRAID_ONESHOT_BYTES=16K: 4 KiB per rank on the board, the last rank's 128 KiB beyond it.
  const size_t count = rank == n - 1 ? size_t{1} << 15 : 1024;
  return braidAllGather(in.data(), recv.data(), count, braidFloat32, comm);
}

braidResult_t AllReduceSmallAgainstLarge(braidComm_t comm, int rank, int n, std::vector<float>& in,
                                         std::vector<float>& recv) {
  // 4 KiB on the board against 1 MiB on the engine; the large one non-blocking.
  if (rank != n - 1)
    return braidAllReduce(in.data(), recv.data(), 1024, braidFloat32, braidSum, comm);
  braidRequest_t req = nullptr;
  braidResult_t rc =
      braidIallReduce(in.data(), recv.data(), size_t{1} << 18, braidFloat32, braidSum, comm, &req);
  return rc == braidSuccess ? braidWait(&req, -1) : rc;
}

braidResult_t BroadcastAgainstAllReduce(braidComm_t comm, int rank, int n, std::vector<float>& in,
                                        std::vector<float>& recv) {
  // 4 MB: one rank broadcasts it, the others all-reduce it.
  const size_t count = size_t{1} << 20;
  if (rank == n - 1) return braidBroadcast(in.data(), recv.data(), count, braidFloat32, 0, comm);
  return braidAllReduce(in.data(), recv.data(), count, braidFloat32, braidSum, comm);
}

const Straddle kStraddles[] = {
    {"AllGatherOnBoardAgainstEngine", 2, AllGatherSmallAgainstLarge},
    {"AllReduceOnBoardAgainstNonBlockingEngine", 2, AllReduceSmallAgainstLarge},
    {"AllGatherOnBoardAgainstEngine4", 4, AllGatherSmallAgainstLarge},
    {"BroadcastAgainstAllReduce4MB", 4, BroadcastAgainstAllReduce},
};

class CountsStraddling : public ::testing::TestWithParam<Straddle> {};

TEST_P(CountsStraddling, FailOnEveryRankNamingBothCallsAndLeaveTheCommunicatorUsable) {
  JobOptions opt;
  opt.nranks = GetParam().nranks;
  opt.timeout_s = 60;
  opt.env = {
      {"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "10"}, {"BRAID_ONESHOT_BYTES", "16384"}};
  const auto call = GetParam().call;
  auto out = RunJob(opt, [call](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t large = size_t{1} << 20;
    std::vector<float> in(large, 1.0f), recv(large * n, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc = call(comm, rank, n, in, recv);
    const std::string msg = braidGetLastError(comm);
    // Both calls named: this rank's (the context) and the peer's it met.
    const bool both =
        Contains(msg.c_str(), "call mismatch") &&
        (Contains(msg.c_str(), "allgather(count=1024") ||
         Contains(msg.c_str(), "allreduce(count=1024") || Contains(msg.c_str(), "broadcast(")) &&
        (Contains(msg.c_str(), "count=32768") || Contains(msg.c_str(), "count=262144") ||
         Contains(msg.c_str(), "allreduce(count=1048576"));
    if (rc != braidErrInvalidUsage || SecondsSince(t0) > 8 || !both) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, SecondsSince(t0),
                   msg.c_str());
      return 1;
    }
    if (!Untouched(rank, recv)) return 2;
    // The communicator is usable: a matched call (on the board, then on the engine) is exact.
    for (size_t count : {size_t{16}, size_t{1} << 16}) {
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank + 1);
      rc = braidAllReduce(in.data(), recv.data(), count, braidFloat32, braidSum, comm);
      const float want = static_cast<float>(n * (n + 1) / 2);
      if (rc != braidSuccess || recv[0] != want || recv[count - 1] != want) {
        std::fprintf(stderr, "[rank %d] the next call (count %zu): rc=%d %s\n", rank, count, rc,
                     braidGetLastError(comm));
        return 3;
      }
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(CallAgreement, CountsStraddling, ::testing::ValuesIn(kStraddles),
                         [](const auto& info) { return std::string(info.param.name); });

// Ranks that build different schedules for the same call (here rank 0 alone runs in
// deterministic mode, the ordered reduction, with the agreement of its own; the others run
// recursive doubling, whose rounds carry it) fail alike, saying so, instead of misreading each
// other's messages. (BRAID_ALGO would not do: the ranks take rank 0's at init.)
TEST(CallAgreement, RanksThatBuildDifferentSchedulesFailAlike) {
  JobOptions opt;
  opt.nranks = 4;
  opt.timeout_s = 60;
  opt.init = false;
  opt.env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "10"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    setenv("BRAID_DETERMINISTIC", rank == 0 ? "1" : "0", 1);
    braidComm_t comm = nullptr;
    if (braidCommInitRank(&comm, n, id, rank) != braidSuccess) return 90;
    std::vector<float> in(256, 1.0f), recv(256, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc =
        braidAllReduce(in.data(), recv.data(), in.size(), braidFloat32, braidSum, comm);
    int code = ExpectMismatch(rc, comm, rank, t0, {"different schedules", "#0"}, recv);
    braidCommDestroy(comm);
    return code;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Whether a call carries its agreement must not depend on what each rank chooses alone: one
// rank all-gathers in place and the other out of place (the out-of-place schedule copies the
// rank's own block in the first step), and the results must be right on both.
TEST(CallAgreement, RanksThatPlaceDifferentlyStillAgree) {
  auto out = RunJob(TwoRanksOverTcp(), [](braidComm_t comm, int rank, int, const braidUniqueId&) {
    for (size_t count : {size_t{1}, size_t{2}, size_t{1000}}) {
      for (int in_place_rank : {0, 1}) {
        std::vector<float> all(2 * count, kSentinel);
        std::vector<float> mine(count);
        for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(rank * 1000 + i);
        const float* send = mine.data();
        if (rank == in_place_rank) {
          std::copy(mine.begin(), mine.end(), all.begin() + rank * count);
          send = all.data() + rank * count;
        }
        if (braidAllGather(send, all.data(), count, braidFloat32, comm) != braidSuccess) {
          std::fprintf(stderr, "[rank %d] count %zu: %s\n", rank, count, braidGetLastError(comm));
          return 1;
        }
        for (int r = 0; r < 2; ++r)
          for (size_t i = 0; i < count; ++i)
            if (all[r * count + i] != static_cast<float>(r * 1000 + i)) return 2;
      }
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

class VerifyCallsMixed : public ::testing::TestWithParam<std::string> {};

// Ranks configured differently (BRAID_VERIFY_CALLS=0 on rank 0 only) fail with invalid usage
// that names the variable, instead of misreading each other's messages.
TEST_P(VerifyCallsMixed, ConfigurationMismatchIsNamed) {
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 60;
  opt.init = false;
  // The engine's agreement is what the variable turns off: the small-message board (which
  // always compares calls, for free) stays out of it.
  opt.env = {
      {"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "10"}, {"BRAID_ONESHOT_BYTES", "0"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    setenv("BRAID_VERIFY_CALLS", rank == 0 ? "0" : "1", 1);
    braidComm_t comm = nullptr;
    if (braidCommInitRank(&comm, n, id, rank) != braidSuccess) return 90;
    std::vector<float> in(256, 1.0f), recv(256);
    braidResult_t rc =
        braidAllReduce(in.data(), recv.data(), in.size(), braidFloat32, braidSum, comm);
    const char* msg = braidGetLastError(comm);
    int code = 0;
    if (rc != braidErrInvalidUsage || !Contains(msg, "BRAID_VERIFY_CALLS")) {
      std::fprintf(stderr, "[rank %d] rc=%d: %s\n", rank, rc, msg);
      code = 1;
    }
    braidCommDestroy(comm);
    return code;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, VerifyCallsMixed, ::testing::Values("shm", "tcp"));
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, VerifyCallsMixed, ::testing::Values("ucx"));
#endif

// A send or receive against a collective (the point-to-point deadlock check, Engine::p2pDeadlock):
// rank 0 blocks in a send or receive that waits on rank 1 while every other rank is in an
// all-gather that rank 0 has not issued. Neither can ever move; before the check both waited out
// BRAID_TIMEOUT (300 s by default). Now every rank fails with invalid usage within a second or
// so, naming the deadlock, whatever the transport or algorithm (board one-shot, ring, recursive
// doubling).
// BRAID_TIMEOUT far beyond what the check takes: a timeout fails the tests' bounds.
JobOptions P2pJob(int nranks, const std::string& transport = "tcp") {
  JobOptions opt;
  opt.nranks = nranks;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
  return opt;
}

// A rank's failed call, reported (the rank's body then returns 1).
bool Failed(braidResult_t rc, int rank, braidComm_t comm) {
  if (rc == braidSuccess) return false;
  std::fprintf(stderr, "[rank %d] rc=%d: %s\n", rank, rc, braidGetLastError(comm));
  return true;
}

using P2pParam = std::tuple<int, std::string, std::string>;  // ranks, transport, rank 0's call
class P2pAgainstCollective : public ::testing::TestWithParam<P2pParam> {
 protected:
  JobOptions Options() const { return P2pJob(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(P2pAgainstCollective, FailsEveryRankFastNamingTheDeadlock) {
  const bool recv = std::get<2>(GetParam()) == "recv";
  // On shared memory rank 0's send data reaches rank 1 before the check looks: the board's
  // straggler check (Engine::failBoardStragglers) finds the calls differ at once, in its words.
  const bool board_first = !recv && std::get<1>(GetParam()) == "shm";
  auto out = RunJob(Options(), [=](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    // A send this large cannot leave on a socket's or a ring's buffer: it waits for rank 1.
    const size_t count = rank == 0 && !recv ? size_t{4} << 20 : 1000;
    std::vector<float> in(count, 1.0f + rank), recv_buf(1000 * n, kSentinel);
    auto t0 = Clock::now();
    braidResult_t rc;
    if (rank == 0)
      rc = recv ? braidRecv(recv_buf.data(), 1000, braidFloat32, 1, comm)
                : braidSend(in.data(), count, braidFloat32, 1, comm);
    else
      rc = braidAllGather(in.data(), recv_buf.data(), 1000, braidFloat32, comm);
    const char* msg = braidGetLastError(comm);
    const double took = SecondsSince(t0);
    if (board_first) {
      if (rc == braidSuccess || took > 10 ||
          (rank == 1 && (rc != braidErrInvalidUsage || !Contains(msg, "call mismatch")))) {
        std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, took, msg);
        return 1;
      }
      return 0;
    }
    // Rank 1 found it (the rank rank 0 waits on), the others learned it from its notice. On two
    // ranks the blocked rank's message is checked in full; on more, a rank whose notice came
    // late on these two cores may name only the stream rank 1 shut (failure_notice.h), so the
    // others must fail as fast, and name the deadlock when they report it as such.
    const std::string want = rank == 1 ? "deadlock: rank 0 is blocked in a send or receive that "
                                         "waits on this rank, and has not issued allgather"
                                       : "is blocked in a point-to-point call waiting on rank 1, "
                                         "which waits for it in allgather #0";
    const bool strict = rank == 1 || n == 2 || rc == braidErrInvalidUsage;
    if (rc == braidSuccess || took > 10 ||
        (strict && (rc != braidErrInvalidUsage || !Contains(msg, want))) ||
        (rank == 1 && !Contains(msg, "it issued no collective yet"))) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, took, msg);
      return 1;
    }
    // Nothing arrived for rank 0's receive; the all-gather wrote nothing either (it failed
    // before its data moved, or on its board before any result was final).
    if (rank == 0 && recv) return Untouched(rank, recv_buf) ? 0 : 2;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, P2pAgainstCollective,
                         ::testing::Values(P2pParam{2, "shm", "recv"}, P2pParam{2, "tcp", "recv"},
                                           P2pParam{2, "tcp", "send"}, P2pParam{2, "shm", "send"},
                                           P2pParam{4, "shm", "recv"}, P2pParam{4, "tcp", "recv"},
                                           P2pParam{8, "tcp", "send"}),
                         [](const ::testing::TestParamInfo<P2pParam>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param) + "_" + std::get<2>(info.param);
                         });

// What is no deadlock stays none, however long the wait: rank 0 blocks in a receive from rank 2,
// which first waits out several of the check's periods (the check looks after 0.5 s of no
// progress) and only then sends; rank 1 is in the all-gather meanwhile and asks rank 0, which is
// blocked, but not on rank 1. And rank 3's all-gather is a request it leaves running while it
// sends to rank 0's second receive: a collective whose caller is not held on it could still be
// followed by the send its peer waits for. Every call succeeds with exact data.
TEST(P2pAgainstCollective, AWaitThatEndsIsNoDeadlock) {
  auto out = RunJob(P2pJob(4), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t count = 1000;
    std::vector<float> in(count), gathered(count * n, kSentinel), got(count, kSentinel);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank * 10000 + i);
    auto expect_from = [&](int peer, const std::vector<float>& v, size_t at) {
      for (size_t i = 0; i < count; ++i)
        if (v[at + i] != static_cast<float>(peer * 10000 + i)) return false;
      return true;
    };
    braidResult_t rc = braidSuccess;
    if (rank == 0) {
      rc = braidRecv(got.data(), count, braidFloat32, 2, comm);
      if (rc == braidSuccess && !expect_from(2, got, 0)) return 3;
      if (rc == braidSuccess) rc = braidRecv(got.data(), count, braidFloat32, 3, comm);
      if (rc == braidSuccess && !expect_from(3, got, 0)) return 4;
      if (rc == braidSuccess)
        rc = braidAllGather(in.data(), gathered.data(), count, braidFloat32, comm);
    } else if (rank == 1) {
      rc = braidAllGather(in.data(), gathered.data(), count, braidFloat32, comm);
    } else if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1600));
      rc = braidSend(in.data(), count, braidFloat32, 0, comm);
      if (rc == braidSuccess)
        rc = braidAllGather(in.data(), gathered.data(), count, braidFloat32, comm);
    } else {
      braidRequest_t req = nullptr;
      rc = braidIallGather(in.data(), gathered.data(), count, braidFloat32, comm, &req);
      if (rc == braidSuccess) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2600));
        rc = braidSend(in.data(), count, braidFloat32, 0, comm);
        const braidResult_t w = braidWait(&req, -1);
        if (rc == braidSuccess) rc = w;
      }
    }
    if (Failed(rc, rank, comm)) return 1;
    for (int r = 0; r < n; ++r)
      if (!expect_from(r, gathered, static_cast<size_t>(r) * count)) return 2;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A group that receives from two ranks publishes both while it waits (0.5 s in); when one of
// them sends and goes on into a collective, the wait on it is over, and the check must not take
// the record of it for a deadlock: rank 0 sends after 1.5 s and enters an all-reduce, rank 2
// sends only after 3 s. Every call succeeds, exactly.
TEST(P2pAgainstCollective, AGroupWaitThatMovesOnIsNoDeadlock) {
  auto out = RunJob(P2pJob(3), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t count = 1000;
    std::vector<float> mine(count), from0(count, kSentinel), from2(count, kSentinel);
    for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(rank * 10000 + i);
    braidResult_t rc = braidSuccess;
    if (rank == 1) {
      braidGroupStart();
      braidRecv(from0.data(), count, braidFloat32, 0, comm);
      braidRecv(from2.data(), count, braidFloat32, 2, comm);
      rc = braidGroupEnd();
      for (size_t i = 0; rc == braidSuccess && i < count; ++i)
        if (from0[i] != static_cast<float>(i) || from2[i] != static_cast<float>(20000 + i))
          return 3;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(rank == 0 ? 1500 : 3000));
      rc = braidSend(mine.data(), count, braidFloat32, 1, comm);
    }
    std::vector<float> sum(count);
    if (rc == braidSuccess)
      rc = braidAllReduce(mine.data(), sum.data(), count, braidFloat32, braidSum, comm);
    if (Failed(rc, rank, comm)) return 1;
    for (size_t i = 0; i < count; ++i)
      if (sum[i] != static_cast<float>(30000 + n * i)) return 2;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A wait without a limit on another thread does not hold the issuing thread: rank 0 leaves a
// receive from rank 1 to a helper thread's braidWait and, 2.5 s later, calls the all-gather
// that rank 1 (which sends only after it) waits in. No deadlock: every call succeeds.
TEST(P2pAgainstCollective, AWaitOnAnotherThreadIsNoDeadlock) {
  auto out = RunJob(P2pJob(2), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t count = 1000;
    std::vector<float> mine(count, 1.0f + rank), got(count, kSentinel), all(count * n);
    braidResult_t rc = braidSuccess, waited = braidSuccess;
    if (rank == 0) {
      braidRequest_t req = nullptr;
      rc = braidIrecv(got.data(), count, braidFloat32, 1, comm, &req);
      if (rc != braidSuccess) return 4;
      std::thread helper([&] { waited = braidWait(&req, -1); });
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      rc = braidAllGather(mine.data(), all.data(), count, braidFloat32, comm);
      helper.join();
      if (rc == braidSuccess) rc = waited;
      if (rc == braidSuccess)
        for (float v : got)
          if (v != 2.0f) return 3;
    } else {
      rc = braidAllGather(mine.data(), all.data(), count, braidFloat32, comm);
      if (rc == braidSuccess) rc = braidSend(mine.data(), count, braidFloat32, 0, comm);
    }
    if (Failed(rc, rank, comm)) return 1;
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        if (all[static_cast<size_t>(r) * count + i] != 1.0f + r) return 2;
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
