// Split views (issue 8): braidCommSplit children run on the parent's connections. A split opens
// no socket, shm segment or thread; views and their root interleave non-blocking operations
// bit-exactly when every rank issues them in the same order; a different order is a clear error
// on every rank, never a hang or wrong data; aborting, revoking or destroying one view, or
// destroying the root first, leaves the others working.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/proc_state.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

using braid_test_common::CountEntries;

// The process's descriptors less its sockets. UCX's tcp opens and accepts connections from its own
// progress (a peer's wireup of a lane, at any time after the first message) whatever braid does,
// so a check that braid opened nothing counts the rest when pairs run on ucx.
int CountNonSocketDescriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[64] = {};
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(link.c_str(), target, sizeof(target) - 1) > 0 &&
          std::strncmp(target, "socket:", 7) == 0)
        continue;
      ++n;
    }
    closedir(d);
  }
  return n;
}

// Rank r's input element i of call k: small integers, so every sum is exact in float.
float In(int k, int r, size_t i) {
  return static_cast<float>(static_cast<int>((r * 5 + i * 11 + k * 7) % 999) - 499);
}

// Non-blocking operations in flight, each with the result it must produce (from In()).
struct Pending {
  braidRequest_t req = nullptr;
  std::vector<float> send, recv, want;
};
class InFlight {
 public:
  explicit InFlight(int rank) : rank_(rank) {
    ops_.reserve(kMaxOps);  // no reallocation: the calls in flight hold pointers into its buffers
  }

  // An all-reduce (sum) or all-gather of call k's inputs on `c`, whose members are the global
  // ranks `g` in its rank order.
  braidResult_t allReduce(braidComm_t c, const std::vector<int>& g, int k, size_t count) {
    Pending& q = add();
    q.send.resize(count);
    q.recv.assign(count, -1.0f);
    q.want.assign(count, 0.0f);
    for (size_t i = 0; i < count; ++i) {
      q.send[i] = In(k, rank_, i);
      for (int x : g) q.want[i] += In(k, x, i);
    }
    return braidIallReduce(q.send.data(), q.recv.data(), count, braidFloat32, braidSum, c, &q.req);
  }
  braidResult_t allGather(braidComm_t c, const std::vector<int>& g, int k, size_t count) {
    Pending& q = add();
    q.send.resize(count);
    for (size_t i = 0; i < count; ++i) q.send[i] = In(k, rank_, i);
    q.recv.assign(count * g.size(), -1.0f);
    for (int x : g)
      for (size_t i = 0; i < count; ++i) q.want.push_back(In(k, x, i));
    return braidIallGather(q.send.data(), q.recv.data(), count, braidFloat32, c, &q.req);
  }
  // A slot for an operation the caller issues itself (a send or a receive).
  Pending& add() {
    if (ops_.size() == kMaxOps) std::abort();  // (a test issuing more must raise kMaxOps)
    return ops_.emplace_back();
  }

  // Waits for every operation (last issued first, or in order): "" or what failed.
  std::string waitAll(bool last_first) {
    for (size_t j = 0; j < ops_.size(); ++j) {
      const size_t i = last_first ? ops_.size() - 1 - j : j;
      if (braidWait(&ops_[i].req, -1) != braidSuccess)
        return "wait " + std::to_string(i) + ": " + braidGetLastError(nullptr);
    }
    return "";
  }
  // "" when every operation produced its result bit for bit, else the first difference.
  std::string firstDifference() const {
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Pending& o = ops_[i];
      size_t at = 0;
      while (at < o.want.size() && at < o.recv.size() && o.recv[at] == o.want[at]) ++at;
      if (o.recv.size() == o.want.size() && at == o.want.size()) continue;
      char msg[160];
      std::snprintf(msg, sizeof msg, "operation %zu differs from element %zu of %zu: %g, want %g",
                    i, at, o.want.size(), at < o.recv.size() ? o.recv[at] : -1.0,
                    at < o.want.size() ? o.want[at] : -1.0);
      return msg;
    }
    return "";
  }

 private:
  static constexpr size_t kMaxOps = 96;
  int rank_;
  std::vector<Pending> ops_;
};

// An all-reduce of `count` floats on `comm` (rank `me` of `n`, whose members are `global` ranks,
// listed in the comm's rank order), checked bit for bit. 0 on success.
int CheckedAllReduce(braidComm_t comm, int k, const std::vector<int>& global, int me,
                     size_t count) {
  const int rank = global[me];
  std::vector<float> send(count), recv(count, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = In(k, rank, i);
  CHECK_OR_FAIL(
      braidAllReduce(send.data(), recv.data(), count, braidFloat32, braidSum, comm) == braidSuccess,
      "allreduce %d: %s", k, braidGetLastError(comm));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int g : global) want += In(k, g, i);
    CHECK_OR_FAIL(recv[i] == want, "allreduce %d element %zu is %g, want %g", k, i, recv[i], want);
  }
  return 0;
}

std::vector<int> Members(int n, int color_of_rank(int, int), int color) {
  std::vector<int> m;
  for (int r = 0; r < n; ++r)
    if (color_of_rank(r, n) == color) m.push_back(r);
  return m;
}

int Half(int r, int) {
  return r % 2;
}

using Param = std::tuple<int, std::string>;  // ranks, transport
class SplitView : public ::testing::TestWithParam<Param> {
 protected:
  JobOptions Options(std::vector<std::pair<std::string, std::string>> extra = {}) const {
    JobOptions opt;
    opt.nranks = std::get<0>(GetParam());
    opt.timeout_s = 240;
    opt.env = {{"BRAID_TRANSPORTS", std::get<1>(GetParam())}, {"BRAID_TIMEOUT", "30"}};
    for (auto& e : extra) opt.env.push_back(e);
    return opt;
  }
};

// The counters: a split into two halves opens no file descriptor (socket, shm segment, eventfd)
// and starts no thread; the views' collectives are bit-exact and the parent keeps working.
// Rank 0 prints the split's time and descriptor counts (docs/performance.md quotes them).
// Connections made at init (BRAID_LAZY_CONNECT=0), so that the parent connects every pair the
// views use before the count (lazily, the split's own exchange may connect a pair the parent's
// first call did not need: lazy_connect_test.cc counts those).
TEST_P(SplitView, OpensNoSocketSegmentOrThread) {
  auto out = RunJob(Options({{"BRAID_LAZY_CONNECT", "0"}}), [](braidComm_t comm, int rank, int n,
                                                               const braidUniqueId&) {
    CHECK_OR_FAIL(CheckedAllReduce(comm, 0,
                                   Members(
                                       n, [](int, int) { return 0; }, 0),
                                   rank, 1000) == 0,
                  "parent before");
    const int fds = CountEntries("/proc/self/fd"), threads = CountEntries("/proc/self/task");
    braidComm_t half = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    CHECK_OR_FAIL(braidCommSplit(comm, rank % 2, rank, &half, nullptr) == braidSuccess, "split");
    auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    const int fds_after = CountEntries("/proc/self/fd");
    const int threads_after = CountEntries("/proc/self/task");
    if (rank == 0)
      std::fprintf(stderr, "[rank 0] view split: %lld us, fds %d -> %d, threads %d -> %d\n",
                   static_cast<long long>(us), fds, fds_after, threads, threads_after);
    CHECK_OR_FAIL(fds_after == fds, "the split opened %d descriptors", fds_after - fds);
    CHECK_OR_FAIL(threads_after == threads, "the split started %d threads",
                  threads_after - threads);
    int hrank = -1, hn = 0;
    CHECK_OR_FAIL(braidCommUserRank(half, &hrank) == braidSuccess && hrank == rank / 2, "rank %d",
                  hrank);
    CHECK_OR_FAIL(braidCommCount(half, &hn) == braidSuccess && hn == (n + 1 - rank % 2) / 2,
                  "count %d", hn);
    const auto mine = Members(n, Half, rank % 2);
    for (size_t count : {size_t{1}, size_t{777}, size_t{300000}})
      CHECK_OR_FAIL(CheckedAllReduce(half, 1, mine, hrank, count) == 0, "view count %zu", count);
    CHECK_OR_FAIL(CheckedAllReduce(comm, 2,
                                   Members(
                                       n, [](int, int) { return 0; }, 0),
                                   rank, 5000) == 0,
                  "parent after");
    CHECK_OR_FAIL(braidCommDestroy(half) == braidSuccess, "destroy view");
    CHECK_OR_FAIL(CountEntries("/proc/self/fd") == fds, "descriptors after destroy");
    CHECK_OR_FAIL(CheckedAllReduce(comm, 3,
                                   Members(
                                       n, [](int, int) { return 0; }, 0),
                                   rank, 9) == 0,
                  "parent after the view's destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The same counters with BRAID_SPLIT_SHARE=0 (an independent communicator per split) do see new
// descriptors: the check above can fail.
TEST_P(SplitView, IndependentSplitOpensItsOwnConnections) {
  auto out = RunJob(Options({{"BRAID_SPLIT_SHARE", "0"}}), [](braidComm_t comm, int rank, int n,
                                                              const braidUniqueId&) {
    const int fds = CountEntries("/proc/self/fd");
    braidComm_t half = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    CHECK_OR_FAIL(braidCommSplit(comm, rank % 2, rank, &half, nullptr) == braidSuccess, "split");
    auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    const int fds_after = CountEntries("/proc/self/fd");
    if (rank == 0)
      std::fprintf(stderr, "[rank 0] independent split: %lld us, fds %d -> %d\n",
                   static_cast<long long>(us), fds, fds_after);
    CHECK_OR_FAIL(fds_after > fds, "no new descriptor (%d)", fds_after);
    int hrank = -1;
    CHECK_OR_FAIL(braidCommUserRank(half, &hrank) == braidSuccess, "rank");
    CHECK_OR_FAIL(CheckedAllReduce(half, 1, Members(n, Half, rank % 2), hrank, 777) == 0,
                  "independent child");
    CHECK_OR_FAIL(braidCommDestroy(half) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A root, two levels of views and point-to-point on a view, all non-blocking and interleaved in
// the same order on every rank, waited for in reverse: every result bit-exact.
TEST_P(SplitView, RootAndNestedViewsInterleaveNonBlocking) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    braidComm_t half = nullptr, quarter = nullptr;
    CHECK_OR_FAIL(braidCommSplit(comm, rank % 2, rank, &half, nullptr) == braidSuccess, "split");
    int hrank = -1, hn = 0;
    braidCommUserRank(half, &hrank);
    braidCommCount(half, &hn);
    // Within the half, a reversed order by key: the view's rank order is not the parent's.
    CHECK_OR_FAIL(braidCommSplit(half, hrank % 2, -hrank, &quarter, nullptr) == braidSuccess,
                  "nested split");
    int qrank = -1, qn = 0;
    braidCommUserRank(quarter, &qrank);
    braidCommCount(quarter, &qn);
    // Global ranks of each communicator, in its rank order.
    std::vector<int> all, halfg, quarterg;
    for (int r = 0; r < n; ++r) all.push_back(r);
    for (int r = 0; r < n; ++r)
      if (r % 2 == rank % 2) halfg.push_back(r);
    for (int i = static_cast<int>(halfg.size()) - 1; i >= 0; --i)
      if (i % 2 == hrank % 2) quarterg.push_back(halfg[i]);
    CHECK_OR_FAIL(static_cast<int>(quarterg.size()) == qn && quarterg[qrank] == rank,
                  "quarter layout");

    InFlight ops(rank);
    int k = 0;
    for (int round = 0; round < 3; ++round) {
      const size_t big = 40000 + 1000 * round, small = 3 + round;
      CHECK_OR_FAIL(ops.allReduce(comm, all, k++, big) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allGather(half, halfg, k++, small) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allReduce(quarter, quarterg, k++, small) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allGather(comm, all, k++, small) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allReduce(half, halfg, k++, big) == braidSuccess, "issue");
      // A ring of sends on the half, receive first.
      {
        const int right = (hrank + 1) % hn, left = (hrank + hn - 1) % hn;
        Pending& r = ops.add();
        r.recv.assign(small, -1.0f);
        for (size_t i = 0; i < small; ++i) r.want.push_back(In(k, halfg[left], i));
        CHECK_OR_FAIL(
            braidIrecv(r.recv.data(), small, braidFloat32, left, half, &r.req) == braidSuccess,
            "irecv");
        Pending& s = ops.add();
        s.send.resize(small);
        for (size_t i = 0; i < small; ++i) s.send[i] = In(k, rank, i);
        CHECK_OR_FAIL(
            braidIsend(s.send.data(), small, braidFloat32, right, half, &s.req) == braidSuccess,
            "isend");
        ++k;
      }
    }
    const std::string waited = ops.waitAll(/*last_first=*/true);
    CHECK_OR_FAIL(waited.empty(), "%s", waited.c_str());
    const std::string diff = ops.firstDifference();
    CHECK_OR_FAIL(diff.empty(), "%s", diff.c_str());
    CHECK_OR_FAIL(braidCommDestroy(quarter) == braidSuccess, "destroy");
    CHECK_OR_FAIL(braidCommDestroy(half) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Board calls in flight side by side while a view's large ring runs on the streams (whose passes
// keep a rank's progress loop away from its board calls for a while): the root's large
// all-reduces alternate between the board's two large buffers, so the call two back may still be
// folding this rank's own buffer when the next one is ready to refill it (a race the reuse rule
// once left open: it waited for the peers' consumed counters only), and the ring's data reaches
// ranks still waiting on the board for a peer that is in the call (once taken for a mismatch).
TEST_P(SplitView, BoardCallsInFlightBesideAViewsRingKeepTheirData) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    braidComm_t half = nullptr;
    CHECK_OR_FAIL(braidCommSplit(comm, rank % 2, rank, &half, nullptr) == braidSuccess, "split");
    std::vector<int> all, halfg;
    for (int r = 0; r < n; ++r) all.push_back(r);
    for (int r = rank % 2; r < n; r += 2) halfg.push_back(r);
    InFlight ops(rank);
    int k = 0;
    for (int round = 0; round < 16; ++round) {
      CHECK_OR_FAIL(ops.allReduce(comm, all, k++, 30000 + 100 * round) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allReduce(half, halfg, k++, 60000) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allReduce(comm, all, k++, 5) == braidSuccess, "issue");
      CHECK_OR_FAIL(ops.allReduce(comm, all, k++, 30000 + 100 * round) == braidSuccess, "issue");
    }
    const std::string waited = ops.waitAll(/*last_first=*/false);
    CHECK_OR_FAIL(waited.empty(), "%s", waited.c_str());
    const std::string diff = ops.firstDifference();
    CHECK_OR_FAIL(diff.empty(), "%s", diff.c_str());
    CHECK_OR_FAIL(braidCommDestroy(half) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Rank 0 calls the view first and the root second, the others the other way round: every rank
// fails, naming the cause, within the guard (the streams the two share are out of step).
TEST_P(SplitView, CallsOutOfOrderAcrossAViewAndItsRootFailClearly) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    braidComm_t view = nullptr;
    CHECK_OR_FAIL(braidCommSplit(comm, 0, rank, &view, nullptr) == braidSuccess, "split");
    std::vector<float> a(16, 1.0f), b(16, 0.0f);
    braidComm_t first = rank == 0 ? view : comm, second = rank == 0 ? comm : view;
    auto t0 = std::chrono::steady_clock::now();
    braidResult_t r1 = braidAllReduce(a.data(), b.data(), 16, braidFloat32, braidSum, first);
    std::string m1 = braidGetLastError(nullptr);
    braidResult_t r2 = braidAllReduce(a.data(), b.data(), 16, braidFloat32, braidSum, second);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_OR_FAIL(r1 != braidSuccess, "the out-of-order call succeeded");
    CHECK_OR_FAIL(r2 != braidSuccess, "the second call succeeded on a torn communicator");
    CHECK_OR_FAIL(s < 20, "took %.1f s (BRAID_TIMEOUT is 30)", s);
    if (m1.find("share connections") == std::string::npos &&
        m1.find("failed first") == std::string::npos && m1.find("rank ") == std::string::npos)
      CHECK_OR_FAIL(false, "message names no cause: %s", m1.c_str());
    std::fprintf(stderr, "[rank %d] %s\n", rank, m1.c_str());
    (void)n;
    braidCommAbort(view);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A view whose receive can never complete is aborted from another thread: the receive fails,
// the root and the other view go on, bit-exact; revoking a view fails its calls only; a view
// outlives the root it was split from.
TEST_P(SplitView, AbortRevokeAndDestroyOrderLeaveTheOthersWorking) {
  JobOptions opt = Options();
  opt.init = false;  // the body destroys its root itself
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, n, id, rank) == braidSuccess, "init");
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    braidComm_t half = nullptr, spare = nullptr;
    CHECK_OR_FAIL(braidCommSplit(comm, rank % 2, rank, &half, nullptr) == braidSuccess, "split");
    CHECK_OR_FAIL(braidCommSplit(comm, 0, rank, &spare, nullptr) == braidSuccess, "split");
    int hrank = -1;
    braidCommUserRank(half, &hrank);
    if (rank == 0) {
      // Its peer (global rank 2) never sends on this view. The abort comes once the receive
      // waits: this thread has entered braidRecv and sleeps in a system call.
      const pid_t receiver = braid_test_common::ThisThreadId();
      std::atomic<bool> receiving{false}, returned{false};
      bool aborted_while_waiting = false;
      std::thread aborter([&] {
        receiving.wait(false);
        aborted_while_waiting = braid_test_common::WaitUntilBlocked(receiver) && !returned.load();
        braidCommAbort(half);
      });
      float buf[8];
      receiving.store(true);
      receiving.notify_one();
      braidResult_t r = braidRecv(buf, 8, braidFloat32, 1, half);
      returned.store(true);
      aborter.join();
      CHECK_OR_FAIL(aborted_while_waiting, "the receive did not wait for the abort");
      CHECK_OR_FAIL(r != braidSuccess, "a receive on an aborted view succeeded");
    }
    CHECK_OR_FAIL(CheckedAllReduce(comm, 10, all, rank, 4096) == 0, "root after the abort");
    // Revoke: every member revokes the spare view; its calls fail, the root's do not.
    CHECK_OR_FAIL(braidCommRevoke(spare) == braidSuccess, "revoke");
    float x = 1, y = 0;
    CHECK_OR_FAIL(braidAllReduce(&x, &y, 1, braidFloat32, braidSum, spare) != braidSuccess,
                  "a revoked view ran a call");
    CHECK_OR_FAIL(braidCommDestroy(spare) == braidSuccess, "destroy revoked view");
    CHECK_OR_FAIL(CheckedAllReduce(comm, 11, all, rank, 100) == 0, "root after the revoke");
    // The root goes first; the views keep its connections alive.
    braidComm_t last = nullptr;
    CHECK_OR_FAIL(braidCommSplit(comm, 0, n - rank, &last, nullptr) == braidSuccess, "split");
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy root");
    std::vector<int> reversed(all.rbegin(), all.rend());
    CHECK_OR_FAIL(CheckedAllReduce(last, 12, reversed, n - 1 - rank, 20000) == 0,
                  "view after its root");
    CHECK_OR_FAIL(braidCommDestroy(last) == braidSuccess, "destroy view");
    if (rank != 0) CHECK_OR_FAIL(braidCommDestroy(half) == braidSuccess, "destroy half");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// braidCommSplitRanks (torch's new_group: only the members construct the group): a view of the
// listed ranks in the list's order, made by those ranks alone with no communication and no
// descriptor; two views of the same ranks (other tags) and the root interleave bit-exactly; a
// bad list fails at once on the caller with a clear message.
TEST_P(SplitView, SplitRanksIsMadeByTheListedRanksAlone) {
  auto out = RunJob(Options(), [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    // Sockets are not counted: connections are made lazily, and a peer whose first call on a
    // view runs ahead connects to this rank's data listener, whose thread accepts at once (and
    // UCX's tcp wires lanes up from its own progress). The views' own sockets: none by
    // construction (they take the root's endpoints); LazyConnect counts what calls connect.
    auto descriptors = [] { return CountNonSocketDescriptors(); };
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    // The odd ranks, highest first: view rank 0 is the last odd rank.
    std::vector<int> odd;
    for (int r = n - 1; r >= 0; --r)
      if (r % 2) odd.push_back(r);
    const std::vector<int> head = {0, 1, 2};  // ranks 0-2 only
    const int fds = descriptors(), threads = CountEntries("/proc/self/task");
    braidComm_t v_odd = nullptr, v_odd2 = nullptr, v_head = nullptr;
    if (rank % 2) {
      CHECK_OR_FAIL(braidCommSplitRanks(comm, odd.data(), static_cast<int>(odd.size()), 7,
                                        &v_odd) == braidSuccess,
                    "odd view: %s", braidGetLastError(comm));
      CHECK_OR_FAIL(braidCommSplitRanks(comm, odd.data(), static_cast<int>(odd.size()), 8,
                                        &v_odd2) == braidSuccess,
                    "second odd view: %s", braidGetLastError(comm));
    }
    if (rank < 3)
      CHECK_OR_FAIL(braidCommSplitRanks(comm, head.data(), 3, 7, &v_head) == braidSuccess,
                    "head view: %s", braidGetLastError(comm));
    CHECK_OR_FAIL(descriptors() == fds, "the views opened descriptors");
    CHECK_OR_FAIL(CountEntries("/proc/self/task") == threads, "the views started threads");
    auto me_in = [&](const std::vector<int>& m) {
      for (size_t i = 0; i < m.size(); ++i)
        if (m[i] == rank) return static_cast<int>(i);
      return -1;
    };
    if (v_odd) {
      int vr = -1, vn = 0;
      CHECK_OR_FAIL(braidCommUserRank(v_odd, &vr) == braidSuccess && vr == me_in(odd),
                    "odd view rank %d", vr);
      CHECK_OR_FAIL(
          braidCommCount(v_odd, &vn) == braidSuccess && vn == static_cast<int>(odd.size()),
          "odd view size %d", vn);
      CHECK_OR_FAIL(CheckedAllReduce(v_odd, 1, odd, vr, 3001) == 0, "odd view");
      CHECK_OR_FAIL(CheckedAllReduce(v_odd2, 2, odd, vr, 17) == 0, "second odd view");
    }
    if (v_head) CHECK_OR_FAIL(CheckedAllReduce(v_head, 3, head, rank, 70000) == 0, "head view");
    CHECK_OR_FAIL(CheckedAllReduce(comm, 4, all, rank, 999) == 0, "root after the views");
    // Bad lists: this rank not listed, a rank twice, out of range, empty.
    braidComm_t bad = nullptr;
    const std::vector<int> others = {(rank + 1) % n};
    CHECK_OR_FAIL(
        braidCommSplitRanks(comm, others.data(), 1, 0, &bad) == braidErrInvalidUsage && !bad,
        "a view without this rank");
    CHECK_OR_FAIL(std::strstr(braidGetLastError(comm), "is not in the list of 1 ranks"),
                  "message: %s", braidGetLastError(comm));
    const std::vector<int> twice = {rank, rank};
    CHECK_OR_FAIL(braidCommSplitRanks(comm, twice.data(), 2, 0, &bad) == braidErrInvalidArgument &&
                      std::strstr(braidGetLastError(comm), "listed twice"),
                  "a rank listed twice: %s", braidGetLastError(comm));
    const std::vector<int> beyond = {rank, n};
    CHECK_OR_FAIL(braidCommSplitRanks(comm, beyond.data(), 2, 0, &bad) == braidErrInvalidArgument &&
                      std::strstr(braidGetLastError(comm), "is not a rank of"),
                  "a rank out of range: %s", braidGetLastError(comm));
    CHECK_OR_FAIL(braidCommSplitRanks(comm, beyond.data(), 0, 0, &bad) == braidErrInvalidArgument,
                  "an empty list");
    CHECK_OR_FAIL(braidCommSplitRanks(comm, nullptr, 1, 0, &bad) == braidErrInvalidArgument,
                  "a NULL list");
    for (braidComm_t v : {v_odd, v_odd2, v_head})
      if (v) CHECK_OR_FAIL(braidCommDestroy(v) == braidSuccess, "destroy view");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::string CaseName(const ::testing::TestParamInfo<Param>& info) {
  return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Ranks, SplitView,
                         ::testing::Values(Param{4, "shm"}, Param{4, "tcp"}, Param{8, "shm"}),
                         CaseName);
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, SplitView, ::testing::Values(Param{4, "ucx"}), CaseName);
#endif

}  // namespace
}  // namespace braid_test
