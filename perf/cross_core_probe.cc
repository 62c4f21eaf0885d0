// cross_core_probe: how fast two cores of this machine reach each other now, for perf/compare's
// slow-phase check.
//
//   build/perf/cross_core_probe [-n ROUND_TRIPS]
//
// Two threads, pinned to the first two CPUs this process may run on, bounce a cache line
// ROUND_TRIPS times (default 20000); prints the round trip in ns. On this project's VM a round
// trip takes about 100 ns most of the time and 400-450 ns in the host's slow phases (its two
// vCPUs then sit far apart), when every multi-rank benchmark takes 2.5-3x longer while a one-core
// memory copy runs at its usual rate: so this, and not a memcpy, tells a slow phase
// (docs/performance.md, perf/README.md). Exit 2 when fewer than two CPUs are available.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

struct alignas(64) Line {
  std::atomic<long> value{0};
};
Line g_ping, g_pong;

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  long trips = 20000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      trips = std::strtol(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: cross_core_probe [-n ROUND_TRIPS]\n");
      return 2;
    }
  }
  if (trips < 1) {
    std::fprintf(stderr, "cross_core_probe: -n must be at least 1\n");
    return 2;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    std::perror("cross_core_probe: sched_getaffinity");
    return 2;
  }
  int cpus[2] = {-1, -1};
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[k++] = c;
  if (cpus[1] < 0) {
    std::fprintf(stderr, "cross_core_probe: needs two CPUs, this process may use one\n");
    return 2;
  }
  std::thread echo([&] {
    Pin(cpus[1]);
    for (long i = 1; i <= trips; ++i) {
      while (g_ping.value.load(std::memory_order_acquire) != i) Relax();
      g_pong.value.store(i, std::memory_order_release);
    }
  });
  if (!Pin(cpus[0])) {
    std::perror("cross_core_probe: pthread_setaffinity_np");
    return 2;
  }
  // The first trips bring the lines and the threads up; time the rest.
  const long warm = trips / 10;
  std::chrono::steady_clock::time_point start;
  for (long i = 1; i <= trips; ++i) {
    if (i == warm + 1) start = std::chrono::steady_clock::now();
    g_ping.value.store(i, std::memory_order_release);
    while (g_pong.value.load(std::memory_order_acquire) != i) Relax();
  }
  const auto end = std::chrono::steady_clock::now();
  echo.join();
  const double ns = std::chrono::duration<double, std::nano>(end - start).count();
  std::printf("round_trip_ns %.1f cpus %d,%d\n", ns / static_cast<double>(trips - warm), cpus[0],
              cpus[1]);
  return 0;
}
