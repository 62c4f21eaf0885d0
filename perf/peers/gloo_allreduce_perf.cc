// gloo_allreduce_perf: Gloo's ring all-reduce (gloo::AllreduceRing<float>, sum) over its TCP
// transport on loopback, timed the way braid's all_reduce_perf times it, for perf/compare.
//
//   gloo_allreduce_perf -np N [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
//
// Forks N ranks; they rendezvous through a gloo::rendezvous::FileStore in a fresh temporary
// directory. Gloo's all-reduce works in place on one buffer bound at construction, so (unlike
// braid's harness) the buffer does not move between iterations. Per size: warm-up, barrier,
// ITERS runs, time per op averaged over ranks. Rows use the nccl-tests layout; exit status 7
// when the check finds a wrong element.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "gloo/allreduce_ring.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace {

struct Options {
  int nranks = 2;
  unsigned long long min_bytes = 8, max_bytes = 64ull << 20, factor = 2;
  int iters = 20, warmup = 1, check = 1;
};

bool ParseSize(const char* s, unsigned long long* out) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return false;
  if (*end == 'K' || *end == 'k')
    v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm')
    v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g')
    v <<= 30, ++end;
  if (*end != '\0') return false;
  *out = v;
  return true;
}

std::string TimeStr(double us) {
  char buf[32];
  if (us >= 10000.0)
    std::snprintf(buf, sizeof buf, "%7.0f", us);
  else if (us >= 100.0)
    std::snprintf(buf, sizeof buf, "%7.1f", us);
  else
    std::snprintf(buf, sizeof buf, "%7.2f", us);
  return buf;
}

// The exit fence. Gloo reports "connection closed by peer" when a rank tears its pairs down while
// another rank still has an operation on them, even one that already moved its last byte (seen
// as a rare failure of the final barrier). So no rank destroys its context before every rank has
// finished: each writes one byte to `done` and waits for EOF on `go`, which the parent closes once
// it has all N bytes (or a rank died, when it kills them all anyway).
struct ExitFence {
  int done_w = -1;
  int go_r = -1;
  void arrive() const {
    char b = 1;
    if (write(done_w, &b, 1) != 1) return;
    while (read(go_r, &b, 1) > 0 || errno == EINTR) {
    }
  }
};

int RunRank(int rank, const Options& o, const std::string& dir, const ExitFence& fence) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";  // loopback: every rank is on this host
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(dir);
  gloo::rendezvous::PrefixStore store("gloo_allreduce_perf", file_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.nranks);
  ctx->connectFullMesh(store, dev);
  const int n = o.nranks;

  std::vector<float> buf(o.max_bytes / sizeof(float) + 1, 0.0f);
  double t = 0;
  gloo::AllreduceRing<double> time_sum(ctx, {&t}, 1);
  gloo::BarrierAllToAll barrier(ctx);
  if (rank == 0) {
    std::printf(
        "# gloo_allreduce_perf: gloo::AllreduceRing<float> sum over tcp (loopback), %d ranks, in "
        "place\n",
        n);
    std::printf(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n");
    std::printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)\n");
  }
  unsigned long long total_wrong = 0;
  for (unsigned long long size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const int count = static_cast<int>(size / sizeof(float));
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    std::fill(buf.begin(), buf.begin() + count, 0.0f);  // zeros stay zeros: no overflow to inf
    gloo::AllreduceRing<float> allreduce(ctx, {buf.data()}, count);
    for (int w = 0; w < o.warmup; ++w) allreduce.run();
    barrier.run();
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o.iters; ++it) allreduce.run();
    double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.iters;
    t = sec;
    time_sum.run();
    sec = t / n;
    unsigned long long wrong = 0;
    if (o.check) {
      for (int i = 0; i < count; ++i) buf[i] = static_cast<float>((7ull * i + 13ull * rank) % 101);
      allreduce.run();
      for (int i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<double>((7ull * i + 13ull * r) % 101);
        wrong += buf[i] != static_cast<float>(want);
      }
      total_wrong += wrong;  // rank 0's view; every rank checks its own copy
    }
    if (rank == 0) {
      double algbw = sec > 0 ? static_cast<double>(bytes) / 1e9 / sec : 0;
      std::printf("%12zu  %12d  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6llu  %7s  %6s  %6s  %6s\n",
                  bytes, count, "float", "sum", -1, TimeStr(sec * 1e6).c_str(), algbw,
                  algbw * 2.0 * (n - 1) / n, wrong, "N/A", "N/A", "N/A", "N/A");
      std::fflush(stdout);
    }
    if (size > o.max_bytes / o.factor) break;
  }
  barrier.run();
  if (rank == 0)
    std::printf("# Out of bounds values : %llu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  std::fflush(stdout);
  fence.arrive();  // the context (and its connections) dies only after this
  return total_wrong ? 7 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    std::string a = argv[i];
    bool ok = v != nullptr;
    if (ok && a == "-np")
      ok = (o.nranks = std::atoi(v)) >= 1 && o.nranks <= 256;
    else if (ok && a == "-b")
      ok = ParseSize(v, &o.min_bytes);
    else if (ok && a == "-e")
      ok = ParseSize(v, &o.max_bytes);
    else if (ok && a == "-f")
      ok = ParseSize(v, &o.factor) && o.factor >= 2;
    else if (ok && a == "-n")
      ok = (o.iters = std::atoi(v)) >= 1;
    else if (ok && a == "-w")
      ok = (o.warmup = std::atoi(v)) >= 0;
    else if (ok && a == "-c")
      ok = (o.check = std::atoi(v)) >= 0;
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "gloo_allreduce_perf: bad option '%s' (use -np -b -e -f -n -w -c)\n",
                   a.c_str());
      return 2;
    }
    ++i;
  }
  if (o.min_bytes == 0 || o.min_bytes > o.max_bytes || o.max_bytes / sizeof(float) > 0x7fffffff) {
    std::fprintf(stderr, "gloo_allreduce_perf: need 0 < -b <= -e < 8G\n");
    return 2;
  }
  char tmpl[] = "/tmp/gloo_allreduce_perf.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("gloo_allreduce_perf: mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  int done_pipe[2], go_pipe[2];
  if (pipe(done_pipe) != 0 || pipe(go_pipe) != 0) {
    std::perror("gloo_allreduce_perf: pipe");
    return 1;
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("gloo_allreduce_perf: fork");
      return 1;
    }
    if (pid == 0) {
      close(done_pipe[0]);
      close(go_pipe[1]);
      const ExitFence fence{done_pipe[1], go_pipe[0]};
      int status = 1;
      try {
        status = RunRank(r, o, dir, fence);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_allreduce_perf: rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      _exit(status);
    }
    pids.push_back(pid);
  }
  close(done_pipe[1]);
  close(go_pipe[0]);
  int result = 0;
  size_t exited = 0;
  auto reap = [&](int ws) {
    ++exited;
    int st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    if (st != 0 && result == 0) {
      result = st;
      for (pid_t other : pids) kill(other, SIGTERM);  // a dead rank would hang the others
    }
  };
  // Release the fence when every rank has arrived; meanwhile reap ranks that die before it.
  int arrived = 0;
  while (arrived < o.nranks && result == 0) {
    pollfd p{done_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 100) == 1) {
      char b[64];
      ssize_t n = read(done_pipe[0], b, sizeof b);
      if (n > 0) arrived += static_cast<int>(n);
    }
    int ws = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) reap(ws);
    if (exited == pids.size()) break;
  }
  close(go_pipe[1]);
  close(done_pipe[0]);
  while (exited < pids.size()) {
    int ws = 0;
    pid_t pid = waitpid(-1, &ws, 0);
    if (pid < 0 && errno != EINTR) break;
    if (pid > 0) reap(ws);
  }
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "gloo_allreduce_perf: cannot remove %s\n", dir.c_str());
  return result;
}
