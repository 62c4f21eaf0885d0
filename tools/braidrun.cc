// braidrun: launches N local ranks of a braid program (spec/nccl-compat.md section 2).
//
//   braidrun -n N [--prefix-output] [--timeout SECONDS] [--] cmd args...
//   braidrun --emulate GxM [--link RATE[,DELAY[,LOSS]]] [--nics K] [...] [--] cmd args...
//
// With --emulate, the ranks run in an emulated cluster of G nodes with M ranks each
// (emulated_cluster.h, tools/emucluster): rank r in node r / M's network namespace with
// BRAID_HOSTID naming its node and BRAID_LOCAL_RANK/SIZE its place there, so ranks of one node
// use shm and ranks of different nodes TCP over the (optionally shaped) links. With --nics K
// every node has K links and local rank l uses eth(l mod K) (BRAID_SOCKET_IFNAME).
//
// braidrun serves the rendezvous itself (a thread of this process), so the ranks only need the
// id: each child gets BRAID_UNIQUE_ID (256 hex chars), BRAID_RANK, BRAID_WORLD_SIZE,
// BRAID_LOCAL_RANK and BRAID_LOCAL_SIZE, and braidInitFromEnv() does the rest. Each also gets
// BRAID_SECRET, a fresh 256-bit secret per job (unless the user exported one), so that anything
// in the job that rendezvouses by address (BRAID_COMM_ID) is authenticated too.
//
// Failure policy: the first rank that exits non-zero or dies from a signal, in time order,
// decides the exit status (its code, or 128+signal) and is the one named; the others get
// SIGTERM, then SIGKILL 2 s later, so a dead rank never leaves its peers waiting out their
// timeouts. SIGINT/SIGTERM sent to braidrun are forwarded to the ranks. Each rank runs in its
// own process group so that a rank that is a script takes its children down with it.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/net/bootstrap.h"
#include "emulated_cluster.h"
#include "core/base/config.h"
#include "core/net/unique_id.h"

extern char** environ;

namespace {

constexpr int kUsageError = 2;
constexpr int kTimeoutStatus = 124;  // like timeout(1)
constexpr int kExecFailed = 127;     // like the shell: command not found / not executable
constexpr int kMaxRanks = 4096;
constexpr auto kKillGrace = std::chrono::seconds(2);

void PrintUsage(FILE* out) {
  std::fprintf(
      out,
      "usage: braidrun -n N [--prefix-output] [--timeout SECONDS] [--] cmd [args...]\n"
      "       braidrun --emulate GxM [--link RATE[,DELAY[,LOSS]]] [--nics K] [options] [--] cmd\n"
      "  -n, --np N          number of ranks to start on this host (1..%d)\n"
      "  --emulate GxM       run G x M ranks in an emulated cluster of G nodes (network\n"
      "                      namespaces, root only), M ranks per node; removed at the end\n"
      "  --link SPEC         shape every node link: RATE (tbf), or RATE,DELAY[,LOSS] (netem),\n"
      "                      e.g. 1gbit or 1gbit,100us,0.1%%\n"
      "  --nics K            give every emulated node K links (NICs eth0..eth(K-1), 1..%d,\n"
      "                      each shaped by --link); local rank l uses eth(l mod K)\n"
      "  --prefix-output     prefix every output line with '[rank] '\n"
      "  --timeout SECONDS   kill all ranks after SECONDS and exit %d\n"
      "  -h, --help          this text\n"
      "Each rank gets BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE,\n"
      "BRAID_UNIQUE_ID and BRAID_SECRET (fresh per job unless set); braidInitFromEnv() reads\n"
      "them. The rendezvous listens on BRAID_SOCKET_IFNAME (default: automatic) and waits\n"
      "BRAID_TIMEOUT seconds.\n"
      "Exit status: 0 when every rank exits 0, else the status of the rank that failed first\n"
      "(128+signal for a signal).\n",
      kMaxRanks, braidrun::kMaxEmulatedNics, kTimeoutStatus);
}

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "braidrun: %s\n", msg.c_str());
  PrintUsage(stderr);
  std::exit(kUsageError);
}

bool ParseInt(const char* s, long lo, long hi, long* out) {
  if (!s || !*s) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

struct Options {
  int nranks = 0;
  braidrun::EmulationSpec emulate;
  bool prefix_output = false;
  double timeout_s = 0;  // 0 = none
  std::vector<std::string> cmd;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  bool nics_given = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& flag) -> const char* {
      if (i + 1 >= argc) UsageError(flag + " needs a value");
      return argv[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-h" || a == "--help") {
      PrintUsage(stdout);
      std::exit(0);
    } else if (a == "-n" || a == "--np" || a == "-np") {
      const char* v = value(a);
      long n;
      if (!ParseInt(v, 1, kMaxRanks, &n))
        UsageError(std::string("-n '") + v + "': expected a rank count in 1.." +
                   std::to_string(kMaxRanks));
      o.nranks = static_cast<int>(n);
    } else if (a.rfind("-n", 0) == 0 && a.size() > 2 && a[2] != '-') {
      long n;  // "-n4"
      if (!ParseInt(a.c_str() + 2, 1, kMaxRanks, &n))
        UsageError("'" + a + "': expected a rank count in 1.." + std::to_string(kMaxRanks));
      o.nranks = static_cast<int>(n);
    } else if (a == "--prefix-output") {
      o.prefix_output = true;
    } else if (a == "--emulate") {
      const char* v = value(a);
      if (!braidrun::ParseEmulation(v, &o.emulate))
        UsageError(std::string("--emulate '") + v +
                   "': expected GxM, G nodes (1..200) of M ranks (1..256), e.g. 2x4");
    } else if (a == "--link") {
      o.emulate.link = value(a);
      if (o.emulate.link.empty()) UsageError("--link needs RATE[,DELAY[,LOSS]]");
    } else if (a == "--nics") {
      const char* v = value(a);
      long k;
      if (!ParseInt(v, 1, braidrun::kMaxEmulatedNics, &k))
        UsageError(std::string("--nics '") + v + "': expected a NIC count per node in 1.." +
                   std::to_string(braidrun::kMaxEmulatedNics));
      o.emulate.nics = static_cast<int>(k);
      nics_given = true;
    } else if (a == "--timeout") {
      const char* v = value(a);
      char* end = nullptr;
      errno = 0;
      double t = std::strtod(v, &end);
      if (errno != 0 || *end != '\0' || !(t > 0) || t > 1e7)
        UsageError(std::string("--timeout '") + v + "': expected a positive number of seconds");
      o.timeout_s = t;
    } else if (a.size() > 1 && a[0] == '-') {
      UsageError("unknown option '" + a + "' (put '--' before a command that starts with '-')");
    } else {
      break;  // the command starts here
    }
  }
  for (; i < argc; ++i) o.cmd.push_back(argv[i]);
  if (o.emulate.nodes > 0) {
    const int total = o.emulate.nodes * o.emulate.ranks_per_node;
    if (o.nranks != 0 && o.nranks != total)
      UsageError("-n " + std::to_string(o.nranks) + " does not match --emulate " +
                 std::to_string(o.emulate.nodes) + "x" + std::to_string(o.emulate.ranks_per_node) +
                 " (" + std::to_string(total) + " ranks)");
    o.nranks = total;
  } else if (!o.emulate.link.empty()) {
    UsageError("--link shapes the links of --emulate; it needs --emulate GxM");
  } else if (nics_given) {
    UsageError("--nics gives the nodes of --emulate several links; it needs --emulate GxM");
  }
  if (o.nranks == 0) UsageError("missing -n N (the number of ranks)");
  if (o.cmd.empty()) UsageError("missing the command to run");
  return o;
}

// ------------------------------------------------------------------ signals

int g_wake_pipe[2] = {-1, -1};
volatile sig_atomic_t g_forward_signal = 0;

void OnSignal(int sig) {
  int saved = errno;
  if (sig == SIGINT || sig == SIGTERM) g_forward_signal = sig;
  char c = static_cast<char>(sig);
  ssize_t ignored = write(g_wake_pipe[1], &c, 1);  // wakes the poll loop
  (void)ignored;
  errno = saved;
}

void InstallSignalHandlers() {
  if (pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("braidrun: pipe");
    std::exit(1);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher before its ranks
}

// ------------------------------------------------------------------ output prefixing

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // stdout gone: nothing useful left to do with the bytes
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// One rank's stdout or stderr when --prefix-output is on: complete lines are written with one
// write() each so lines of different ranks never interleave mid-line.
struct Stream {
  int fd = -1;     // read end of the pipe; -1 once closed
  int out_fd = 1;  // where the lines go
  std::string prefix;
  std::string partial;

  void emit(const char* line, size_t n, bool add_newline) {
    std::string out;
    out.reserve(prefix.size() + n + 1);
    out += prefix;
    out.append(line, n);
    if (add_newline) out += '\n';
    WriteAll(out_fd, out.data(), out.size());
  }

  // Reads what is available; returns false on EOF/error (then the stream is closed).
  bool pump() {
    char buf[65536];
    for (;;) {
      ssize_t r = read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (r <= 0) {
        close();
        return false;
      }
      partial.append(buf, static_cast<size_t>(r));
      size_t start = 0;
      for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
        emit(partial.data() + start, nl - start + 1, false);
      partial.erase(0, start);
      // A runaway line without newline: pass it on in pieces rather than buffer it forever.
      if (partial.size() >= sizeof buf) {
        emit(partial.data(), partial.size(), true);
        partial.clear();
      }
    }
  }

  void close() {
    if (!partial.empty()) emit(partial.data(), partial.size(), true);
    partial.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// ------------------------------------------------------------------ ranks

struct Rank {
  pid_t pid = -1;
  int pidfd = -1;  // readable once the rank has exited (-1: kernel without pidfd_open)
  bool running = false;
  int status = 0;  // exit code or 128+signal once reaped
  Stream out, err;
};

int StatusOf(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

void SignalRanks(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (r.running) kill(-r.pid, sig);  // the rank's whole process group
}

// Exited ranks in the order they exited. A pidfd turns readable when its process exits, and
// epoll hands out ready descriptors in the order they became ready; waitpid(-1) instead returns
// the oldest child first, so of two ranks that exit between two looks (a crash, and a peer that
// fails a millisecond later because of it) it would blame the lower rank, not the cause.
class ExitOrder {
 public:
  ExitOrder() : epoll_(epoll_create1(EPOLL_CLOEXEC)) {}
  int fd() const { return epoll_; }
  // Watches `r` (index `i`) when it has a pidfd; false when it must be polled with waitpid.
  bool watch(Rank& r, size_t i) {
    if (epoll_ < 0 || r.pidfd < 0) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    return epoll_ctl(epoll_, EPOLL_CTL_ADD, r.pidfd, &ev) == 0;
  }
  // Reaps every rank that has exited, calling on_exit(index, wait status) in exit order.
  template <typename F>
  void reap(std::vector<Rank>& ranks, F on_exit) {
    for (bool more = epoll_ >= 0; more;) {
      epoll_event ev[64];
      int n = epoll_wait(epoll_, ev, 64, 0);
      more = n == 64;
      for (int k = 0; k < n; ++k) {
        Rank& r = ranks[ev[k].data.u64];
        int wstatus = 0;
        if (!r.running || waitpid(r.pid, &wstatus, WNOHANG) != r.pid) continue;
        epoll_ctl(epoll_, EPOLL_CTL_DEL, r.pidfd, nullptr);
        ::close(r.pidfd);
        r.pidfd = -1;
        on_exit(static_cast<size_t>(ev[k].data.u64), wstatus);
      }
    }
    // Ranks without a pidfd: no order among them is known.
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      int wstatus = 0;
      if (r.running && r.pidfd < 0 && waitpid(r.pid, &wstatus, WNOHANG) == r.pid)
        on_exit(i, wstatus);
    }
  }

 private:
  int epoll_;
};

std::vector<std::string> RankEnvironment(int rank, int nranks, const std::string& id_hex,
                                         const std::string& secret) {
  static const char* kOwned[] = {"BRAID_RANK=",       "BRAID_WORLD_SIZE=", "BRAID_LOCAL_RANK=",
                                 "BRAID_LOCAL_SIZE=", "BRAID_UNIQUE_ID=",  "BRAID_SECRET="};
  // In an emulated cluster the node identity and the interface are ours to set too.
  static const char* kEmulationOwned[] = {"BRAID_HOSTID=", "BRAID_SOCKET_IFNAME="};
  const bool emulated = braidrun::EmulatedCluster::active();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool owned = false;
    for (const char* k : kOwned) owned |= std::strncmp(*e, k, std::strlen(k)) == 0;
    for (const char* k : kEmulationOwned)
      owned |= emulated && std::strncmp(*e, k, std::strlen(k)) == 0;
    if (!owned) env.emplace_back(*e);
  }
  int local_rank = rank, local_size = nranks;
  if (emulated) {
    const int m = braidrun::EmulatedCluster::spec().ranks_per_node;
    const int node = braidrun::EmulatedCluster::NodeOf(rank);
    local_rank = rank % m;
    local_size = m;
    env.push_back("BRAID_HOSTID=" + braidrun::EmulatedCluster::HostId(node));
    env.push_back("BRAID_SOCKET_IFNAME=" + braidrun::EmulatedCluster::Interface(rank));
  }
  env.push_back("BRAID_RANK=" + std::to_string(rank));
  env.push_back("BRAID_WORLD_SIZE=" + std::to_string(nranks));
  env.push_back("BRAID_LOCAL_RANK=" + std::to_string(local_rank));
  env.push_back("BRAID_LOCAL_SIZE=" + std::to_string(local_size));
  env.push_back("BRAID_UNIQUE_ID=" + id_hex);
  env.push_back("BRAID_SECRET=" + secret);
  return env;
}

// Forks one rank. Everything the child needs is prepared before fork(): between fork and exec
// only async-signal-safe calls are allowed (the rendezvous thread may hold malloc's lock).
Rank SpawnRank(int rank, const Options& o, const std::string& id_hex, const std::string& secret) {
  std::vector<std::string> env_strings = RankEnvironment(rank, o.nranks, id_hex, secret);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.cmd;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string exec_error =
      "braidrun: rank " + std::to_string(rank) + ": cannot execute '" + o.cmd[0] + "': ";
  const int netns =
      braidrun::EmulatedCluster::active()
          ? braidrun::EmulatedCluster::NamespaceFd(braidrun::EmulatedCluster::NodeOf(rank))
          : -1;
  static const char kSetnsError[] = "braidrun: cannot enter the rank's emulated node (setns)\n";

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (o.prefix_output && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    std::perror("braidrun: pipe");
    std::exit(1);
  }
  // Signals stay blocked across fork() until the child has reset our handlers: a SIGTERM that
  // arrived in between would otherwise run OnSignal in the child and be lost.
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGCHLD);
  sigprocmask(SIG_BLOCK, &block, &old_mask);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("braidrun: fork");
    std::exit(1);
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
    if (getppid() != parent) _exit(kExecFailed);
    // Ranks are in their own process groups, so a terminal read would stop them (SIGTTIN).
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (o.prefix_output) {
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGINT, &dfl, nullptr);
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGCHLD, &dfl, nullptr);
    sigaction(SIGPIPE, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (netns >= 0 && setns(netns, CLONE_NEWNET) != 0) {
      WriteAll(2, kSetnsError, sizeof kSetnsError - 1);
      _exit(kExecFailed);
    }
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    const char* why = strerror(err);
    WriteAll(2, exec_error.data(), exec_error.size());
    WriteAll(2, why, std::strlen(why));
    WriteAll(2, "\n", 1);
    _exit(kExecFailed);
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  setpgid(pid, pid);  // also here, so kill(-pid) works before the child gets to run
  Rank r;
  r.pid = pid;
  r.running = true;
#ifdef SYS_pidfd_open
  // Before any waitpid: the pid cannot have been reaped, and so not reused, yet.
  r.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#endif
  if (o.prefix_output) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    char prefix[32];  // snprintf, not string concatenation: GCC 12 warns falsely (-Wrestrict)
    std::snprintf(prefix, sizeof prefix, "[%d] ", rank);
    r.out = Stream{out_pipe[0], 1, prefix, {}};
    r.err = Stream{err_pipe[0], 2, prefix, {}};
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = ParseArgs(argc, argv);

  auto config = braid::LoadConfigFromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "braidrun: bad configuration: %s\n", config.status().message().c_str());
    return kUsageError;
  }
  braid::RendezvousOptions ropts;
  ropts.ifname = config->socket_ifname;
  ropts.timeout_ms = config->timeout_ms;
  std::fflush(nullptr);  // the cluster script writes to our stdout too
  if (o.emulate.nodes > 0) {
    braidrun::EmulatedCluster::Start(o.emulate);
    ropts.ifname = "eth0";
  }
  // The rendezvous serves from node 0 when emulating: its socket is made in that namespace,
  // where every node can reach it.
  auto id =
      o.emulate.nodes > 0
          ? braidrun::EmulatedCluster::InNodeZero([&] { return braid::StartRendezvous(ropts); })
          : braid::StartRendezvous(ropts);
  if (!id.ok()) {
    std::fprintf(stderr, "braidrun: cannot start the rendezvous service: %s\n",
                 id.status().message().c_str());
    return 1;
  }
  braidUniqueId encoded;
  braid::EncodeUniqueId(*id, &encoded);
  std::string id_hex =
      braid::HexOf(reinterpret_cast<const uint8_t*>(encoded.internal), sizeof encoded.internal);
  // The user's BRAID_SECRET wins (ranks of several launches may have to share one).
  std::string secret = config->secret;
  if (secret.empty()) {
    braid::UniqueIdData fresh;
    if (!braid::RandomizeUniqueId(&fresh).ok()) {
      std::fprintf(stderr, "braidrun: cannot generate a secret: no system random generator\n");
      return 1;
    }
    secret = braid::HexOf(fresh.secret.data(), fresh.secret.size());
  }

  InstallSignalHandlers();
  std::fflush(nullptr);  // children must not inherit (and re-flush) our buffered output
  std::vector<Rank> ranks;
  ranks.reserve(o.nranks);
  ExitOrder exits;
  for (int r = 0; r < o.nranks; ++r) {
    ranks.push_back(SpawnRank(r, o, id_hex, secret));
    if (!exits.watch(ranks.back(), ranks.size() - 1) && ranks.back().pidfd >= 0) {
      ::close(ranks.back().pidfd);
      ranks.back().pidfd = -1;
    }
  }

  using SteadyClock = std::chrono::steady_clock;
  const auto start = SteadyClock::now();
  int first_failure = 0;     // status of the first rank that failed (0 = none yet)
  bool killing = false;      // SIGTERM sent to everyone still running
  bool killed_hard = false;  // SIGKILL sent
  SteadyClock::time_point kill_at{};
  int running = o.nranks;
  bool timed_out = false;

  auto start_killing = [&]() {
    if (killing) return;
    killing = true;
    kill_at = SteadyClock::now() + kKillGrace;
    SignalRanks(ranks, SIGTERM);
  };

  while (running > 0) {
    std::vector<pollfd> fds;
    fds.push_back({g_wake_pipe[0], POLLIN, 0});
    if (exits.fd() >= 0) fds.push_back({exits.fd(), POLLIN, 0});
    for (auto& r : ranks)
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), 100);  // also a tick for timeouts and missed SIGCHLD
    if (rc < 0 && errno != EINTR) {
      std::perror("braidrun: poll");
      break;
    }
    char drain[64];
    while (read(g_wake_pipe[0], drain, sizeof drain) > 0) {
    }
    for (auto& r : ranks)
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) s->pump();

    if (int sig = g_forward_signal) {
      g_forward_signal = 0;
      SignalRanks(ranks, sig);
      if (!killing) {  // ranks that ignore the signal still go away
        killing = true;
        kill_at = SteadyClock::now() + kKillGrace;
      }
    }

    exits.reap(ranks, [&](size_t i, int wstatus) {
      Rank& r = ranks[i];
      r.running = false;
      r.status = StatusOf(wstatus);
      --running;
      if (r.status == 0 || first_failure != 0) return;
      first_failure = r.status;
      // Ranks that braidrun itself is stopping (a timeout, a forwarded signal) are no failure
      // to report.
      if (!killing)
        std::fprintf(stderr, "braidrun: rank %zu (pid %d) %s %d%s\n", i, static_cast<int>(r.pid),
                     WIFSIGNALED(wstatus) ? "died from signal" : "exited with status",
                     WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : r.status,
                     running > 0 ? "; stopping the other ranks" : "");
      start_killing();
    });

    auto now = SteadyClock::now();
    if (o.timeout_s > 0 && !timed_out &&
        now - start >= std::chrono::duration<double>(o.timeout_s)) {
      timed_out = true;
      std::fprintf(stderr, "braidrun: timeout after %g s; stopping %d running rank(s)\n",
                   o.timeout_s, running);
      start_killing();
    }
    if (killing && !killed_hard && now >= kill_at) {
      killed_hard = true;
      SignalRanks(ranks, SIGKILL);
    }
  }

  // The ranks are gone; take what they wrote last. A grandchild still holding a pipe open must
  // not keep us here, so only what is already buffered is read.
  for (auto& r : ranks)
    for (Stream* s : {&r.out, &r.err})
      if (s->fd >= 0) {
        s->pump();
        s->close();
      }
  if (timed_out) return kTimeoutStatus;
  return first_failure;
}
