// The board on one host (issues 11 and 38: one-sided schedules, core/runtime/one_sided_run.h):
// calls whose per-rank payload fits BRAID_ONESHOT_BYTES run on the shared-memory board. Checked
// here: every collective on the board is bit-exact and moves no byte through the streams (the
// transports' counters), a call one byte over the board goes to the engine and is bit-exact too,
// reductions are the rank-order fold on every rank, a call that differs between ranks fails on
// every rank and leaves the communicator usable, mixed board and engine calls (non-blocking,
// larger) on 8 ranks on the 2-core machine complete bit-exact, and a killed, stopped or revoking
// peer is named by every survivor waiting on the board. Calls by reference
// (BRAID_SINGLE_COPY_BYTES: each rank reads its peers' buffers in place) are bit-exact with no
// stream byte, fail cleanly on a mismatch or a buffer a peer cannot read, and are turned off on
// every rank when one rank may not be read. Order between ranks comes from pipes, never sleeps.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/runtime/comm_registry.h"
#include "multirank/collective_cases.h"
#include "multirank/harness.h"
#include "multirank/pid_pipe.h"
#include "transport/cross_memory.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes this rank has sent on its streams (the transports' endpoints) to all peers: not the
// board's, which braidCommPeerTraffic counts too.
bool SentBytes(braidComm_t comm, int nranks, uint64_t* total) {
  *total = 0;
  const braid::CommRef c = braid::LookupComm(comm);
  if (!c) return false;
  for (int p = 0; p < nranks; ++p)
    for (int lane = 0; p != c->rank() && lane < c->nlanes(); ++lane)
      if (const braid::Endpoint* ep = c->endpoint(p, lane)) *total += ep->bytesSent();
  return true;
}

// Bytes this rank has sent on its streams since it counted `before` (SentBytes); UINT64_MAX when
// the counters cannot be read.
uint64_t SentSince(braidComm_t comm, int nranks, uint64_t before) {
  uint64_t now = 0;
  return SentBytes(comm, nranks, &now) ? now - before : UINT64_MAX;
}

JobOptions Options(int n, std::vector<std::pair<std::string, std::string>> env = {}) {
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "20"}};
  for (auto& e : env) opt.env.push_back(std::move(e));
  return opt;
}

// "n4": built by appending, not "n" + std::to_string(...), which GCC 12 warns about
// (-Wrestrict, a false positive in the inlined string insert).
std::string RanksName(int n) {
  std::string name = "n";
  name += std::to_string(n);
  return name;
}

class OneShot : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, OneShot, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return RanksName(info.param); });

// Every collective x type x op x placement that fits the board: bit-exact, and not one byte
// through the streams (so the board, not the engine, ran it).
TEST_P(OneShot, EveryCollectiveOnTheBoardIsBitExactAndSendsNoStreamByte) {
  const int n = GetParam();
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  // 300 elements of 8 bytes on 8 ranks: 19200 bytes for reduce-scatter and all-to-all.
  const auto cases = Matrix({1, 7, 300}, types, ops);
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    uint64_t before = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    uint64_t wrong = 0;
    for (const Case& c : cases) wrong += RunCase(comm, rank, nranks, c);  // no send/recv
    CHECK_OR_FAIL(wrong == 0, "%llu wrong elements", static_cast<unsigned long long>(wrong));
    CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
    CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "the board calls sent stream bytes");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// braidCommPeerTraffic counts the board's one-sided reads: a one-shot all-reduce of c floats is
// c * 4 bytes from every peer to every peer, counted by the reader as received at once and by
// the poster as sent once the peers read (after a barrier); an all-gather of c floats per rank
// is c * 4 from each peer; no stream byte moves.
TEST_P(OneShot, TrafficCountsWhatPeersReadOfTheBoard) {
  const int n = GetParam();
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    const auto counters = [&](std::vector<uint64_t>* sent, std::vector<uint64_t>* received) {
      sent->assign(static_cast<size_t>(nranks), 0);
      received->assign(static_cast<size_t>(nranks), 0);
      for (int p = 0; p < nranks; ++p)
        if (braidCommPeerTraffic(comm, p, &(*sent)[p], &(*received)[p], nullptr, 0) != braidSuccess)
          return false;
      return true;
    };
    std::vector<uint64_t> s0, r0, s1, r1;
    uint64_t streams = 0;
    CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
    CHECK_OR_FAIL(counters(&s0, &r0) && SentBytes(comm, nranks, &streams), "traffic counters");
    constexpr uint64_t kCount = 300;
    std::vector<float> in(kCount, static_cast<float>(rank + 1)), sum(kCount);
    std::vector<float> gathered(kCount * static_cast<uint64_t>(nranks));
    CHECK_OR_FAIL(
        braidAllReduce(in.data(), sum.data(), kCount, braidFloat32, braidSum, comm) == braidSuccess,
        "all-reduce");
    CHECK_OR_FAIL(
        braidAllGather(in.data(), gathered.data(), kCount, braidFloat32, comm) == braidSuccess,
        "all-gather");
    CHECK_OR_FAIL(counters(&s1, &r1), "traffic counters");
    for (int p = 0; p < nranks; ++p) {
      const uint64_t want = p == rank ? 0 : 2 * kCount * sizeof(float);
      CHECK_OR_FAIL(r1[p] - r0[p] == want, "received %llu bytes from rank %d, want %llu",
                    static_cast<unsigned long long>(r1[p] - r0[p]), p,
                    static_cast<unsigned long long>(want));
    }
    CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
    CHECK_OR_FAIL(counters(&s1, &r1), "traffic counters");
    for (int p = 0; p < nranks; ++p) {
      const uint64_t want = p == rank ? 0 : 2 * kCount * sizeof(float);
      CHECK_OR_FAIL(s1[p] - s0[p] == want, "sent %llu bytes to rank %d, want %llu",
                    static_cast<unsigned long long>(s1[p] - s0[p]), p,
                    static_cast<unsigned long long>(want));
    }
    CHECK_OR_FAIL(SentSince(comm, nranks, streams) == 0, "the board calls sent stream bytes");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The board's edge (BRAID_ONESHOT_BYTES=4096): 1024 floats fit and send nothing; 1025 do not,
// go to the engine (stream bytes move) and are bit-exact all the same; BRAID_ONESHOT_BYTES=0 and
// BRAID_ALGO rules that name another algorithm keep every call off the board.
TEST_P(OneShot, TheBoardTakesWhatFitsAndTheEngineTheRest) {
  const int n = GetParam();
  struct Setting {
    std::vector<std::pair<std::string, std::string>> env;
    bool board_at_1024;
  };
  const Setting settings[] = {
      {{{"BRAID_ONESHOT_BYTES", "4096"}}, true},
      {{{"BRAID_ONESHOT_BYTES", "0"}}, false},
      {{{"BRAID_ONESHOT_BYTES", "4096"}, {"BRAID_ALGO", "allreduce:ring"}}, false},
      {{{"BRAID_ONESHOT_BYTES", "4096"}, {"BRAID_ALGO", "allreduce:oneshot@0-1M"}}, true},
  };
  for (const Setting& s : settings) {
    auto out = RunJob(Options(n, s.env), [&](braidComm_t comm, int rank, int nranks,
                                             const braidUniqueId&) {
      for (uint64_t count : {uint64_t{1024}, uint64_t{1025}}) {
        uint64_t before = 0, after = 0;
        CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
        const uint64_t wrong = RunCase(
            comm, rank, nranks, {CollKind::kAllReduce, DataType::kFloat32, braidSum, count, false});
        CHECK_OR_FAIL(wrong == 0, "count %llu: %llu wrong elements",
                      static_cast<unsigned long long>(count),
                      static_cast<unsigned long long>(wrong));
        CHECK_OR_FAIL(SentBytes(comm, nranks, &after), "traffic counters");
        const bool on_board = after == before;
        CHECK_OR_FAIL(on_board == (count == 1024 && s.board_at_1024), "count %llu ran %s the board",
                      static_cast<unsigned long long>(count), on_board ? "on" : "off");
      }
      return 0;
    });
    EXPECT_TRUE(AllSucceeded(out))
        << s.env.back().first << "=" << s.env.back().second << ": " << DescribeOutcomes(out);
  }
}

// Fractional floats whose sums round: the board folds in rank order, x0 + x1 + ... + xN-1, so
// every rank holds the same bits, those of that fold computed here.
TEST_P(OneShot, ReductionsAreTheRankOrderFoldOnEveryRank) {
  const int n = GetParam();
  auto x = [](int r, uint64_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.1 * r) * 1000.123 +
                              r * 1e-3);
  };
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    const size_t count = 1000;
    std::vector<float> in(count), got(count), rs_in(count * nranks), rs_got(count);
    uint64_t before = 0, after = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    for (size_t i = 0; i < count; ++i) in[i] = x(rank, i);
    for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = x(rank, i);
    CHECK_OR_FAIL(
        braidAllReduce(in.data(), got.data(), count, braidFloat32, braidSum, comm) == braidSuccess,
        "allreduce");
    CHECK_OR_FAIL(braidReduceScatter(rs_in.data(), rs_got.data(), count, braidFloat32, braidSum,
                                     comm) == braidSuccess,
                  "reducescatter");
    for (size_t i = 0; i < count; ++i) {
      float want = x(0, i), rs_want = x(0, rank * count + i);
      for (int q = 1; q < nranks; ++q) {
        want = want + x(q, i);
        rs_want = rs_want + x(q, rank * count + i);
      }
      CHECK_OR_FAIL(std::memcmp(&got[i], &want, 4) == 0, "allreduce element %zu: %.9g, fold %.9g",
                    i, got[i], want);
      CHECK_OR_FAIL(std::memcmp(&rs_got[i], &rs_want, 4) == 0,
                    "reducescatter element %zu: %.9g, fold %.9g", i, rs_got[i], rs_want);
    }
    CHECK_OR_FAIL(SentBytes(comm, nranks, &after) && after == before,
                  "the reductions went through the streams, not the board");
    // A pre-multiplied sum whose scalar differs per rank (rank r scales by r + 1): each rank
    // scales its own input before posting it.
    braidRedOp_t premul;
    const float scalar = static_cast<float>(rank + 1);
    CHECK_OR_FAIL(braidRedOpCreatePreMulSum(&premul, &scalar, braidFloat32, comm) == braidSuccess,
                  "premulsum");
    std::vector<float> ones(9, 1.0f), sum(9);
    CHECK_OR_FAIL(
        braidAllReduce(ones.data(), sum.data(), 9, braidFloat32, premul, comm) == braidSuccess,
        "premulsum allreduce");
    braidRedOpDestroy(premul, comm);
    for (float v : sum)
      CHECK_OR_FAIL(v == static_cast<float>(nranks * (nranks + 1) / 2), "premulsum %g", v);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Float all-reduces of `counts` elements, out of place, in place and AVG, whose inputs round
// when summed: every rank must hold the bits of the rank-order fold computed here. `label` names
// the setting in failures. Returns 0, or 1 after printing the first difference.
int CheckRankOrderFold(braidComm_t comm, int rank, int nranks, const char* label,
                       std::initializer_list<uint64_t> counts) {
  auto x = [](int r, uint64_t i) {
    return static_cast<float>(std::cos(0.11 * static_cast<double>(i) + 0.7 * r) * 333.317 +
                              r * 1e-3);
  };
  for (uint64_t count : counts) {
    for (int form = 0; form < 3; ++form) {  // out of place, in place, AVG
      const bool in_place = form == 1, avg = form == 2;
      std::vector<float> in(count), got(count, -1.0f);
      for (uint64_t i = 0; i < count; ++i) in[i] = x(rank, i);
      float* out_buf = in_place ? in.data() : got.data();
      CHECK_OR_FAIL(braidAllReduce(in.data(), out_buf, count, braidFloat32,
                                   avg ? braidAvg : braidSum, comm) == braidSuccess,
                    "%s count %llu form %d: %s", label, static_cast<unsigned long long>(count),
                    form, braidGetLastError(comm));
      for (uint64_t i = 0; i < count; ++i) {
        float want = x(0, i);
        for (int q = 1; q < nranks; ++q) want = want + x(q, i);
        if (avg) want = want / static_cast<float>(nranks);
        CHECK_OR_FAIL(std::memcmp(&out_buf[i], &want, 4) == 0,
                      "%s count %llu form %d element %llu: %.9g, fold %.9g", label,
                      static_cast<unsigned long long>(count), form,
                      static_cast<unsigned long long>(i), out_buf[i], want);
      }
    }
  }
  return 0;
}

// Small, large (60 KB), small all-reduces: in a group on even ranks, one by one on odd ones. The
// large one takes more than one post number where it runs two-shot, so the calls after it must
// still meet. Returns 0, or 1 after printing what failed.
int CheckLargeCallAmidSmallOnes(braidComm_t comm, int rank, int nranks, const char* label) {
  std::vector<int32_t> a(5, rank + 1), b(15000, rank), c(3, 2 * rank);
  if (rank % 2 == 0) CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "group start");
  CHECK_OR_FAIL(
      braidAllReduce(a.data(), a.data(), a.size(), braidInt32, braidSum, comm) == braidSuccess,
      "%s: small 1", label);
  CHECK_OR_FAIL(
      braidAllReduce(b.data(), b.data(), b.size(), braidInt32, braidMax, comm) == braidSuccess,
      "%s: large", label);
  CHECK_OR_FAIL(
      braidAllReduce(c.data(), c.data(), c.size(), braidInt32, braidSum, comm) == braidSuccess,
      "%s: small 2", label);
  if (rank % 2 == 0)
    CHECK_OR_FAIL(braidGroupEnd() == braidSuccess, "%s: group end: %s", label,
                  braidGetLastError(comm));
  for (int32_t v : a) CHECK_OR_FAIL(v == nranks * (nranks + 1) / 2, "%s: small 1: %d", label, v);
  for (int32_t v : b) CHECK_OR_FAIL(v == nranks - 1, "%s: large: %d", label, v);
  for (int32_t v : c) CHECK_OR_FAIL(v == nranks * (nranks - 1), "%s: small 2: %d", label, v);
  return 0;
}

// The all-reduces of the type x op matrix at 5001 elements (5-40 KB).
std::vector<Case> AllReduceMatrix() {
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  std::vector<Case> matrix;
  for (const Case& c : Matrix({5001}, types, ops))
    if (c.kind == CollKind::kAllReduce) matrix.push_back(c);
  return matrix;
}

// Large all-reduces on the board two-shot (BRAID_BOARD_TWO_SHOT: each rank folds its 1/N part
// from every post, posts it, and copies the N parts out) against one-shot and the default:
// inexact floats, so the bits are those of the rank-order fold computed here on every rank, at
// counts that cut unevenly (n, 3n+2, 8193, 50000: 200 KB), in and out of place, with AVG; the
// type x op matrix at a count on a large buffer; and a group that mixes small calls with a
// two-shot one (it takes two post numbers, so the calls after it must still meet). No stream
// byte: the board ran all of it.
TEST_P(OneShot, TwoShotAllReduceIsTheRankOrderFoldAndMeetsTheCallsAroundIt) {
  const int n = GetParam();
  const std::vector<Case> matrix = AllReduceMatrix();  // each on a large buffer
  for (const char* mode : {"1", "0", "auto"}) {
    auto out = RunJob(
        // The rule keeps 200 KB on the board on 2 ranks too (its default stops at 64 KiB there).
        Options(n, {{"BRAID_BOARD_TWO_SHOT", mode}, {"BRAID_ALGO", "allreduce:oneshot@0-1M"}}),
        [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
          uint64_t before = 0;
          CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
          const auto un = static_cast<uint64_t>(nranks);
          if (CheckRankOrderFold(comm, rank, nranks, mode, {un, 3 * un + 2, 8193, 50000}) != 0)
            return 1;
          uint64_t wrong = 0;
          for (const Case& c : matrix) wrong += RunCase(comm, rank, nranks, c);
          CHECK_OR_FAIL(wrong == 0, "mode %s: %llu wrong elements in the type x op matrix", mode,
                        static_cast<unsigned long long>(wrong));
          if (CheckLargeCallAmidSmallOnes(comm, rank, nranks, mode) != 0) return 1;
          CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
          CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "mode %s: stream bytes moved", mode);
          return 0;
        });
    EXPECT_TRUE(AllSucceeded(out))
        << "BRAID_BOARD_TWO_SHOT=" << mode << ": " << DescribeOutcomes(out);
  }
}

// Rank 0 all-reduces `base` + 1 floats, the others `base`: every rank must fail with a call
// mismatch and write nothing, and the next call (12345 floats) must be exact. Returns 0, or 1
// after printing what failed.
int CheckMismatchedCountThenNextCall(braidComm_t comm, int rank, int nranks, size_t base) {
  const size_t count = rank == 0 ? base + 1 : base;
  std::vector<float> in(base + 1, 1.0f), recv(base + 1, -7.0f);
  const braidResult_t rc =
      braidAllReduce(in.data(), recv.data(), count, braidFloat32, braidSum, comm);
  const std::string msg = braidGetLastError(comm);
  CHECK_OR_FAIL(rc == braidErrInvalidUsage && msg.find("call mismatch") != std::string::npos,
                "count %zu: rc=%d: %s", base, rc, msg.c_str());
  for (float v : recv) CHECK_OR_FAIL(v == -7.0f, "receive buffer written after a mismatch");
  std::vector<float> next(12345, static_cast<float>(rank));
  CHECK_OR_FAIL(braidAllReduce(next.data(), next.data(), next.size(), braidFloat32, braidSum,
                               comm) == braidSuccess,
                "the call after the mismatch: %s", braidGetLastError(comm));
  for (float v : next)
    CHECK_OR_FAIL(v == static_cast<float>(nranks * (nranks - 1) / 2), "sum %g", v);
  return 0;
}

// A large call that differs between ranks while both would run two-shot (rank 0 passes one
// element more), and one that only rank 0 would run two-shot (its count crosses 32 KiB, the
// others' does not): every rank fails with a call mismatch, writes nothing, and the next
// two-shot call is bit-exact (the ranks still take the same post numbers).
TEST_P(OneShot, ATwoShotCallThatDiffersFailsOnEveryRankAndTheNextOneRuns) {
  const int n = GetParam();
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    for (int variant = 0; variant < 2; ++variant) {
      const size_t base = variant == 0 ? 10000 : 8191;  // 40 KB; 32764 B against 32768
      if (CheckMismatchedCountThenNextCall(comm, rank, nranks, base) != 0) return 1;
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// BRAID_BOARD_TWO_SHOT differs between ranks (rank 0: 1, the others 0): rank 0's applies on every
// rank, so the ranks take the same post numbers and the calls run (without the agreement the
// form in the signature would differ and every call fail as a mismatch).
TEST_P(OneShot, RankZerosTwoShotSettingAppliesOnEveryRank) {
  const int n = GetParam();
  JobOptions opt = Options(n);
  opt.init = false;
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    setenv("BRAID_BOARD_TWO_SHOT", rank == 0 ? "1" : "0", 1);
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, nranks, id, rank) == braidSuccess, "init: %s",
                  braidGetLastError(nullptr));
    uint64_t before = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    for (int k = 0; k < 3; ++k) {
      // 16000 bytes: on the board's large buffers, and within its default on 2 ranks too.
      std::vector<float> v(4000, static_cast<float>(rank + k));
      CHECK_OR_FAIL(braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, braidSum, comm) ==
                        braidSuccess,
                    "call %d: %s", k, braidGetLastError(comm));
      const float want = static_cast<float>(nranks * (nranks - 1) / 2 + nranks * k);
      for (float x : v) CHECK_OR_FAIL(x == want, "call %d: %g, want %g", k, x, want);
    }
    CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "stream bytes moved");
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Whether this job's ranks outnumber the CPUs they may run on (every rank inherits this
// process's mask): then the board takes a two-shot all-reduce in rounds by default.
bool RanksOutnumberCpus(int nranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 && nranks > CPU_COUNT(&set);
}

// Runs `call` (a collective and the check of its result: 0 when right) and checks where it ran:
// on the board, which sends no stream byte, exactly when `board` says so. Returns 0, or 1 after
// printing what failed.
template <typename CallAndCheck>
int CheckRanOnTheBoard(braidComm_t comm, int rank, int nranks, bool board, CallAndCheck call) {
  uint64_t before = 0;
  CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
  if (call() != 0) return 1;
  const bool on_board = SentSince(comm, nranks, before) == 0;
  CHECK_OR_FAIL(on_board == board, "ran %s the board", on_board ? "on" : "off");
  return 0;
}

// A two-shot all-reduce larger than the board's buffers (BRAID_ONESHOT_BYTES=4096 here) runs in
// rounds, one piece of the message per round: 2, 8 and 98 rounds (pieces and parts that do not
// divide evenly), in and out of place, AVG, every type x op (5001 elements: 2-10 rounds), a group
// with small calls around a call of 15 rounds, all the rank-order fold bit for bit and no byte
// through the streams. By default (no rule) it runs there when the ranks
// outnumber the cores, and on the engine otherwise.
TEST_P(OneShot, TwoShotInRoundsIsTheRankOrderFoldAtEverySize) {
  const int n = GetParam();
  const std::vector<Case> matrix = AllReduceMatrix();  // 2-10 rounds each
  auto out = RunJob(
      Options(n, {{"BRAID_ONESHOT_BYTES", "4096"},
                  {"BRAID_BOARD_TWO_SHOT", "1"},
                  {"BRAID_ALGO", "allreduce:oneshot"}}),
      [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        uint64_t before = 0;
        CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
        if (CheckRankOrderFold(comm, rank, nranks, "rounds", {1025, 7 * 1024 + 3, 100000}) != 0)
          return 1;
        uint64_t wrong = 0;
        for (const Case& c : matrix) wrong += RunCase(comm, rank, nranks, c);
        CHECK_OR_FAIL(wrong == 0, "%llu wrong elements in the type x op matrix",
                      static_cast<unsigned long long>(wrong));
        if (CheckLargeCallAmidSmallOnes(comm, rank, nranks, "rounds") != 0) return 1;
        CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
        CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "stream bytes moved");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);

  // The defaults (two-shot auto, no rule): 20000 floats over a 4 KiB board.
  const bool board_by_default = n >= 3 && RanksOutnumberCpus(n);
  out = RunJob(Options(n, {{"BRAID_ONESHOT_BYTES", "4096"}}),
               [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
                 return CheckRanOnTheBoard(comm, rank, nranks, board_by_default, [&] {
                   std::vector<float> v(20000, static_cast<float>(rank));
                   CHECK_OR_FAIL(braidAllReduce(v.data(), v.data(), v.size(), braidFloat32,
                                                braidSum, comm) == braidSuccess,
                                 "%s", braidGetLastError(comm));
                   for (float f : v)
                     CHECK_OR_FAIL(f == static_cast<float>(nranks * (nranks - 1) / 2), "sum %g", f);
                   return 0;
                 });
               });
  EXPECT_TRUE(AllSucceeded(out)) << "defaults: " << DescribeOutcomes(out);
}

// A call in rounds that differs between ranks (rank 0 passes one element more): the first
// round's posts differ, so every rank fails with a call mismatch and writes nothing, and the
// next call in rounds is bit-exact.
TEST_P(OneShot, ACallInRoundsThatDiffersFailsOnEveryRankAndTheNextOneRuns) {
  const int n = GetParam();
  auto out =
      RunJob(Options(n, {{"BRAID_ONESHOT_BYTES", "4096"},
                         {"BRAID_BOARD_TWO_SHOT", "1"},
                         {"BRAID_ALGO", "allreduce:oneshot"}}),
             [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
               return CheckMismatchedCountThenNextCall(comm, rank, nranks, 20000);  // 20 rounds
             });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// All-gathers larger than the board's buffers run in rounds, a piece of every rank's block per
// round (BRAID_ONESHOT_BYTES=4096: 1 to 196 rounds, pieces that cut unevenly), every type, in and
// out of place: bit-exact with no stream byte. By default (no rule) the board takes them where
// the ranks outnumber the cores, and the engine where each rank has one.
TEST_P(OneShot, AllGatherInRoundsIsBitExactAtEverySize) {
  const int n = GetParam();
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<Case> cases;
  for (const Case& c : Matrix({1025, 7 * 1024 + 3, 100000}, types, {braidSum}))
    if (c.kind == CollKind::kAllGather) cases.push_back(c);
  auto out = RunJob(
      Options(n, {{"BRAID_ONESHOT_BYTES", "4096"}, {"BRAID_ALGO", "allgather:oneshot"}}),
      [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        uint64_t before = 0;
        CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
        uint64_t wrong = 0;
        for (const Case& c : cases) wrong += RunCase(comm, rank, nranks, c);
        CHECK_OR_FAIL(wrong == 0, "%llu wrong elements", static_cast<unsigned long long>(wrong));
        CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
        CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "stream bytes moved");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);

  const bool board_by_default = RanksOutnumberCpus(n);
  out = RunJob(Options(n, {{"BRAID_ONESHOT_BYTES", "4096"}}),
               [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
                 return CheckRanOnTheBoard(comm, rank, nranks, board_by_default, [&] {
                   const size_t count = 5000;  // 20000 bytes per rank: 5 rounds
                   std::vector<float> in(count), got(count * nranks, -1.0f);
                   for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank * 100000 + i);
                   CHECK_OR_FAIL(braidAllGather(in.data(), got.data(), count, braidFloat32, comm) ==
                                     braidSuccess,
                                 "%s", braidGetLastError(comm));
                   for (int r = 0; r < nranks; ++r)
                     for (size_t i = 0; i < count; ++i)
                       CHECK_OR_FAIL(got[r * count + i] == static_cast<float>(r * 100000 + i),
                                     "block %d element %zu: %g", r, i, got[r * count + i]);
                   return 0;
                 });
               });
  EXPECT_TRUE(AllSucceeded(out)) << "defaults: " << DescribeOutcomes(out);
}

// An all-gather in rounds whose count differs between ranks (rank 0 one element more) fails on
// every rank naming the mismatch, writes nothing, and the next one (in rounds too) is exact.
TEST_P(OneShot, AnAllGatherInRoundsThatDiffersFailsOnEveryRankAndTheNextOneRuns) {
  const int n = GetParam();
  auto out = RunJob(
      Options(n, {{"BRAID_ONESHOT_BYTES", "4096"}, {"BRAID_ALGO", "allgather:oneshot"}}),
      [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        const size_t base = 5000;
        const size_t count = rank == 0 ? base + 1 : base;
        std::vector<float> in(base + 1, static_cast<float>(rank)), recv((base + 1) * nranks, -7.0f);
        const braidResult_t rc = braidAllGather(in.data(), recv.data(), count, braidFloat32, comm);
        const std::string msg = braidGetLastError(comm);
        CHECK_OR_FAIL(rc == braidErrInvalidUsage && msg.find("call mismatch") != std::string::npos,
                      "rc=%d: %s", rc, msg.c_str());
        for (float v : recv) CHECK_OR_FAIL(v == -7.0f, "receive buffer written after a mismatch");
        CHECK_OR_FAIL(
            braidAllGather(in.data(), recv.data(), base, braidFloat32, comm) == braidSuccess,
            "the call after the mismatch: %s", braidGetLastError(comm));
        for (int r = 0; r < nranks; ++r)
          for (size_t i = 0; i < base; ++i)
            CHECK_OR_FAIL(recv[r * base + i] == static_cast<float>(r), "block %d: %g", r,
                          recv[r * base + i]);
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 0 passes another count (then another op): every rank fails with invalid usage naming
// both calls, no receive buffer is written, and the next call succeeds on every rank.
TEST_P(OneShot, ACallThatDiffersFailsOnEveryRankAndTheCommunicatorGoesOn) {
  const int n = GetParam();
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    for (int variant = 0; variant < 2; ++variant) {
      const size_t count = variant == 0 && rank == 0 ? 12 : 8;
      const braidRedOp_t op = variant == 1 && rank == 0 ? braidMax : braidSum;
      std::vector<float> in(16, 1.0f), recv(16, -7.0f);
      braidResult_t rc = braidAllReduce(in.data(), recv.data(), count, braidFloat32, op, comm);
      const std::string msg = braidGetLastError(comm);
      const std::string want = variant == 0 ? "count=12" : "max";
      CHECK_OR_FAIL(rc == braidErrInvalidUsage && msg.find("call mismatch") != std::string::npos &&
                        msg.find(want) != std::string::npos,
                    "variant %d: rc=%d: %s", variant, rc, msg.c_str());
      for (float v : recv) CHECK_OR_FAIL(v == -7.0f, "receive buffer written after a mismatch");
      std::vector<float> one(5, static_cast<float>(rank));
      CHECK_OR_FAIL(
          braidAllReduce(one.data(), one.data(), 5, braidFloat32, braidSum, comm) == braidSuccess,
          "the call after the mismatch: %s", braidGetLastError(comm));
      for (float v : one)
        CHECK_OR_FAIL(v == static_cast<float>(nranks * (nranks - 1) / 2), "sum %g", v);
    }
    braidResult_t async = braidSuccess;
    CHECK_OR_FAIL(braidCommGetAsyncError(comm, &async) == braidSuccess && async == braidSuccess,
                  "async error %d after clean mismatches", async);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Blocking calls in a group run on the board one after another when each fits (no stream byte,
// bit-exact), and meet the same calls issued outside a group on other ranks: even ranks group
// them, odd ranks do not. A group with one call too large for the board runs on the engine
// whole, bit-exact too. A call of the group that differs between ranks fails on every rank, the
// group's other calls complete, and the communicator goes on.
TEST_P(OneShot, GroupedSmallCallsRunOnTheBoardAndMeetUngroupedOnes) {
  const int n = GetParam();
  auto out = RunJob(
      Options(n, {{"BRAID_ONESHOT_BYTES", "4096"}}),
      [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        const float want = static_cast<float>(nranks * (nranks - 1) / 2);
        auto run = [&](const std::vector<size_t>& counts, bool grouped, size_t mismatch_at,
                       std::vector<braidResult_t>* rcs) {
          std::vector<std::vector<float>> bufs;
          for (size_t k = 0; k < counts.size(); ++k)
            bufs.emplace_back(counts[k] + 1, static_cast<float>(rank));
          if (grouped && braidGroupStart() != braidSuccess) return false;
          for (size_t k = 0; k < counts.size(); ++k) {
            // The differing call: rank 0 asks for max where the others sum.
            const braidRedOp_t op = k == mismatch_at && rank == 0 ? braidMax : braidSum;
            rcs->push_back(
                braidAllReduce(bufs[k].data(), bufs[k].data(), counts[k], braidFloat32, op, comm));
          }
          if (grouped && braidGroupEnd() == braidErrInternal) return false;
          for (size_t k = 0; k < counts.size(); ++k) {
            if (k == mismatch_at) continue;
            for (size_t i = 0; i < counts[k]; ++i)
              if (bufs[k][i] != want) return false;
            if (bufs[k][counts[k]] != static_cast<float>(rank)) return false;  // past the end
          }
          return true;
        };
        const bool grouped = rank % 2 == 0;
        uint64_t before = 0;
        std::vector<braidResult_t> rcs;
        CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
        CHECK_OR_FAIL(run({1, 100, 1024, 3}, grouped, size_t(-1), &rcs), "small group: wrong");
        CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "the small group sent stream bytes");
        // 1025 floats do not fit 4096 bytes: the whole group goes to the engine (every rank
        // groups it here: the engine needs the same form on every rank).
        rcs.clear();
        CHECK_OR_FAIL(run({5, 1025, 7}, true, size_t(-1), &rcs), "engine group: wrong");
        const uint64_t sent = SentSince(comm, nranks, before);
        CHECK_OR_FAIL(sent != 0 && sent != UINT64_MAX, "the group with a large call sent nothing");
        // A mismatch in the middle of a small group.
        rcs.clear();
        CHECK_OR_FAIL(run({4, 4, 4}, grouped, 1, &rcs), "mismatch group: wrong");
        const std::string msg = braidGetLastError(comm);
        if (!grouped) {
          CHECK_OR_FAIL(
              rcs[0] == braidSuccess && rcs[1] == braidErrInvalidUsage && rcs[2] == braidSuccess,
              "ungrouped results %d %d %d", rcs[0], rcs[1], rcs[2]);
        }
        CHECK_OR_FAIL(msg.find("call mismatch") != std::string::npos, "error: %s", msg.c_str());
        std::vector<float> one(5, static_cast<float>(rank));
        CHECK_OR_FAIL(
            braidAllReduce(one.data(), one.data(), 5, braidFloat32, braidSum, comm) == braidSuccess,
            "the call after the mismatch: %s", braidGetLastError(comm));
        for (float v : one) CHECK_OR_FAIL(v == want, "sum %g", v);
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Small calls are posted ahead of the ones before them (up to 16), large ones alone
// (local_board.h). Every rank batches its calls differently here: rank r groups them in chunks
// of 1 (no group), 40, 3, 8 or 17; the calls mix all-reduces, broadcasts (whose non-roots post
// nothing but place the call by the root's block), all-gathers and reduce-scatters (placed by
// n blocks), of sizes that go in the post's entry (<= 32 bytes), a slot (<= 4 KiB) or a large
// buffer. Element i of every input differs by i, so a misplaced offset shows. Three rounds of 40
// calls (the 16 entries wrap many times): every result is exact on every rank, nothing is
// written past a buffer's end, and no byte goes through the streams.
TEST_P(OneShot, RanksBatchingSmallCallsDifferentlyMeetBitExact) {
  const int n = GetParam();
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    constexpr size_t kCalls = 40;
    const size_t chunk = std::vector<size_t>{1, 40, 3, 8, 17}[static_cast<size_t>(rank) % 5];
    enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter };
    struct Call {
      Kind kind;
      int root;
      size_t count;  // per rank
    };
    std::vector<Call> calls;
    for (size_t k = 0; k < kCalls; ++k) {
      const Kind kind = k % 7 == 3   ? Kind::kBroadcast
                        : k % 7 == 5 ? Kind::kAllGather
                        : k % 7 == 6 ? Kind::kReduceScatter
                                     : Kind::kAllReduce;
      // Up to 8 floats travel in the post's entry, up to 1024 (4 KiB) in a slot, more in a
      // large buffer (a reduce-scatter posts n blocks).
      const size_t count = k % 5 == 4 ? 1500 + k : k % 5 == 1 ? 1 + k % 8 : 1 + (37 * k) % 1024;
      calls.push_back({kind, static_cast<int>(k) % nranks, count});
    }
    const size_t un = static_cast<size_t>(nranks);
    // Rank r's input element i of call k in round `round`.
    const auto in = [](int r, size_t k, int round, size_t i) {
      return static_cast<float>(r + static_cast<int>(k) + round) + 1000.0f * (i % 5);
    };
    uint64_t before = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    for (int round = 0; round < 3; ++round) {
      std::vector<std::vector<float>> send(kCalls), recv(kCalls);
      for (size_t k = 0; k < kCalls; ++k) {
        const Call& c = calls[k];
        const size_t nsend = c.kind == Kind::kReduceScatter ? c.count * un : c.count;
        const size_t nrecv = c.kind == Kind::kAllGather ? c.count * un : c.count;
        for (size_t i = 0; i < nsend; ++i) send[k].push_back(in(rank, k, round, i));
        recv[k].assign(nrecv + 1, -7.0f);
        recv[k][nrecv] = -99.0f;  // past the end
      }
      for (size_t k = 0; k < kCalls; ++k) {
        if (chunk > 1 && k % chunk == 0) CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "start");
        const Call& c = calls[k];
        float* r = recv[k].data();
        const float* x = send[k].data();
        braidResult_t rc = braidErrInternal;
        switch (c.kind) {
          case Kind::kAllReduce:
            rc = braidAllReduce(x, r, c.count, braidFloat32, braidSum, comm);
            break;
          case Kind::kBroadcast:
            rc = braidBroadcast(x, r, c.count, braidFloat32, c.root, comm);
            break;
          case Kind::kAllGather:
            rc = braidAllGather(x, r, c.count, braidFloat32, comm);
            break;
          case Kind::kReduceScatter:
            rc = braidReduceScatter(x, r, c.count, braidFloat32, braidSum, comm);
            break;
        }
        CHECK_OR_FAIL(rc == braidSuccess, "round %d call %zu: %s", round, k,
                      braidGetLastError(comm));
        if (chunk > 1 && (k % chunk == chunk - 1 || k == kCalls - 1))
          CHECK_OR_FAIL(braidGroupEnd() == braidSuccess, "round %d group ending at %zu: %s", round,
                        k, braidGetLastError(comm));
      }
      for (size_t k = 0; k < kCalls; ++k) {
        const Call& c = calls[k];
        const size_t nrecv = recv[k].size() - 1;
        for (size_t i = 0; i < nrecv; ++i) {
          float want = 0;
          switch (c.kind) {
            case Kind::kAllReduce:
              for (int p = 0; p < nranks; ++p) want += in(p, k, round, i);
              break;
            case Kind::kBroadcast:
              want = in(c.root, k, round, i);
              break;
            case Kind::kAllGather:
              want = in(static_cast<int>(i / c.count), k, round, i % c.count);
              break;
            case Kind::kReduceScatter:
              for (int p = 0; p < nranks; ++p)
                want += in(p, k, round, static_cast<size_t>(rank) * c.count + i);
              break;
          }
          CHECK_OR_FAIL(recv[k][i] == want, "round %d call %zu (kind %d) [%zu]: %g, want %g", round,
                        k, static_cast<int>(c.kind), i, recv[k][i], want);
        }
        CHECK_OR_FAIL(recv[k][nrecv] == -99.0f, "call %zu wrote past its end", k);
      }
    }
    CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "the board calls sent stream bytes");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A call that differs in size across the slot edge: rank 0 all-reduces 10 floats (a small slot,
// posted ahead with its group), the others 2000 (a large buffer, posted alone, after waiting for
// the peers to read two calls back). Even ranks group the five calls, odd ranks do not. Every
// rank fails that call with a mismatch naming both counts (not a timeout), completes the other
// four exactly, and the board stays in step for the next round; nothing goes through the
// streams.
TEST_P(OneShot, ACallPlacedDifferentlyByTheRanksFailsOnEveryRankAndTheRestComplete) {
  const int n = GetParam();
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    const bool grouped = rank % 2 == 0;
    uint64_t before = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    // Four rounds of five calls: the 16 entries wrap while calls are placed differently.
    for (int round = 0; round < 4; ++round) {
      const size_t counts[5] = {3, 5, rank == 0 ? size_t{10} : size_t{2000}, 7, 1200};
      // Every call of every round carries its own values: a read of the wrong post shows.
      const auto value = [&](int r, size_t k) {
        return static_cast<float>(r + 10 * k + 100 * round);
      };
      std::vector<std::vector<float>> bufs;
      for (size_t k = 0; k < 5; ++k) bufs.emplace_back(counts[k], value(rank, k));
      std::vector<braidResult_t> rcs;
      if (grouped) CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "start");
      for (size_t k = 0; k < 5; ++k)
        rcs.push_back(braidAllReduce(bufs[k].data(), bufs[k].data(), counts[k], braidFloat32,
                                     braidSum, comm));
      const braidResult_t group_rc = grouped ? braidGroupEnd() : rcs[2];
      const std::string msg = braidGetLastError(comm);
      CHECK_OR_FAIL(group_rc == braidErrInvalidUsage &&
                        msg.find("call mismatch") != std::string::npos &&
                        msg.find(rank == 0 ? "count=2000" : "count=10") != std::string::npos,
                    "round %d: rc=%d: %s", round, group_rc, msg.c_str());
      for (size_t k = 0; k < 5; ++k) {
        if (!grouped)
          CHECK_OR_FAIL((rcs[k] == braidSuccess) == (k != 2), "round %d call %zu: rc %d", round, k,
                        rcs[k]);
        float want = 0;
        for (int p = 0; p < nranks; ++p) want += value(p, k);
        const float expect = k == 2 ? value(rank, k) : want;
        for (float v : bufs[k])
          CHECK_OR_FAIL(v == expect, "round %d call %zu: %g, want %g", round, k, v, expect);
      }
    }
    CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "the board calls sent stream bytes");
    braidResult_t async = braidSuccess;
    CHECK_OR_FAIL(braidCommGetAsyncError(comm, &async) == braidSuccess && async == braidSuccess,
                  "async error %d after clean mismatches", async);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Board calls between non-blocking engine operations in flight, back to back, sizes and kinds
// mixed, with more ranks than cores: all complete, bit-exact.
TEST_P(OneShot, BoardCallsInterleaveWithOperationsInFlight) {
  const int n = GetParam();
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    const size_t big = 50000;  // 200 KB: the engine's
    std::vector<float> big_in(big), big_out(big);
    for (size_t i = 0; i < big; ++i) big_in[i] = static_cast<float>((i + rank) % 100);
    for (int round = 0; round < 30; ++round) {
      braidRequest_t req = nullptr;
      CHECK_OR_FAIL(braidIallReduce(big_in.data(), big_out.data(), big, braidFloat32, braidSum,
                                    comm, &req) == braidSuccess,
                    "iallreduce");
      for (int k = 0; k < 20; ++k) {
        const size_t count = 1 + static_cast<size_t>((round * 20 + k) % 700);
        std::vector<int32_t> v(count), g(count * nranks);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(rank * 1000 + i + k);
        CHECK_OR_FAIL(
            braidAllReduce(v.data(), v.data(), count, braidInt32, braidSum, comm) == braidSuccess,
            "small allreduce: %s", braidGetLastError(comm));
        for (size_t i = 0; i < count; ++i) {
          const int64_t want = 1000LL * nranks * (nranks - 1) / 2 +
                               static_cast<int64_t>(nranks) * static_cast<int64_t>(i + k);
          CHECK_OR_FAIL(v[i] == want, "round %d call %d element %zu: %d, want %lld", round, k, i,
                        v[i], static_cast<long long>(want));
        }
        std::vector<int32_t> mine(count, rank + k);
        CHECK_OR_FAIL(
            braidAllGather(mine.data(), g.data(), count, braidInt32, comm) == braidSuccess,
            "small allgather");
        for (int q = 0; q < nranks; ++q)
          CHECK_OR_FAIL(g[q * count] == q + k && g[(q + 1) * count - 1] == q + k,
                        "allgather block %d", q);
      }
      CHECK_OR_FAIL(braidWait(&req, -1) == braidSuccess, "wait: %s", braidGetLastError(comm));
      for (size_t i = 0; i < big; i += 997) {
        float want = 0;
        for (int q = 0; q < nranks; ++q) want += static_cast<float>((i + q) % 100);
        CHECK_OR_FAIL(big_out[i] == want, "big element %zu", i);
      }
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

class OneShotFailure : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, OneShotFailure, ::testing::Values(4, 8),
                         [](const auto& info) { return RanksName(info.param); });

// A rank SIGKILLs itself instead of making a board call: every survivor, all waiting on the
// board, fails within 1 s naming it (rank, pid, "died"), and so does its next call.
TEST_P(OneShotFailure, KilledRankIsNamedByEverySurvivorWithinASecond) {
  const int n = GetParam();
  const int victim = n / 2;
  PidPipe victim_pid;
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<float> buf(64, 1.0f);
    CHECK_OR_FAIL(
        braidAllReduce(buf.data(), buf.data(), 64, braidFloat32, braidSum, comm) == braidSuccess,
        "first call");
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
      raise(SIGKILL);
    }
    const pid_t vpid = victim_pid.take();
    CHECK_OR_FAIL(vpid > 0, "victim pid");
    const auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(buf.data(), buf.data(), 64, braidFloat32, braidSum, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    const std::string want =
        "rank " + std::to_string(victim) + " (host ";  // then host, pid and "died"
    CHECK_OR_FAIL(rc == braidErrRemote && dt < 1.0 && msg.find(want) != std::string::npos &&
                      msg.find("pid " + std::to_string(vpid) + ") died") != std::string::npos,
                  "rc=%d after %.2fs: %s", rc, dt, msg.c_str());
    const auto t1 = Clock::now();
    rc = braidAllReduce(buf.data(), buf.data(), 16, braidFloat32, braidSum, comm);
    CHECK_OR_FAIL(rc != braidSuccess && SecondsSince(t1) < 1.0 &&
                      std::string(braidGetLastError(comm)).find(") died") != std::string::npos,
                  "the next call: rc=%d: %s", rc, braidGetLastError(comm));
    return 0;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(out[r].exit_code, r == victim ? 128 + SIGKILL : 0) << DescribeOutcomes(out);
}

// A rank dies in the middle of a call in rounds (an all-reduce two-shot, or an all-gather): its
// send buffer's fourth page cannot be read, so it crashes copying in the round that starts there
// (rounds of a page: BRAID_ONESHOT_BYTES=4096), after the rounds before completed on every rank.
// Every survivor, waiting for that round's post, fails within 1 s naming it, holds the first
// rounds' results, and its next call fails at once.
void CheckRankDyingInALaterRound(int n, bool gather) {
  const int victim = n / 2;
  PidPipe victim_pid;
  std::vector<std::pair<std::string, std::string>> env = {{"BRAID_ONESHOT_BYTES", "4096"}};
  if (gather) {
    env.emplace_back("BRAID_ALGO", "allgather:oneshot");
  } else {
    env.emplace_back("BRAID_BOARD_TWO_SHOT", "1");
    env.emplace_back("BRAID_ALGO", "allreduce:oneshot");
  }
  auto out = RunJob(Options(n, env), [&](braidComm_t comm, int rank, int nranks,
                                         const braidUniqueId&) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t count = 16 * page / sizeof(float);
    auto* send = static_cast<float*>(mmap(nullptr, count * sizeof(float), PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    CHECK_OR_FAIL(send != MAP_FAILED, "mmap");
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(gather ? rank + 1 : 1);
    std::vector<float> recv(gather ? count * nranks : count, 0.0f);
    const auto call = [&] {
      return gather ? braidAllGather(send, recv.data(), count, braidFloat32, comm)
                    : braidAllReduce(send, recv.data(), count, braidFloat32, braidSum, comm);
    };
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
      CHECK_OR_FAIL(mprotect(reinterpret_cast<char*>(send) + 3 * page, page, PROT_NONE) == 0,
                    "mprotect");
      call();
      return 6;  // not reached
    }
    const pid_t vpid = victim_pid.take();
    CHECK_OR_FAIL(vpid > 0, "victim pid");
    // The victim calls right after it publishes its pid and dies a few rounds in: the
    // survivors' call must end within 1 s of its start.
    const auto t0 = Clock::now();
    braidResult_t rc = call();
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    CHECK_OR_FAIL(rc == braidErrRemote && dt < 1.0 &&
                      msg.find("rank " + std::to_string(victim) + " (host ") != std::string::npos &&
                      msg.find("pid " + std::to_string(vpid) + ") died") != std::string::npos,
                  "rc=%d after %.2fs: %s", rc, dt, msg.c_str());
    // The first rounds completed: their pieces hold the sum, or every rank's block.
    for (size_t i = 0; i < 3 * page / sizeof(float); ++i)
      for (int r = 0; r < (gather ? nranks : 1); ++r) {
        const float want = static_cast<float>(gather ? r + 1 : nranks);
        CHECK_OR_FAIL(recv[r * count + i] == want, "block %d element %zu of the first rounds: %g",
                      r, i, recv[r * count + i]);
      }
    const auto t1 = Clock::now();
    rc = braidAllReduce(send, send, 16, braidFloat32, braidSum, comm);
    CHECK_OR_FAIL(rc != braidSuccess && SecondsSince(t1) < 1.0 &&
                      std::string(braidGetLastError(comm)).find(") died") != std::string::npos,
                  "the next call: rc=%d: %s", rc, braidGetLastError(comm));
    munmap(send, count * sizeof(float));
    return 0;
  });
  for (int r = 0; r < n; ++r) {
    if (r == victim)
      EXPECT_NE(out[r].exit_code, 0) << DescribeOutcomes(out);  // SIGSEGV, or ASan's report
    else
      EXPECT_EQ(out[r].exit_code, 0) << DescribeOutcomes(out);
  }
}

TEST_P(OneShotFailure, RankDyingInALaterRoundIsNamedByEverySurvivorWithinASecond) {
  CheckRankDyingInALaterRound(GetParam(), /*gather=*/false);
}

TEST_P(OneShotFailure, RankDyingInALaterRoundOfAnAllGatherIsNamedByEverySurvivor) {
  CheckRankDyingInALaterRound(GetParam(), /*gather=*/true);
}

// A rank stops (SIGSTOP) instead of making a board call: every survivor times out within
// BRAID_TIMEOUT + 1 s naming it as stopped.
TEST_P(OneShotFailure, StoppedRankIsNamedByEverySurvivor) {
  const int n = GetParam();
  const int victim = n / 2;
  constexpr int kTimeoutS = 2;
  PidPipe victim_pid;
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  auto opt = Options(n);
  opt.env.push_back({"BRAID_TIMEOUT", std::to_string(kTimeoutS)});
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<float> buf(64, 1.0f);
    CHECK_OR_FAIL(
        braidAllReduce(buf.data(), buf.data(), 64, braidFloat32, braidSum, comm) == braidSuccess,
        "first call");
    if (rank == victim) {
      if (!victim_pid.publish(nranks - 1)) return 5;
      raise(SIGSTOP);
      return 0;
    }
    const pid_t vpid = victim_pid.take();
    CHECK_OR_FAIL(vpid > 0, "victim pid");
    const auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(buf.data(), buf.data(), 64, braidFloat32, braidSum, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    const std::string want = "pid " + std::to_string(vpid) + ") stopped responding for " +
                             std::to_string(kTimeoutS) + " s";
    int code = 0;
    if (rc != braidErrTimeout || dt > kTimeoutS + 1.0 || msg.find(want) == std::string::npos) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.2fs: %s\n  (want: %s)\n", rank, rc, dt,
                   msg.c_str(), want.c_str());
      code = 1;
    }
    // The victim goes once every survivor has its error.
    const int first = victim == 0 ? 1 : 0;
    char c = 1;
    if (rank != first) {
      if (write(done[1], &c, 1) != 1) return 7;
    } else {
      for (int k = 0; k < nranks - 2; ++k)
        if (read(done[0], &c, 1) != 1) return 8;
      kill(vpid, SIGKILL);
    }
    return code;
  });
  close(done[0]);
  close(done[1]);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(out[r].exit_code, r == victim ? 128 + SIGKILL : 0) << DescribeOutcomes(out);
}

// Rank 0 revokes the communicator while the others wait on the board for its post: they fail
// within 1 s naming the revoke. Rank 0 stays until they have (its exit must not be what they
// see).
TEST_P(OneShotFailure, RevokeWakesEveryRankWaitingOnTheBoard) {
  const int n = GetParam();
  int ready[2], seen[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(seen), 0);
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<float> buf(64, 1.0f);
    CHECK_OR_FAIL(
        braidAllReduce(buf.data(), buf.data(), 64, braidFloat32, braidSum, comm) == braidSuccess,
        "first call");
    char c = 1;
    if (rank == 0) {
      // Each waiter says it is about to call; the revoke then lands on a waiting (or arriving)
      // call either way.
      for (int k = 0; k < nranks - 1; ++k)
        if (read(ready[0], &c, 1) != 1) return 8;
      CHECK_OR_FAIL(braidCommRevoke(comm) == braidSuccess, "revoke");
      for (int k = 0; k < nranks - 1; ++k)
        if (read(seen[0], &c, 1) != 1) return 9;
      return 0;
    }
    if (write(ready[1], &c, 1) != 1) return 7;
    const auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(buf.data(), buf.data(), 64, braidFloat32, braidSum, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    if (write(seen[1], &c, 1) != 1) return 10;
    CHECK_OR_FAIL(rc != braidSuccess && dt < 1.0 && msg.find("rank 0") != std::string::npos &&
                      msg.find("revoked the communicator") != std::string::npos,
                  "rc=%d after %.2fs: %s", rc, dt, msg.c_str());
    return 0;
  });
  for (int fd : {ready[0], ready[1], seen[0], seen[1]}) close(fd);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The forms of one call may differ between ranks: blocking on some, non-blocking (the engine
// runs the board's schedule) or inside a group on others, for every size from the board's
// entries to a two-shot call. Every rank holds the exact sums, and no byte goes through the
// streams: every form ran the same one-sided schedule.
class OneShotForms : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, OneShotForms, ::testing::Values(2, 4),
                         [](const auto& info) { return RanksName(info.param); });

TEST_P(OneShotForms, BlockingNonBlockingAndGroupedFormsMeet) {
  auto out = RunJob(
      Options(GetParam()), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        uint64_t before = 0;
        CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
        const size_t counts[] = {1, 8, 100, 1000, 4000};
        for (int round = 0; round < 3 * nranks; ++round) {
          const int form = (rank + round) % 3;  // 0 blocking, 1 non-blocking, 2 grouped
          std::vector<std::vector<float>> ins, outs;
          std::vector<braidRequest_t> reqs;
          if (form == 2) CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "group start");
          for (size_t count : counts) {
            ins.emplace_back(count);
            outs.emplace_back(count, -1.0f);
            for (size_t i = 0; i < count; ++i)
              ins.back()[i] = static_cast<float>((rank + 1) * (i % 13) + round);
            braidResult_t rc;
            if (form == 1) {
              reqs.push_back(nullptr);
              rc = braidIallReduce(ins.back().data(), outs.back().data(), count, braidFloat32,
                                   braidSum, comm, &reqs.back());
            } else {
              rc = braidAllReduce(ins.back().data(), outs.back().data(), count, braidFloat32,
                                  braidSum, comm);
            }
            CHECK_OR_FAIL(rc == braidSuccess, "round %d form %d count %zu: %s", round, form, count,
                          braidGetLastError(comm));
          }
          if (form == 2) CHECK_OR_FAIL(braidGroupEnd() == braidSuccess, "group end");
          for (auto& r : reqs) CHECK_OR_FAIL(braidWait(&r, -1) == braidSuccess, "wait");
          const float ranks_sum = static_cast<float>(nranks * (nranks + 1) / 2);
          for (size_t k = 0; k < outs.size(); ++k)
            for (size_t i = 0; i < outs[k].size(); ++i) {
              const float want =
                  ranks_sum * static_cast<float>(i % 13) + static_cast<float>(nranks * round);
              CHECK_OR_FAIL(outs[k][i] == want, "round %d form %d count %zu [%zu]: %g, want %g",
                            round, form, outs[k].size(), i, outs[k][i], want);
            }
        }
        CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "board calls sent stream bytes");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A non-blocking board call its caller never waits for, left past its last post (it only reads
// what is left), waits for the caller's next call into the library: the engine's thread is not
// woken for it. The destroy is such a call and completes it (it waited out BRAID_TIMEOUT and
// failed before), and the request, waited for after the destroy, holds the exact sum.
TEST(OneShotDestroy, CompletesANonBlockingCallNobodyWaitedFor) {
  int to1[2], to0[2];
  ASSERT_EQ(pipe(to1), 0);
  ASSERT_EQ(pipe(to0), 0);
  JobOptions opt;
  opt.nranks = 2;
  opt.init = false;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "30"}};
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, nranks, id, rank) == braidSuccess, "init");
    float a[7], b[7] = {};
    for (int i = 0; i < 7; ++i) a[i] = static_cast<float>(rank * 10 + i);
    // Calls of the shape, waited for (the engine keeps a spare for it).
    for (int k = 0; k < 4; ++k) {
      braidRequest_t req;
      CHECK_OR_FAIL(braidIallReduce(a, b, 7, braidFloat32, braidSum, comm, &req) == braidSuccess &&
                        braidWait(&req, -1) == braidSuccess,
                    "call %d", k);
    }
    std::fill(b, b + 7, 0.0f);
    braidRequest_t req = nullptr;
    char c = 1;
    if (rank == 0) {
      CHECK_OR_FAIL(braidIallReduce(a, b, 7, braidFloat32, braidSum, comm, &req) == braidSuccess,
                    "the call left alone");
      // Posted; rank 1 calls now, and its call completes: this rank's only reads are left.
      CHECK_OR_FAIL(write(to1[1], &c, 1) == 1 && read(to0[0], &c, 1) == 1, "gate");
    } else {
      CHECK_OR_FAIL(read(to1[0], &c, 1) == 1, "gate");
      CHECK_OR_FAIL(braidIallReduce(a, b, 7, braidFloat32, braidSum, comm, &req) == braidSuccess &&
                        braidWait(&req, -1) == braidSuccess,
                    "rank 1's call");
      CHECK_OR_FAIL(write(to0[1], &c, 1) == 1, "gate");
    }
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_OR_FAIL(s < 10, "destroy took %.1f s", s);
    if (req) CHECK_OR_FAIL(braidWait(&req, -1) == braidSuccess, "the request after the destroy");
    for (int i = 0; i < 7; ++i)
      CHECK_OR_FAIL(b[i] == static_cast<float>(i + 10 + i), "[%d] %g", i, b[i]);
    return 0;
  });
  for (int fd : {to1[0], to1[1], to0[0], to0[1]}) close(fd);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Repeated non-blocking calls of one shape (how the perf binaries, the sharding layer's prefetch
// and torch's async work call): the engine takes a retired operation that ran the same plan as
// it is (ActiveOp::rearm) and sets only the call's buffers, number and operator. Checked: up to
// eight calls in flight on distinct buffers, the shape changing now and then (another count, an
// AVG, a pre-multiplied sum whose scalar changes every call while the plan stays), a call that
// differs between ranks in the middle (every rank fails it, the operation that ran it is not
// taken as it is), each result bit-exact against the sum computed here, no stream byte.
TEST_P(OneShotForms, RepeatedNonBlockingCallsOfOneShapeAreBitExact) {
  auto out = RunJob(Options(GetParam()), [&](braidComm_t comm, int rank, int nranks,
                                             const braidUniqueId&) {
    uint64_t before = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    constexpr int kInFlight = 8;
    struct Call {
      std::vector<float> in, out;
      braidRequest_t req = nullptr;
      braidRedOp_t op = braidSum;
      bool premul = false;
      bool avg = false;
      int round = 0;
    };
    std::vector<Call> calls(kInFlight);
    // What rank r contributes to element i of call `round`, and its scalar when the call is
    // a pre-multiplied sum: small integers, so that every product and sum, and the AVG
    // division, are the same in any order.
    const auto value = [](int r, size_t i, int round) {
      return static_cast<float>((r + 1) * static_cast<int>(i % 7) + round % 5);
    };
    const auto scalar = [](int r, int round) { return static_cast<float>(1 + (r + round) % 3); };
    // 0 when call `c` completed with the exact result (then its slot is free), else 1.
    const auto finish = [&](Call& c) -> int {
      CHECK_OR_FAIL(braidWait(&c.req, -1) == braidSuccess, "round %d: %s", c.round,
                    braidGetLastError(comm));
      if (c.premul) CHECK_OR_FAIL(braidRedOpDestroy(c.op, comm) == braidSuccess, "premul destroy");
      for (size_t i = 0; i < c.out.size(); ++i) {
        float sum = 0;
        for (int r = 0; r < nranks; ++r)
          sum += (c.premul ? scalar(r, c.round) : 1.0f) * value(r, i, c.round);
        if (c.avg) sum /= static_cast<float>(nranks);
        CHECK_OR_FAIL(c.out[i] == sum, "round %d count %zu [%zu]: %g, want %g", c.round,
                      c.out.size(), i, c.out[i], sum);
      }
      return 0;
    };
    for (int round = 0; round < 400; ++round) {
      Call& c = calls[static_cast<size_t>(round % kInFlight)];
      if (c.req) CHECK_OR_FAIL(finish(c) == 0, "call of round %d", c.round);
      // Runs of 25 calls of one shape: sums, pre-multiplied sums (the scalar this rank's
      // and this round's: the plan stays, the scalar changes), sums, AVGs (of a power of two
      // of ranks: exact); every 50th call another count, every 9th a pre-multiplied sum.
      const size_t count = round % 50 == 49 ? 33 : 16;
      c.round = round;
      c.premul = (round / 25) % 4 == 1 || round % 9 == 4;
      c.avg = !c.premul && (round / 25) % 4 == 3;
      c.op = c.avg ? braidAvg : braidSum;
      if (c.premul) {
        const float k = scalar(rank, round);
        CHECK_OR_FAIL(braidRedOpCreatePreMulSum(&c.op, &k, braidFloat32, comm) == braidSuccess,
                      "premul: %s", braidGetLastError(comm));
      }
      c.in.assign(count, 0);
      c.out.assign(count, -1.0f);
      for (size_t i = 0; i < count; ++i) c.in[i] = value(rank, i, round);
      CHECK_OR_FAIL(braidIallReduce(c.in.data(), c.out.data(), count, braidFloat32, c.op, comm,
                                    &c.req) == braidSuccess,
                    "round %d: %s", round, braidGetLastError(comm));
      if (round == 200) {
        // A call that differs (rank 0's count): every rank fails it, nothing is written, and
        // the calls after it run.
        for (Call& k : calls)
          if (k.req) CHECK_OR_FAIL(finish(k) == 0, "call of round %d", k.round);
        std::vector<float> in(17, 1.0f), out(17, -1.0f);
        braidRequest_t req = nullptr;
        CHECK_OR_FAIL(braidIallReduce(in.data(), out.data(), rank == 0 ? 17 : 16, braidFloat32,
                                      braidSum, comm, &req) == braidSuccess,
                      "mismatch issue: %s", braidGetLastError(comm));
        CHECK_OR_FAIL(braidWait(&req, -1) == braidErrInvalidUsage, "the mismatch did not fail");
        for (float v : out) CHECK_OR_FAIL(v == -1.0f, "a failed call wrote its output");
      }
    }
    for (Call& c : calls)
      if (c.req) CHECK_OR_FAIL(finish(c) == 0, "call of round %d", c.round);
    CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "board calls sent stream bytes");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A small non-blocking call whose peers have all posted completes before it returns, on the
// caller's thread and with no operation or request of its own (Engine::startCall): the last rank
// calls once the others have posted (a pipe says so), and its output holds the exact sum when
// braidIallReduce returns. Two such requests, kept and waited for (braidWait, braidTest) in
// reverse order, both report success (such calls share one completed request: requests are tokens,
// not identities). A call that differs (the last rank's count) fails there too: braidIallReduce
// succeeds, its output is untouched, and braidWait reports the mismatch on every rank, naming both
// calls; the next matched call runs.
TEST_P(OneShotForms, ACallWhosePeersPostedCompletesBeforeItReturns) {
  const int n = GetParam();
  int posted[2];
  ASSERT_EQ(pipe(posted), 0);
  auto out = RunJob(Options(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    const bool last = rank == nranks - 1;
    std::vector<float> in(16), res(16);
    const auto fill = [&](int round) {
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((rank + 1) * i + round);
      std::fill(res.begin(), res.end(), -1.0f);
    };
    const auto exact = [&](int round) {
      for (size_t i = 0; i < res.size(); ++i) {
        float want = 0;
        for (int r = 0; r < nranks; ++r) want += static_cast<float>((r + 1) * i + round);
        if (res[i] != want) return false;
      }
      return true;
    };
    // Calls of the shape, waited for: the engine keeps a spare for it.
    for (int k = 0; k < 4; ++k) {
      fill(k);
      braidRequest_t req = nullptr;
      CHECK_OR_FAIL(braidIallReduce(in.data(), res.data(), 16, braidFloat32, braidSum, comm,
                                    &req) == braidSuccess &&
                        braidWait(&req, -1) == braidSuccess && exact(k),
                    "warm-up call %d: %s", k, braidGetLastError(comm));
    }
    char c = 1;
    braidRequest_t kept[2] = {nullptr, nullptr};
    for (int round = 4; round < 7; ++round) {
      const bool differs = round == 6;  // the last rank's count is 17 there
      fill(round);
      std::vector<float> big_in(17, 1.0f), big(17, -1.0f);
      braidRequest_t req = nullptr;
      if (!last) {
        CHECK_OR_FAIL(braidIallReduce(in.data(), res.data(), 16, braidFloat32, braidSum, comm,
                                      &req) == braidSuccess,
                      "round %d: %s", round, braidGetLastError(comm));
        CHECK_OR_FAIL(write(posted[1], &c, 1) == 1, "gate");
        const braidResult_t rc = braidWait(&req, -1);
        if (differs) {
          CHECK_OR_FAIL(rc == braidErrInvalidUsage, "round %d: the mismatch gave %d", round, rc);
          CHECK_OR_FAIL(std::count(res.begin(), res.end(), -1.0f) == 16, "a failed call wrote");
        } else {
          CHECK_OR_FAIL(rc == braidSuccess && exact(round), "round %d: %s", round,
                        braidGetLastError(comm));
        }
        continue;
      }
      for (int k = 0; k < nranks - 1; ++k) CHECK_OR_FAIL(read(posted[0], &c, 1) == 1, "gate");
      if (differs) {
        CHECK_OR_FAIL(braidIallReduce(big_in.data(), big.data(), 17, braidFloat32, braidSum, comm,
                                      &req) == braidSuccess,
                      "the call that differs: %s", braidGetLastError(comm));
        CHECK_OR_FAIL(std::count(big.begin(), big.end(), -1.0f) == 17, "a failed call wrote");
        CHECK_OR_FAIL(braidWait(&req, -1) == braidErrInvalidUsage, "the mismatch did not fail");
        const std::string msg = braidGetLastError(comm);
        CHECK_OR_FAIL(
            msg.find("count=17") != std::string::npos && msg.find("count=16") != std::string::npos,
            "the error names both calls: %s", msg.c_str());
        continue;
      }
      CHECK_OR_FAIL(braidIallReduce(in.data(), res.data(), 16, braidFloat32, braidSum, comm,
                                    &req) == braidSuccess,
                    "round %d: %s", round, braidGetLastError(comm));
      CHECK_OR_FAIL(exact(round), "round %d: the output was not complete at the return", round);
      kept[round - 4] = req;  // waited for below, the later first
    }
    if (last) {
      // No request of their own: both are the one completed request.
      CHECK_OR_FAIL(kept[0] == kept[1], "the calls made requests (an operation) of their own");
      CHECK_OR_FAIL(braidWait(&kept[1], -1) == braidSuccess && kept[1] == nullptr, "kept 1");
      int done = 0;
      CHECK_OR_FAIL(braidTest(&kept[0], &done) == braidSuccess && done == 1 && kept[0] == nullptr,
                    "kept 0");
    }
    // The communicator goes on.
    fill(7);
    CHECK_OR_FAIL(
        braidAllReduce(in.data(), res.data(), 16, braidFloat32, braidSum, comm) == braidSuccess &&
            exact(7),
        "the call after the mismatch: %s", braidGetLastError(comm));
    return 0;
  });
  close(posted[0]);
  close(posted[1]);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// --------------------------------------------------------------------------------- parked calls

// For the two-rank jobs below whose ranks wait on each other through pipes: a rank whose check
// fails writes a byte to the pipe its peer reads, so that the peer goes on (and fails at its next
// call, or ends) instead of blocking until the job's wall-clock guard.
template <typename Body>
int ReleasingPeerOnFailure(int peer_reads, Body&& body) {
  const int failed = body();
  if (failed) {
    const unsigned char stop = 0;
    (void)!write(peer_reads, &stop, 1);
  }
  return failed;
}

// A small non-blocking call that must wait for its peer and has nothing left to post stays a board
// call ("parked", Engine::parkEagerRun) until its wait finishes it as a blocking call would, or
// something else takes the engine's loop and adopts it as an operation. Rank 0's call here is
// always parked: rank 1 calls only once rank 0's call has returned (a pipe). Each case takes one
// way out of the parked state and checks the result bit-exact on both ranks.
enum class ParkedExit {
  kWaitWithATimeout,   // braidWait(req, 0) while rank 1 has not called, then with a time limit
  kBlockingCallAfter,  // a blocking call behind it, then its wait
  kNonBlockingAfter,   // a second non-blocking call behind it, both waited for in reverse order
  kTestUntilDone,      // braidTest until done
  kDestroyUnwaited,    // never waited for: the destroy completes it
};

void CheckParkedCall(ParkedExit exit) {
  int called[2], back[2];
  ASSERT_EQ(pipe(called), 0);
  ASSERT_EQ(pipe(back), 0);
  JobOptions opt = Options(2);
  opt.init = false;
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, nranks, id, rank) == braidSuccess, "init");
    float a[16], b[16], x[16], y[16];
    const auto fill = [&](int round) {
      for (int i = 0; i < 16; ++i) {
        a[i] = static_cast<float>((rank + 1) * i + round);
        x[i] = static_cast<float>((rank + 1) * i + 100 + round);
      }
      std::fill(b, b + 16, -1.0f);
      std::fill(y, y + 16, -1.0f);
    };
    const auto exact = [](const float* out, int add) {
      for (int i = 0; i < 16; ++i)
        if (out[i] != static_cast<float>(3 * i + 2 * add)) return false;
      return true;
    };
    // Calls of the shape, waited for: the engine keeps a spare that can take the next one.
    for (int k = 0; k < 4; ++k) {
      fill(k);
      braidRequest_t req = nullptr;
      CHECK_OR_FAIL(braidIallReduce(a, b, 16, braidFloat32, braidSum, comm, &req) == braidSuccess &&
                        braidWait(&req, -1) == braidSuccess && exact(b, k),
                    "warm-up call %d: %s", k, braidGetLastError(comm));
    }
    fill(4);
    char c = 1;
    braidRequest_t req = nullptr, second = nullptr;
    if (rank == 1) {
      if (const int failed = ReleasingPeerOnFailure(back[1], [&]() -> int {
            CHECK_OR_FAIL(read(called[0], &c, 1) == 1, "gate");
            CHECK_OR_FAIL(braidAllReduce(a, b, 16, braidFloat32, braidSum, comm) == braidSuccess &&
                              exact(b, 4),
                          "rank 1's first call: %s", braidGetLastError(comm));
            if (exit == ParkedExit::kBlockingCallAfter || exit == ParkedExit::kNonBlockingAfter)
              CHECK_OR_FAIL(
                  braidAllReduce(x, y, 16, braidFloat32, braidSum, comm) == braidSuccess &&
                      exact(y, 104),
                  "rank 1's second call: %s", braidGetLastError(comm));
            CHECK_OR_FAIL(write(back[1], &c, 1) == 1, "gate");
            return 0;
          }))
        return failed;
    } else {
      if (const int failed = ReleasingPeerOnFailure(called[1], [&]() -> int {
            CHECK_OR_FAIL(
                braidIallReduce(a, b, 16, braidFloat32, braidSum, comm, &req) == braidSuccess,
                "rank 0's call: %s", braidGetLastError(comm));
            CHECK_OR_FAIL(req != nullptr && std::count(b, b + 16, -1.0f) == 16,
                          "the call completed before rank 1 called");
            switch (exit) {
              case ParkedExit::kWaitWithATimeout: {
                const braidResult_t rc = braidWait(&req, 0);
                CHECK_OR_FAIL(rc == braidErrTimeout && req != nullptr,
                              "a wait with no time left: %d %s", rc, braidGetLastError(comm));
                CHECK_OR_FAIL(write(called[1], &c, 1) == 1, "gate");
                CHECK_OR_FAIL(braidWait(&req, 20000) == braidSuccess && exact(b, 4), "the wait: %s",
                              braidGetLastError(comm));
                break;
              }
              case ParkedExit::kBlockingCallAfter:
                CHECK_OR_FAIL(write(called[1], &c, 1) == 1, "gate");
                CHECK_OR_FAIL(
                    braidAllReduce(x, y, 16, braidFloat32, braidSum, comm) == braidSuccess &&
                        exact(y, 104),
                    "the blocking call behind it: %s", braidGetLastError(comm));
                CHECK_OR_FAIL(braidWait(&req, -1) == braidSuccess && exact(b, 4), "the wait: %s",
                              braidGetLastError(comm));
                break;
              case ParkedExit::kNonBlockingAfter:
                CHECK_OR_FAIL(braidIallReduce(x, y, 16, braidFloat32, braidSum, comm, &second) ==
                                  braidSuccess,
                              "the call behind it: %s", braidGetLastError(comm));
                CHECK_OR_FAIL(write(called[1], &c, 1) == 1, "gate");
                CHECK_OR_FAIL(braidWait(&second, -1) == braidSuccess && exact(y, 104),
                              "the second wait: %s", braidGetLastError(comm));
                CHECK_OR_FAIL(braidWait(&req, -1) == braidSuccess && exact(b, 4), "the wait: %s",
                              braidGetLastError(comm));
                break;
              case ParkedExit::kTestUntilDone: {
                CHECK_OR_FAIL(write(called[1], &c, 1) == 1, "gate");
                int done = 0;
                while (!done)  // (the job's wall-clock guard ends a hang)
                  CHECK_OR_FAIL(braidTest(&req, &done) == braidSuccess, "test: %s",
                                braidGetLastError(comm));
                CHECK_OR_FAIL(req == nullptr && exact(b, 4), "the tested call");
                break;
              }
              case ParkedExit::kDestroyUnwaited:
                CHECK_OR_FAIL(write(called[1], &c, 1) == 1, "gate");
                break;
            }
            CHECK_OR_FAIL(read(back[0], &c, 1) == 1, "gate");
            return 0;
          }))
        return failed;
    }
    if (exit != ParkedExit::kDestroyUnwaited) {
      // The communicator goes on, with the small calls' fast path.
      fill(5);
      CHECK_OR_FAIL(
          braidAllReduce(a, b, 16, braidFloat32, braidSum, comm) == braidSuccess && exact(b, 5),
          "the call after: %s", braidGetLastError(comm));
    }
    const auto t0 = Clock::now();
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy: %s", braidGetLastError(comm));
    CHECK_OR_FAIL(SecondsSince(t0) < 10, "destroy took %.1f s", SecondsSince(t0));
    if (req) {
      CHECK_OR_FAIL(braidWait(&req, -1) == braidSuccess && exact(b, 4),
                    "the request after the destroy");
    }
    return 0;
  });
  for (int fd : {called[0], called[1], back[0], back[1]}) close(fd);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(ParkedCall, AWaitWithATimeLimitReturnsThenCompletesIt) {
  CheckParkedCall(ParkedExit::kWaitWithATimeout);
}

TEST(ParkedCall, ABlockingCallBehindItRunsAfterIt) {
  CheckParkedCall(ParkedExit::kBlockingCallAfter);
}

TEST(ParkedCall, ANonBlockingCallBehindItGoesAfterIt) {
  CheckParkedCall(ParkedExit::kNonBlockingAfter);
}

TEST(ParkedCall, BraidTestDrivesIt) {
  CheckParkedCall(ParkedExit::kTestUntilDone);
}

TEST(ParkedCall, TheDestroyCompletesItUnwaited) {
  CheckParkedCall(ParkedExit::kDestroyUnwaited);
}

// Calls in flight behind each other park behind each other (Engine::parkEagerRun): each stays
// the board call it is, in order, and leaves that state one way or another. Rank 1 is held back
// by a pipe: for each byte from rank 0 it makes (byte & 31) blocking calls of 16 floats (of 16
// and 8 by turns when the byte has bit 32), then one of 8 floats when it has bit 64, and answers.
// Rank 0 issues kChain calls of 16 floats (round 1 leaves the engine a spare for each: its calls go
// on as operations) and reads braidCommDebugState: the report lists them all as parked board calls.
// Call v's inputs are (rank + 1) * i + 10 * v on both ranks, so every result is checked bit-exact.
enum class ChainExit {
  kWaitInOrder,       // waited for oldest first
  kWaitNewestFirst,   // the newest waited for first finishes the others, in order
  kTestTheMiddle,     // braidTest on the second call adopts them all
  kOtherShapeBehind,  // a call of another shape behind them: they go on as operations, first
  kBlockingBehind,    // a blocking call behind them runs after them
  kDestroyUnwaited,   // never waited for: the destroy completes them
  kTwoShapesByTurns,  // calls of 16 and 8 floats by turns park too (a spare of each shape)
  kFinishedBehind,    // a call behind them that finishes at once completes after them
};

void CheckParkedChain(ChainExit exit) {
  constexpr int kChain = 4;
  int called[2], back[2];
  ASSERT_EQ(pipe(called), 0);
  ASSERT_EQ(pipe(back), 0);
  JobOptions opt = Options(2);
  opt.init = false;
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, nranks, id, rank) == braidSuccess, "init");
    float in[kChain + 1][16], res[kChain + 1][16];
    int value[kChain + 1] = {}, counts[kChain + 1] = {};
    int next = 0;
    const auto fill = [&](int k) {
      value[k] = next++;
      for (int i = 0; i < 16; ++i) in[k][i] = static_cast<float>((rank + 1) * i + 10 * value[k]);
      std::fill(res[k], res[k] + 16, -1.0f);
    };
    const auto exact = [&](int k, int count) {
      for (int i = 0; i < count; ++i)
        if (res[k][i] != static_cast<float>(3 * i + 20 * value[k])) return false;
      return true;
    };
    if (rank == 1) {
      return ReleasingPeerOnFailure(back[1], [&]() -> int {
        unsigned char n = 0;
        for (;;) {
          CHECK_OR_FAIL(read(called[0], &n, 1) == 1, "gate");
          if (n == 0) break;
          const int calls = (n & 31) + ((n & 64) ? 1 : 0);
          for (int c = 0; c < calls; ++c) {
            // Bit 128: rank 1 says when it is about to make its last call.
            if ((n & 128) && c == calls - 1) CHECK_OR_FAIL(write(back[1], &n, 1) == 1, "gate");
            const int count = c < (n & 31) && ((n & 32) == 0 || c % 2 == 0) ? 16 : 8;
            fill(0);
            CHECK_OR_FAIL(braidAllReduce(in[0], res[0], count, braidFloat32, braidSum, comm) ==
                                  braidSuccess &&
                              exact(0, count),
                          "rank 1's call %d: %s", value[0], braidGetLastError(comm));
          }
          CHECK_OR_FAIL(write(back[1], &n, 1) == 1, "gate");
        }
        CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy: %s",
                      braidGetLastError(comm));
        return 0;
      });
    }
    // (A zero byte to rank 1 when a check fails: it destroys its communicator.)
    return ReleasingPeerOnFailure(called[1], [&]() -> int {
      // Rank 1 makes the calls `n` says (go), then answers (answered: false when it does not).
      const auto go = [&](unsigned char n) { return write(called[1], &n, 1) == 1; };
      const auto answered = [&] {
        unsigned char got = 0;
        return read(back[0], &got, 1) == 1;
      };
      braidRequest_t req[kChain + 1] = {};
      const auto issue = [&](int k, int count) {
        fill(k);
        counts[k] = count;
        return braidIallReduce(in[k], res[k], count, braidFloat32, braidSum, comm, &req[k]) ==
                   braidSuccess &&
               req[k] != nullptr;
      };
      const auto report = [&] {
        std::vector<char> buf(1 << 16);
        if (braidCommDebugState(comm, buf.data(), buf.size()) != braidSuccess) return std::string();
        return std::string(buf.data());
      };
      const auto count = [](const std::string& s, const std::string& what) {
        int n = 0;
        for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
        return n;
      };
      // The number the report prints right after `label` (its totals), or -1.
      const auto number = [](const std::string& s, const std::string& label) -> long {
        const size_t at = s.find(label);
        if (at == std::string::npos) return -1;
        char* end = nullptr;
        const long v = std::strtol(s.c_str() + at + label.size(), &end, 10);
        return end == s.c_str() + at + label.size() ? -1 : v;
      };
      const auto waitAll = [&](int calls) {
        for (int k = 0; k < calls; ++k)  // (a request braidTest found done is null)
          if ((req[k] && braidWait(&req[k], -1) != braidSuccess) || !exact(k, counts[k]))
            return false;
        return true;
      };
      const bool turns = exit == ChainExit::kTwoShapesByTurns;
      const unsigned char chain = kChain | (turns ? 32 : 0);
      // A call behind kChain parked ones finds a spare of its own only if kChain + 1 operations of
      // the shape were once in flight together.
      if (exit == ChainExit::kFinishedBehind) {
        for (int k = 0; k <= kChain; ++k)
          CHECK_OR_FAIL(issue(k, 16), "warm-up call %d: %s", k, braidGetLastError(comm));
        CHECK_OR_FAIL(go(kChain + 1) && waitAll(kChain + 1) && answered(), "warm-up: %s",
                      braidGetLastError(comm));
      }
      // Round 1: calls of the shape that must wait go on as operations, and leave a spare each.
      // Then kChain calls, all parked: tried again (each try completed) should the progress thread
      // hold the loop at one of them (the call then queues), up to 100 times.
      for (int tries = 0;; ++tries) {
        for (int k = 0; k < kChain; ++k)
          CHECK_OR_FAIL(issue(k, turns && k % 2 ? 8 : 16), "call %d: %s", k,
                        braidGetLastError(comm));
        const std::string r = report();
        if (tries > 0 && count(r, "[oneshot] on the board") == kChain &&
            count(r, "in flight (" + std::to_string(kChain) + "):") == 1 &&
            count(r, "parked:") == 1)
          break;
        CHECK_OR_FAIL(tries < 100, "%d calls in flight are never all parked; the last report:\n%s",
                      kChain, r.c_str());
        CHECK_OR_FAIL(go(chain) && waitAll(kChain) && answered(), "round %d: %s", tries,
                      braidGetLastError(comm));
      }
      for (int k = 0; k < kChain; ++k)
        CHECK_OR_FAIL(std::count(res[k], res[k] + 16, -1.0f) == 16,
                      "call %d completed before rank 1 called", k);
      switch (exit) {
        case ChainExit::kWaitInOrder:
        case ChainExit::kTwoShapesByTurns:
          CHECK_OR_FAIL(go(chain) && waitAll(kChain) && answered(), "the waits: %s",
                        braidGetLastError(comm));
          break;
        case ChainExit::kWaitNewestFirst: {
          CHECK_OR_FAIL(go(kChain), "gate");
          CHECK_OR_FAIL(braidWait(&req[kChain - 1], -1) == braidSuccess && exact(kChain - 1, 16),
                        "the newest: %s", braidGetLastError(comm));
          for (int k = 0; k < kChain - 1; ++k) {
            int done = 0;
            CHECK_OR_FAIL(braidTest(&req[k], &done) == braidSuccess && done == 1 && exact(k, 16),
                          "call %d was not completed by the newest's wait: %s", k,
                          braidGetLastError(comm));
          }
          CHECK_OR_FAIL(answered(), "gate");
          break;
        }
        case ChainExit::kTestTheMiddle: {
          CHECK_OR_FAIL(go(kChain), "gate");
          int done = 0;
          while (!done)  // (the job's wall-clock guard ends a hang)
            CHECK_OR_FAIL(braidTest(&req[1], &done) == braidSuccess, "test: %s",
                          braidGetLastError(comm));
          CHECK_OR_FAIL(exact(1, 16) && waitAll(kChain) && answered(), "the waits: %s",
                        braidGetLastError(comm));
          break;
        }
        case ChainExit::kOtherShapeBehind: {
          CHECK_OR_FAIL(issue(kChain, 8), "the call behind: %s", braidGetLastError(comm));
          const std::string r = report();
          // None parked, and five operations outstanding: the four adopted (a parked call is
          // counted as submitted only then) and the call behind them. Whoever holds the loop: the
          // progress thread may have adopted them before this call came (it then queued behind
          // them), this caller did (it went on after them), or nobody drives now.
          const long submitted = number(r, "operations: submitted ");
          const long completed = number(r, ", completed ");
          CHECK_OR_FAIL(submitted >= 0 && completed >= 0, "no totals in the report:\n%s",
                        r.c_str());
          CHECK_OR_FAIL(count(r, "parked:") == 0 && submitted - completed == kChain + 1,
                        "the parked calls were not adopted:\n%s", r.c_str());
          CHECK_OR_FAIL(go(kChain | 64) && waitAll(kChain + 1) && answered(), "the waits: %s",
                        braidGetLastError(comm));
          break;
        }
        case ChainExit::kFinishedBehind: {
          // Rank 1 says when it is about to make its last call: rank 0's call behind the parked
          // ones usually finds rank 1's post there, and finishes at once. Calls complete in the
          // order they were called (braid.h): it must not complete before the parked ones, which
          // have not read anything yet. Those whose posts are there complete first; if one still
          // waits, the call parks behind it, finished or waiting itself.
          CHECK_OR_FAIL(go((kChain + 1) | 128) && answered(), "gate");
          CHECK_OR_FAIL(issue(kChain, 16), "the call behind: %s", braidGetLastError(comm));
          const std::string r = report();
          // The call behind them is the last one issued: completed only if every call is (the
          // parked ones whose posts were there complete first, finishReadyParked).
          const long last = number(r, "(last #");
          const long last_completed = number(r, "last completed #");
          CHECK_OR_FAIL(last >= 0 && last_completed >= 0, "no totals in the report:\n%s",
                        r.c_str());
          CHECK_OR_FAIL(last_completed != last || count(r, "nothing in flight") == 1,
                        "the call behind the parked ones completed before them:\n%s", r.c_str());
          CHECK_OR_FAIL(waitAll(kChain + 1) && answered(), "the waits: %s",
                        braidGetLastError(comm));
          break;
        }
        case ChainExit::kBlockingBehind:
          CHECK_OR_FAIL(go(kChain + 1), "gate");
          fill(kChain);
          CHECK_OR_FAIL(braidAllReduce(in[kChain], res[kChain], 16, braidFloat32, braidSum, comm) ==
                                braidSuccess &&
                            exact(kChain, 16),
                        "the blocking call behind them: %s", braidGetLastError(comm));
          CHECK_OR_FAIL(waitAll(kChain) && answered(), "the waits: %s", braidGetLastError(comm));
          break;
        case ChainExit::kDestroyUnwaited:
          CHECK_OR_FAIL(go(kChain), "gate");
          break;
      }
      if (exit != ChainExit::kDestroyUnwaited) {
        // The communicator goes on.
        CHECK_OR_FAIL(go(1), "gate");
        fill(0);
        CHECK_OR_FAIL(
            braidAllReduce(in[0], res[0], 16, braidFloat32, braidSum, comm) == braidSuccess &&
                exact(0, 16),
            "the call after: %s", braidGetLastError(comm));
        CHECK_OR_FAIL(answered(), "gate");
      }
      CHECK_OR_FAIL(go(0), "gate");
      const auto t0 = Clock::now();
      CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy: %s", braidGetLastError(comm));
      CHECK_OR_FAIL(SecondsSince(t0) < 10, "destroy took %.1f s", SecondsSince(t0));
      if (exit == ChainExit::kDestroyUnwaited) {
        CHECK_OR_FAIL(answered() && waitAll(kChain), "the requests after the destroy");
      }
      return 0;
    });
  });
  for (int fd : {called[0], called[1], back[0], back[1]}) close(fd);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(ParkedChain, WaitedForInOrder) {
  CheckParkedChain(ChainExit::kWaitInOrder);
}

TEST(ParkedChain, TheNewestWaitedForFirstFinishesTheOthersInOrder) {
  CheckParkedChain(ChainExit::kWaitNewestFirst);
}

TEST(ParkedChain, BraidTestOnTheSecondAdoptsThemAll) {
  CheckParkedChain(ChainExit::kTestTheMiddle);
}

TEST(ParkedChain, ACallOfAnotherShapeBehindThemGoesAfterThem) {
  CheckParkedChain(ChainExit::kOtherShapeBehind);
}

TEST(ParkedChain, ABlockingCallBehindThemRunsAfterThem) {
  CheckParkedChain(ChainExit::kBlockingBehind);
}

TEST(ParkedChain, TheDestroyCompletesThemUnwaited) {
  CheckParkedChain(ChainExit::kDestroyUnwaited);
}

TEST(ParkedChain, CallsOfTwoShapesByTurnsParkToo) {
  CheckParkedChain(ChainExit::kTwoShapesByTurns);
}

TEST(ParkedChain, ACallThatFinishesAtOnceBehindThemCompletesAfterThem) {
  CheckParkedChain(ChainExit::kFinishedBehind);
}

// ------------------------------------------------------------------------- calls by reference

// Whether this host lets a process read a sibling's memory (process_vm_readv): the ranks of a
// job are siblings. Containers and hardened hosts may forbid it; braid then copies through the
// board, and the tests that need it skip.
bool HostAllowsCrossMemoryAttach() {
  // The library's own probe: the child reads this process's probe word, as a peer rank would.
  const braid::CrossMemoryProbe probe = braid::LocalCrossMemoryProbe();
  const pid_t parent = getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child == 0) _exit(braid::CanReadPeerMemory(parent, probe) ? 0 : 1);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

// Every call from 1 byte runs by reference; no two-shot board, so an all-reduce too large for the
// board's buffers could only go to the engine (and move stream bytes) if not by reference.
JobOptions ByReferenceOptions(int n) {
  return Options(n, {{"BRAID_SINGLE_COPY_BYTES", "1"}, {"BRAID_BOARD_TWO_SHOT", "0"}});
}

// The collectives that run by reference, out of the case matrix.
std::vector<Case> ByReferenceCases(const std::vector<uint64_t>& counts,
                                   const std::vector<DataType>& types) {
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  std::vector<Case> cases;
  for (const Case& c : Matrix(counts, types, ops))
    if (c.kind != CollKind::kReduce && c.kind != CollKind::kAllToAll) cases.push_back(c);
  return cases;
}

// All-reduce, all-gather, reduce-scatter and broadcast by reference, type x op x placement, at
// counts that leave ranks' parts empty (1), cut unevenly (7, 300) and span several fold pieces
// (70001 elements: 280-560 KB per rank, more than the board's buffers hold, so no copying board
// call could carry them): bit-exact (reductions are the rank-order fold the reference computes),
// and not one byte through the streams. Float all-reduces whose sums round are the rank-order
// fold's bits on every rank, in place, out of place and AVG.
TEST_P(OneShot, CallsByReferenceAreBitExactAndSendNoStreamByte) {
  if (!HostAllowsCrossMemoryAttach()) GTEST_SKIP() << "this host forbids process_vm_readv";
  const int n = GetParam();
  std::vector<DataType> all(std::begin(kTypes), std::end(kTypes));
  std::vector<Case> cases = ByReferenceCases({1, 7, 300}, all);
  for (const Case& c : ByReferenceCases({70001}, {DataType::kFloat32, DataType::kFloat64}))
    cases.push_back(c);
  auto out = RunJob(
      ByReferenceOptions(n), [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
        uint64_t before = 0;
        CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
        uint64_t wrong = 0;
        for (const Case& c : cases) wrong += RunCase(comm, rank, nranks, c);
        CHECK_OR_FAIL(wrong == 0, "%llu wrong elements", static_cast<unsigned long long>(wrong));
        const auto un = static_cast<uint64_t>(nranks);
        if (CheckRankOrderFold(comm, rank, nranks, "by reference", {un, 3 * un + 2, 70001}) != 0)
          return 1;
        CHECK_OR_FAIL(braidBarrier(comm) == braidSuccess, "barrier");
        CHECK_OR_FAIL(SentSince(comm, nranks, before) == 0, "calls by reference sent stream bytes");
        return 0;
      });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A call by reference that differs between ranks (rank 0 passes one element more) fails on every
// rank naming the mismatch before any rank reads a peer's buffer, and the next one runs; so does
// one that only some ranks would run by reference (rank 0's 4 KiB reaches the threshold, the
// others' 4092 bytes go on the copying board).
TEST_P(OneShot, ACallByReferenceThatDiffersFailsOnEveryRankAndTheNextOneRuns) {
  if (!HostAllowsCrossMemoryAttach()) GTEST_SKIP() << "this host forbids process_vm_readv";
  const int n = GetParam();
  auto out = RunJob(Options(n, {{"BRAID_SINGLE_COPY_BYTES", "4096"}}),
                    [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
                      for (size_t base : {size_t{70000}, size_t{1023}})
                        if (CheckMismatchedCountThenNextCall(comm, rank, nranks, base) != 0)
                          return 1;
                      return 0;
                    });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// One rank's receive buffer has a page its own process cannot write, inside a peer's block of an
// in-place all-gather: its read of that block fails (EFAULT) instead of crashing, it names the
// peer and the bad address, and every other rank, waiting for its "done" post, fails naming it
// within seconds; later calls fail instead of hanging.
TEST_P(OneShot, AnUnwritableBufferFailsEveryRankWithAnErrorInsteadOfACrash) {
  if (!HostAllowsCrossMemoryAttach()) GTEST_SKIP() << "this host forbids process_vm_readv";
  const int n = GetParam();
  const int victim = n - 1;
  auto out = RunJob(Options(n, {{"BRAID_SINGLE_COPY_BYTES", "4096"}}), [&](braidComm_t comm,
                                                                           int rank, int nranks,
                                                                           const braidUniqueId&) {
    const long page = sysconf(_SC_PAGESIZE);
    const size_t block = 4 * static_cast<size_t>(page);  // bytes per rank
    const size_t total = block * static_cast<size_t>(nranks);
    auto* buf = static_cast<char*>(
        mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    CHECK_OR_FAIL(buf != MAP_FAILED, "mmap");
    std::memset(buf + rank * block, rank + 1, block);
    // The victim cannot write the second page of rank 0's block.
    if (rank == victim)
      CHECK_OR_FAIL(mprotect(buf + page, static_cast<size_t>(page), PROT_READ) == 0, "mprotect");
    const auto t0 = Clock::now();
    const braidResult_t rc = braidAllGather(buf + rank * block, buf, block, braidUint8, comm);
    const double dt = SecondsSince(t0);
    const std::string msg = braidGetLastError(comm);
    const bool named = rank == victim
                           ? msg.find("rank 0's buffer in place") != std::string::npos &&
                                 msg.find("Bad address") != std::string::npos
                           : msg.find("rank " + std::to_string(victim)) != std::string::npos;
    CHECK_OR_FAIL(rc != braidSuccess && dt < 5.0 && named, "rc=%d after %.2fs: %s", rc, dt,
                  msg.c_str());
    const auto t1 = Clock::now();
    CHECK_OR_FAIL(braidAllGather(buf + rank * block, buf, 16, braidUint8, comm) != braidSuccess &&
                      SecondsSince(t1) < 5.0,
                  "the next call: %s", braidGetLastError(comm));
    munmap(buf, total);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Makes process_vm_readv fail with EPERM in this process from now on, as a container's seccomp
// profile does. False when the filter cannot be installed.
bool ForbidCrossMemoryAttach() {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
  return false;
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// One rank may not read its peers' memory (a seccomp filter refuses process_vm_readv there): its
// probes at init fail, so no rank runs a call by reference, and the calls run bit-exact the way
// they would without it (the large ones through the streams).
TEST_P(OneShot, WhereOneRankMayNotReadItsPeersNoRankCallsByReference) {
  if (!HostAllowsCrossMemoryAttach()) GTEST_SKIP() << "this host forbids process_vm_readv";
  const int n = GetParam();
  JobOptions opt = ByReferenceOptions(n);
  opt.init = false;
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    if (rank == nranks - 1) CHECK_OR_FAIL(ForbidCrossMemoryAttach(), "seccomp filter");
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, nranks, id, rank) == braidSuccess, "init: %s",
                  braidGetLastError(nullptr));
    uint64_t before = 0;
    CHECK_OR_FAIL(SentBytes(comm, nranks, &before), "traffic counters");
    uint64_t wrong = 0;
    for (const Case& c : ByReferenceCases({70001}, {DataType::kFloat32}))
      wrong += RunCase(comm, rank, nranks, c);
    CHECK_OR_FAIL(wrong == 0, "%llu wrong elements", static_cast<unsigned long long>(wrong));
    CHECK_OR_FAIL(SentSince(comm, nranks, before) > 0,
                  "no stream byte moved: the calls ran by reference");
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
