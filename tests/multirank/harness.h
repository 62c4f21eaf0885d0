// Fork-based multi-rank harness: runs a body in N real processes joined by a fresh unique id,
// over the real transports, with a wall-clock guard so a hang fails the test instead of CI.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "braid/braid.h"
#include "common/proc_state.h"

// Inside a rank's function (`rank` in scope, returning int): when `cond` is false, prints the
// rank, the condition, the printf-style message and `detail` (a C string, e.g. braid's last
// error), and returns 1 so that the harness reports the rank as failed. Shared by the multirank
// tests; a file whose failures need another detail (the sharding layer's error) redefines
// CHECK_OR_FAIL on top of CHECK_OR_FAIL_WITH.
#define CHECK_OR_FAIL_WITH(detail, cond, ...)              \
  do {                                                     \
    if (!(cond)) {                                         \
      std::fprintf(stderr, "[rank %d] %s: ", rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                   \
      std::fprintf(stderr, " (%s)\n", (detail));           \
      return 1;                                            \
    }                                                      \
  } while (0)
#define CHECK_OR_FAIL(cond, ...) CHECK_OR_FAIL_WITH(braidGetLastError(nullptr), cond, __VA_ARGS__)

namespace braid_test {

struct RankOutcome {
  int exit_code = -1;  // 0 = body succeeded; 124 = killed by the guard; 128+sig = signal
  bool timed_out = false;
};

struct JobOptions {
  int nranks = 2;
  int timeout_s = 120;                                   // wall-clock guard for the whole job
  std::vector<std::pair<std::string, std::string>> env;  // set in every rank before init
  bool init = true;  // false: the body gets a NULL comm and does its own init
};

// The body runs in each rank's process; return 0 for success. Anything printed to stderr shows
// in the test log with the rank prefix the body adds.
using RankBody =
    std::function<int(braidComm_t comm, int rank, int nranks, const braidUniqueId& id)>;

// Emulated nodes (tools/ucx-emulated-tier.sh): with BRAID_TEST_EMULATE=<cluster>:<G> in the
// test's environment, the ranks of every job run across the G nodes of an emulated cluster made
// by tools/emucluster (network namespaces <cluster>-n0 .. -n<G-1>): rank r of n in node r * G / n,
// and the rendezvous root in node 0, each on the node's eth0 (BRAID_SOCKET_IFNAME). So the same
// tests that run on one host run across nodes whose traffic crosses the emulated links. Called
// in the forked process first thing; false (with a message) when it cannot enter the node.
inline bool EnterEmulatedNode(int rank, int nranks) {
  const char* spec = std::getenv("BRAID_TEST_EMULATE");
  if (!spec || !*spec) return true;
  const std::string s = spec;
  const size_t colon = s.find(':');
  const int g = colon == std::string::npos ? 0 : std::atoi(s.c_str() + colon + 1);
  if (g < 1 || nranks < 1) {
    std::fprintf(stderr, "BRAID_TEST_EMULATE='%s': want <cluster>:<nodes>\n", spec);
    return false;
  }
  const int node = static_cast<int>(static_cast<long>(rank) * g / nranks);
  const std::string ns = "/run/netns/" + s.substr(0, colon) + "-n" + std::to_string(node);
  const int fd = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "cannot enter %s (rank %d): %s\n", ns.c_str(), rank, strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  close(fd);
  // As `ip netns exec` does: /sys of the node's namespace, so that its interfaces are the ones
  // listed there (UCX and the topology discovery read /sys/class/net).
  if (unshare(CLONE_NEWNS) == 0 && mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
      umount2("/sys", MNT_DETACH) == 0)
    mount(ns.c_str(), "/sys", "sysfs", 0, nullptr);
  setenv("BRAID_SOCKET_IFNAME", "eth0", 1);
  return true;
}

// Runs the rendezvous service in a process of its own and returns its pid (and the id).
// The test process itself never starts the service thread: forking ranks from a process with a
// running thread can leave a child with an allocator lock held forever (ASan's allocator has no
// fork handler). Kill the returned pid when the job is over.
inline pid_t StartRootProcess(braidUniqueId* id) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (!EnterEmulatedNode(0, 1)) _exit(1);
    braidUniqueId mine;
    if (braidGetUniqueId(&mine) != braidSuccess) {
      std::fprintf(stderr, "braidGetUniqueId failed: %s\n", braidGetLastError(nullptr));
      _exit(1);
    }
    if (write(fds[1], &mine, sizeof(mine)) != static_cast<ssize_t>(sizeof(mine))) _exit(1);
    close(fds[1]);
    for (;;) pause();  // the service thread serves the job; the harness kills us after it
  }
  close(fds[1]);
  ssize_t n = pid > 0 ? read(fds[0], id, sizeof(*id)) : -1;
  close(fds[0]);
  if (n != static_cast<ssize_t>(sizeof(*id))) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    return -1;
  }
  return pid;
}

inline void StopRootProcess(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// Stops a rendezvous process (StartRootProcess) when the scope ends.
struct RootProcessGuard {
  pid_t pid;
  ~RootProcessGuard() { StopRootProcess(pid); }
};

inline std::vector<RankOutcome> RunJob(const JobOptions& opt, const RankBody& body) {
  std::vector<RankOutcome> out(opt.nranks);
  // A rank forked beside a running thread can inherit a lock that thread held (ASan's allocator
  // has no fork handler; a service thread authenticating, a worker allocating): the child then
  // hangs until the guard kills the job, now and then. Refuse at once instead of flaking; start
  // services in a process of their own (StartRootProcess).
  // A thread that ends on its own is waited for (bounded): the bootstrap root's service thread of
  // an in-process braidGetUniqueId is detached and exits just after its ranks connected, so a
  // test that made a communicator in this process and destroyed it may still see it (about a
  // third of the time right after braidCommDestroy).
  int threads = braid_test_common::CountEntries("/proc/self/task");
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       threads > 1 && std::chrono::steady_clock::now() < until;
       threads = braid_test_common::CountEntries("/proc/self/task"))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (threads > 1) {
    std::fprintf(stderr,
                 "harness: the test process runs %d threads; ranks forked now may inherit a held "
                 "lock (join them first, or start the service with StartRootProcess)\n",
                 threads);
    return out;
  }
  braidUniqueId id;
  pid_t root = StartRootProcess(&id);
  if (root < 0) return out;
  RootProcessGuard root_guard{root};
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(opt.nranks, -1);
  for (int r = 0; r < opt.nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      if (!EnterEmulatedNode(r, opt.nranks)) _exit(95);
      // The tuner's default link model unless the test (or the environment) asks for the
      // measurement: the measured one varies with the machine's load, so the algorithms a
      // test's calls take would too, and measuring costs every job's init about 0.1 s on a busy
      // 2-core machine. link_calibration_test measures.
      setenv("BRAID_LINK_CALIBRATION", "0", 0);
      for (const auto& [k, v] : opt.env) setenv(k.c_str(), v.c_str(), 1);
      braidComm_t comm = nullptr;
      if (opt.init) {
        braidResult_t rc = braidCommInitRank(&comm, opt.nranks, id, r);
        if (rc != braidSuccess) {
          std::fprintf(stderr, "[rank %d] init failed: %s\n", r, braidGetLastError(nullptr));
          _exit(90);
        }
      }
      int code = body(comm, r, opt.nranks, id);
      if (comm && braidCommDestroy(comm) != braidSuccess) {
        std::fprintf(stderr, "[rank %d] destroy failed: %s\n", r, braidGetLastError(nullptr));
        if (code == 0) code = 91;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
  int left = opt.nranks;
  while (left > 0) {
    for (int r = 0; r < opt.nranks; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      pid_t w = waitpid(pids[r], &status, WNOHANG);
      if (w == pids[r]) {
        out[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[r] = -1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < opt.nranks; ++r) {
        if (pids[r] < 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        out[r].exit_code = 124;
        out[r].timed_out = true;
        pids[r] = -1;
      }
      std::fprintf(stderr, "wall-clock guard: job of %d ranks killed after %d s\n", opt.nranks,
                   opt.timeout_s);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

// "rank 0: 0, rank 1: 124 (timed out)" for assertion messages.
inline std::string DescribeOutcomes(const std::vector<RankOutcome>& v) {
  std::string s;
  for (size_t r = 0; r < v.size(); ++r)
    s += "rank " + std::to_string(r) + ": " + std::to_string(v[r].exit_code) +
         (v[r].timed_out ? " (timed out)" : "") + (r + 1 < v.size() ? ", " : "");
  return s;
}

// The name of a test parameterised by (ranks, transport, ...): "n4_tcp" ('-' in the transport
// becomes '_', which gtest names allow). Appended piece by piece: one chain of + trips GCC 12's
// -Wrestrict false positive.
template <typename ParamInfo>
std::string RanksTransportName(const ParamInfo& info) {
  std::string name = "n";
  name += std::to_string(std::get<0>(info.param));
  name += '_';
  for (char c : std::string(std::get<1>(info.param))) name += c == '-' ? '_' : c;
  return name;
}

inline bool AllSucceeded(const std::vector<RankOutcome>& v) {
  for (const auto& o : v)
    if (o.exit_code != 0) return false;
  return true;
}

}  // namespace braid_test
