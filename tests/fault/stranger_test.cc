// Strangers cannot defeat recovery (spec/reliability.md items 4 and 13): while 100 idle
// connections from strangers stay open on every listener of every rank (the rendezvous root while
// the ranks init, then each rank's control listener for the rest of the communicator's life), one
// rank is killed and the survivors shrink and complete a checked all-reduce within 5 s. Every
// stranger is accepted and dropped by the listener within about a second of connecting, at any
// time (the kill waits until each control listener has dropped all of its first strangers); the
// driver connects a new one in place of each, so the pressure never lets up.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/base/log.h"
#include "core/net/handshake.h"
#include "core/net/unique_id.h"
#include "transport/tcp/tcp_transport.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStrangersPerListener = 100;
// How long a listener may take to drop an idle stranger: its 1 s handshake limit plus slack for
// a loaded 2-core CI machine (the same bound as the rendezvous's hostile-traffic test).
constexpr int64_t kDropBoundMs = 1000 + 1500;
// The whole recovery, measured from before the kill: detection, shrink, checked all-reduce.
constexpr double kRecoveryBoundS = 5.0;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// One listener to harass, sent to the driver through a pipe (one atomic write each).
struct Target {
  sockaddr_storage addr;
  bool report_cycle;  // also acknowledge once every first stranger was dropped and replaced
};

// What the driver acknowledges per target (one byte each).
constexpr char kAllConnected = 'C', kGaveUp = 'G', kCycled = 'Y';

// The stranger driver, a process of its own (the test process starts no threads: it forks the
// ranks). For every target it keeps kStrangersPerListener connections that send nothing; when
// the listener drops one, it notes how long that stranger lived and connects another. Per target
// it writes kAllConnected to `acks` once all its strangers are connected (kGaveUp after 3 s,
// which only a listener that does not accept lets happen), then, if asked, kCycled once each of
// them was dropped and replaced. It stops when a byte arrives on `stop`. Exit status 0 when every
// stranger was dropped within kDropBoundMs.
int RunStrangerDriver(int targets_fd, int acks_fd, int stop_fd) {
  struct Slot {
    int fd = -1;
    Clock::time_point started;
    bool connected = false;
    bool dropped = false;  // the listener has dropped a stranger of this slot
  };
  struct Harassed {
    Target target;
    std::vector<Slot> slots;
    Clock::time_point added;
    bool acked = false, cycled = false;
  };
  std::vector<Harassed> targets;
  int64_t worst_ms = 0, drops = 0, late = 0;
  auto open_slot = [](Harassed& t, Slot& s) {
    const sockaddr_storage& addr = t.target.addr;
    s.fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    s.started = Clock::now();
    s.connected = false;
    if (s.fd < 0) return;
    socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
      close(s.fd);  // the listener is gone (its rank exited): stop harassing this slot
      s.fd = -1;
    }
  };
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, size_t>> owners;
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back({targets_fd, POLLIN, 0});
    fds.push_back({stop_fd, POLLIN, 0});
    for (size_t t = 0; t < targets.size(); ++t)
      for (size_t k = 0; k < targets[t].slots.size(); ++k) {
        const Slot& s = targets[t].slots[k];
        if (s.fd < 0) continue;
        fds.push_back({s.fd, static_cast<short>(s.connected ? POLLIN : POLLOUT), 0});
        owners.emplace_back(t, k);
      }
    // A tick for the 3 s acknowledgement fallback; everything else is driven by events.
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) return 3;
    if (fds[1].revents) break;
    if (fds[0].revents & POLLIN) {
      Target rec;
      if (read(targets_fd, &rec, sizeof(rec)) == static_cast<ssize_t>(sizeof(rec))) {
        targets.push_back({rec, std::vector<Slot>(kStrangersPerListener), Clock::now()});
        for (auto& s : targets.back().slots) open_slot(targets.back(), s);
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto [t, k] = owners[i - 2];
      Slot& s = targets[t].slots[k];
      if (!s.connected) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          s.connected = true;
        } else {  // the listener is gone (its rank exited): stop harassing this slot
          close(s.fd);
          s.fd = -1;
        }
        continue;
      }
      char buf[256];  // the listener's greeting, if any, is read and ignored: we never answer
      ssize_t n = recv(s.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
      int64_t lived = MsSince(s.started);
      ++drops;
      worst_ms = std::max(worst_ms, lived);
      if (lived > kDropBoundMs) ++late;
      s.dropped = true;
      close(s.fd);
      open_slot(targets[t], s);
    }
    for (auto& t : targets) {
      bool all = true, cycled = true;
      for (const auto& s : t.slots) {
        all = all && s.connected;
        cycled = cycled && s.dropped && s.connected;
      }
      if (!t.acked && (all || MsSince(t.added) > 3000)) {
        t.acked = true;
        char c = all ? kAllConnected : kGaveUp;
        if (write(acks_fd, &c, 1) != 1) return 3;
      }
      if (t.acked && t.target.report_cycle && !t.cycled && cycled) {
        t.cycled = true;
        if (write(acks_fd, &kCycled, 1) != 1) return 3;
      }
    }
  }
  // Strangers still connected now have outlived their welcome unless they are recent.
  for (auto& t : targets)
    for (auto& s : t.slots)
      if (s.fd >= 0 && s.connected && MsSince(s.started) > kDropBoundMs) {
        ++late;
        worst_ms = std::max(worst_ms, MsSince(s.started));
      }
  std::fprintf(stderr,
               "stranger driver: %zu listeners, %lld strangers dropped, %lld late, worst %lld ms\n",
               targets.size(), static_cast<long long>(drops), static_cast<long long>(late),
               static_cast<long long>(worst_ms));
  return late == 0 && drops > 0 ? 0 : 1;
}

// Reads the driver's acknowledgements until `n` of kind `until` came or `limit_ms` passed;
// counts every kind in `seen`.
void AwaitAcks(int acks_fd, char until, int n, int limit_ms, std::map<char, int>* seen) {
  braid::Deadline d = braid::Deadline::After(limit_ms);
  while ((*seen)[until] < n && !d.expired()) {
    pollfd p{acks_fd, POLLIN, 0};
    if (poll(&p, 1, d.remainingMs()) <= 0) continue;
    char c = 0;
    if (read(acks_fd, &c, 1) == 1) ++(*seen)[c];
  }
}

class StrangersEverywhere : public ::testing::TestWithParam<std::string> {};

TEST_P(StrangersEverywhere, KillShrinkAndAllReduceWithinFiveSeconds) {
  const int n = 4, victim = 1;
  int targets[2], acks[2], stop[2], go[2];
  ASSERT_EQ(pipe(targets), 0);
  ASSERT_EQ(pipe(acks), 0);
  ASSERT_EQ(pipe(stop), 0);
  ASSERT_EQ(pipe(go), 0);
  std::fflush(nullptr);
  pid_t driver = fork();
  ASSERT_GE(driver, 0);
  if (driver == 0) _exit(RunStrangerDriver(targets[0], acks[1], stop[0]));

  // The rendezvous root gets its strangers before any rank arrives.
  braidUniqueId id;
  pid_t root = StartRootProcess(&id);
  ASSERT_GT(root, 0);
  auto data = braid::DecodeUniqueId(id);
  ASSERT_TRUE(data.ok());
  Target root_target{data->root, false};
  ASSERT_EQ(write(targets[1], &root_target, sizeof(root_target)),
            static_cast<ssize_t>(sizeof(root_target)));
  std::map<char, int> root_acks;
  AwaitAcks(acks[0], kAllConnected, 1, 10000, &root_acks);
  EXPECT_EQ(root_acks[kAllConnected], 1) << "strangers could not all connect to the root";

  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      setenv("BRAID_TRANSPORTS", GetParam().c_str(), 1);
      setenv("BRAID_TIMEOUT", "10", 1);
      braidComm_t comm = nullptr;
      if (braidCommInitRank(&comm, n, id, r) != braidSuccess) {
        std::fprintf(stderr, "[rank %d] init: %s\n", r, braidGetLastError(nullptr));
        _exit(90);
      }
      // This rank's control listener goes to the driver; the kill waits for its strangers.
      Target mine{braid::LookupComm(comm)->controlAddress(r), true};
      if (write(targets[1], &mine, sizeof(mine)) != static_cast<ssize_t>(sizeof(mine))) _exit(91);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(92);
      if (r == victim) raise(SIGKILL);
      auto t0 = Clock::now();
      std::vector<int32_t> buf(1 << 16, 1);
      while (braidAllReduce(buf.data(), buf.data(), buf.size(), braidInt32, braidSum, comm) ==
             braidSuccess) {
      }
      braidComm_t small = nullptr;
      int excluded[] = {victim};
      if (braidCommShrink(comm, excluded, 1, &small, nullptr, 1) != braidSuccess) {
        std::fprintf(stderr, "[rank %d] shrink after %.1f s: %s\n", r, MsSince(t0) / 1000.0,
                     braidGetLastError(nullptr));
        _exit(1);
      }
      std::vector<int32_t> v(1000, r + 1), want(1000, 1 + 3 + 4);
      if (braidAllReduce(v.data(), v.data(), v.size(), braidInt32, braidSum, small) !=
              braidSuccess ||
          v != want) {
        std::fprintf(stderr, "[rank %d] all-reduce after shrink: %s\n", r,
                     braidGetLastError(small));
        _exit(2);
      }
      double took = MsSince(t0) / 1000.0;
      if (took > kRecoveryBoundS) {
        std::fprintf(stderr, "[rank %d] kill, shrink and all-reduce took %.1f s (bound %.0f s)\n",
                     r, took, kRecoveryBoundS);
        _exit(3);
      }
      braidCommDestroy(small);
      braidCommDestroy(comm);
      _exit(0);
    }
    pids.push_back(pid);
  }
  // Before the kill, every control listener has had 100 strangers connected, has dropped each of
  // them, and has 100 new ones.
  std::map<char, int> rank_acks;
  AwaitAcks(acks[0], kCycled, n, 30000, &rank_acks);
  EXPECT_EQ(rank_acks[kAllConnected], n) << "strangers could not all connect to the ranks";
  EXPECT_EQ(rank_acks[kCycled], n) << "the ranks' listeners did not drop their strangers";
  std::vector<char> bytes(n, 'g');
  ASSERT_EQ(write(go[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));

  // Wall-clock guard for the ranks.
  std::vector<int> status(n, -1);
  auto guard = Clock::now();
  for (int left = n; left > 0;) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] < 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pids[r] = -1;
      --left;
    }
    if (left > 0 && MsSince(guard) > 60000) {
      for (int r = 0; r < n; ++r)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          status[r] = 124;
        }
      ADD_FAILURE() << "wall-clock guard: ranks killed after 60 s";
      break;
    }
    usleep(5000);
  }
  StopRootProcess(root);
  ASSERT_EQ(write(stop[1], "s", 1), 1);
  int driver_status = 0;
  waitpid(driver, &driver_status, 0);
  for (int fd : {targets[0], targets[1], acks[0], acks[1], stop[0], stop[1], go[0], go[1]})
    close(fd);

  for (int r = 0; r < n; ++r) EXPECT_EQ(status[r], r == victim ? 128 + SIGKILL : 0) << "rank " << r;
  EXPECT_TRUE(WIFEXITED(driver_status) && WEXITSTATUS(driver_status) == 0)
      << "a stranger was not dropped within " << kDropBoundMs << " ms (see the driver's line)";
}

// The tcp data listener (issue 42, item 4): it used to hold a stranger open while no connect
// was in progress, and log one line per stranger when it finally dropped them. 4 ranks over tcp
// with lazy connections: before their first collective, 1000 strangers (idle, garbage, a
// truncated handshake) hit every rank's data listener; then the ranks run checked all-reduces
// while strangers keep coming. Every stranger is closed within 2 s of connecting, each rank logs
// a few lines about them, and every result is bit-exact.
constexpr int kDataStrangers = 1000;
constexpr int64_t kDataDropBoundMs = 2000;

// One stranger on the data listener: connects, sends what its kind sends, and waits for the
// listener to close it (reading and discarding its greeting).
struct DataStranger {
  int fd = -1;
  Clock::time_point since;
  int kind = 0;  // 0 idle, 1 garbage (a whole client message's worth), 2 a truncated handshake
  bool connected = false;
};

// Drives `total` strangers over `targets` (at most 64 open at once); returns the worst lifetime
// in ms of those the listeners accepted (-1 when one outlived 10 s); counts accepted and refused.
// `keep_going` is asked between strangers (false ends the run early).
int64_t DriveDataStrangers(const std::vector<sockaddr_storage>& targets, int total,
                           const std::function<bool()>& keep_going, int* accepted, int* refused) {
  std::vector<DataStranger> open;
  int started = 0;
  int64_t worst = 0;
  while ((started < total && keep_going()) || !open.empty()) {
    while (started < total && open.size() < 64 && keep_going()) {
      const sockaddr_storage& a = targets[static_cast<size_t>(started) % targets.size()];
      DataStranger st;
      st.kind = started % 3;
      st.fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
      ++started;
      if (st.fd < 0) continue;
      st.since = Clock::now();
      if (connect(st.fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 &&
          errno != EINPROGRESS) {
        ++*refused;
        close(st.fd);
        continue;
      }
      open.push_back(st);
    }
    std::vector<pollfd> fds;
    for (auto& st : open)
      fds.push_back({st.fd, static_cast<short>(st.connected ? POLLIN : POLLOUT), 0});
    poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < open.size(); ++i) {
      DataStranger& st = open[i];
      bool gone = false;
      if (!st.connected && fds[i].revents) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(st.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {  // refused: that listener closed (all its peers arrived)
          ++*refused;
          gone = true;
        } else {
          st.connected = true;
          st.since = Clock::now();
          ++*accepted;
          uint8_t junk[braid::kHandshakeClientBytes];
          for (size_t k = 0; k < sizeof(junk); ++k) junk[k] = static_cast<uint8_t>(k * 37 + 11);
          if (st.kind == 1) (void)!send(st.fd, junk, sizeof(junk), MSG_NOSIGNAL);
          if (st.kind == 2) (void)!send(st.fd, junk, sizeof(junk) / 2, MSG_NOSIGNAL);
        }
      } else if (st.connected && fds[i].revents) {
        char buf[256];
        ssize_t n = read(st.fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          worst = std::max(worst, MsSince(st.since));
          gone = true;
        }
      }
      if (!gone && st.connected && MsSince(st.since) > 10000) {
        worst = -1;
        gone = true;
      }
      if (gone) {
        close(st.fd);
        st.fd = -1;
      }
    }
    if (worst < 0) {
      for (auto& st : open)
        if (st.fd >= 0) close(st.fd);
      return -1;
    }
    open.erase(
        std::remove_if(open.begin(), open.end(), [](const DataStranger& st) { return st.fd < 0; }),
        open.end());
  }
  return worst;
}

TEST(DataListenerStrangers, ClosedWithinTwoSecondsWithAFewLogLinesAndResultsExact) {
  const int n = 4;
  // Every drop the ranks log is counted below: WARN, set before braid's first log call in this
  // process (the level is read once; ctest runs each test in a process of its own).
  setenv("BRAID_DEBUG", "WARN", 1);
  ASSERT_EQ(braid::CurrentLogLevel(), braid::LogLevel::kWarn)
      << "braid logged before this test set BRAID_DEBUG: run it in a process of its own";
  char dir[] = "/tmp/braid-strangers-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  int addrs[2], go[2];
  ASSERT_EQ(pipe(addrs), 0);
  ASSERT_EQ(pipe(go), 0);
  braidUniqueId id;
  ASSERT_EQ(braidGetUniqueId(&id), braidSuccess);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setpgid(0, 0);
      const std::string log = std::string(dir) + "/rank" + std::to_string(r) + ".log";
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      if (!f) _exit(95);
      setenv("BRAID_TRANSPORTS", "tcp", 1);
      setenv("BRAID_LAZY_CONNECT", "1", 1);
      setenv("BRAID_TIMEOUT", "20", 1);
      braidComm_t comm = nullptr;
      if (braidCommInitRank(&comm, n, id, r) != braidSuccess) {
        std::fprintf(stderr, "[rank %d] init: %s\n", r, braidGetLastError(nullptr));
        _exit(90);
      }
      // This rank's data listener goes to the parent (rank 0 has none: no lower rank connects
      // to it, so it closed at init; the parent is told so).
      sockaddr_storage mine{};
      auto a = braid::tcp::DecodeBlob(braid::LookupComm(comm)->transportBlob("tcp"));
      if (a.ok()) mine = *a;
      if (write(addrs[1], &mine, sizeof(mine)) != static_cast<ssize_t>(sizeof(mine))) _exit(91);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(92);
      std::vector<int32_t> v(1 << 14), want(1 << 14);
      for (int it = 0; it < 200; ++it) {
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(it)) % 1000) * (r + 1);
          want[i] =
              static_cast<int32_t>((i * 7 + static_cast<size_t>(it)) % 1000) * (1 + 2 + 3 + 4);
        }
        if (braidAllReduce(v.data(), v.data(), v.size(), braidInt32, braidSum, comm) !=
            braidSuccess) {
          std::fprintf(stderr, "[rank %d] all-reduce %d: %s\n", r, it, braidGetLastError(comm));
          _exit(1);
        }
        if (v != want) {
          std::fprintf(stderr, "[rank %d] all-reduce %d: wrong result\n", r, it);
          _exit(2);
        }
      }
      braidCommDestroy(comm);
      _exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<sockaddr_storage> targets;
  for (int r = 0; r < n; ++r) {
    sockaddr_storage a{};
    ASSERT_EQ(read(addrs[0], &a, sizeof(a)), static_cast<ssize_t>(sizeof(a)));
    if (a.ss_family != 0) targets.push_back(a);
  }
  ASSERT_EQ(targets.size(), static_cast<size_t>(n)) << "a rank published no tcp blob";
  // Before any collective: every listener but rank 0's is open (lazy: nobody connected yet).
  int accepted = 0, refused = 0;
  int64_t worst = DriveDataStrangers(
      targets, kDataStrangers, [] { return true; }, &accepted, &refused);
  EXPECT_GE(worst, 0) << "a stranger was still connected after 10 s";
  EXPECT_LE(worst, kDataDropBoundMs) << "a stranger lived " << worst << " ms";
  EXPECT_GE(accepted, kDataStrangers * 2 / 4) << "ranks 1-3's listeners must take 3 in 4";
  // Now collectives, with strangers still coming until the ranks are done.
  std::vector<char> bytes(n, 'g');
  ASSERT_EQ(write(go[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  std::vector<int> status(n, -1);
  int left = n;
  auto reap = [&] {
    for (int r = 0; r < n; ++r) {
      if (pids[r] < 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pids[r] = -1;
      --left;
    }
  };
  auto guard = Clock::now();
  int accepted2 = 0, refused2 = 0;
  worst = DriveDataStrangers(
      targets, 100000,
      [&] {
        reap();
        return left > 0 && MsSince(guard) < 60000;
      },
      &accepted2, &refused2);
  EXPECT_GE(worst, 0) << "a stranger was still connected after 10 s";
  EXPECT_LE(worst, kDataDropBoundMs) << "a stranger lived " << worst << " ms";
  while (left > 0 && MsSince(guard) < 60000) {
    reap();
    usleep(5000);
  }
  for (int r = 0; r < n; ++r)
    if (pids[r] > 0) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
      status[r] = 124;
      ADD_FAILURE() << "wall-clock guard: rank " << r << " killed after 60 s";
    }
  for (int fd : {addrs[0], addrs[1], go[0], go[1]}) close(fd);
  // The logs: a few lines per rank about strangers, whatever their number.
  for (int r = 0; r < n; ++r) {
    const std::string log = std::string(dir) + "/rank" + std::to_string(r) + ".log";
    FILE* f = std::fopen(log.c_str(), "r");
    ASSERT_NE(f, nullptr);
    int lines = 0;
    std::string all;
    char line[4096];
    while (std::fgets(line, sizeof(line), f)) {
      if (std::strstr(line, "dropped")) ++lines;
      if (all.size() < 4000) all += line;
    }
    std::fclose(f);
    unlink(log.c_str());
    EXPECT_EQ(status[r], 0) << "rank " << r << ":\n" << all;
    if (r > 0) {
      EXPECT_GE(lines, 1) << "rank " << r << " logged no drop at all:\n" << all;
    }
    EXPECT_LE(lines, 15) << "rank " << r << " logged " << lines << " lines about strangers:\n"
                         << all;
  }
  rmdir(dir);
  std::printf(
      "data listener strangers: %d accepted before the collectives, %d during (%d "
      "refused: listeners closed once their peers arrived)\n",
      accepted, accepted2, refused + refused2);
}

INSTANTIATE_TEST_SUITE_P(Fault, StrangersEverywhere, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace braid_test
