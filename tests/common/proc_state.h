// The state of a process or thread in /proc: its state letter ('S' asleep, 'T' stopped, 'Z' exited
// but not reaped) and the system call it sleeps in. What tests that wait for a peer or a thread to
// reach a state read, instead of sleeping and hoping it got there. Shared by the unit and fault
// tiers.
#pragma once

#include <dirent.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>

namespace braid_test_common {

// Entries of a /proc directory of this process (/proc/self/fd: its descriptors, /proc/self/task:
// its threads), for tests that check nothing grew.
inline int CountEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// This process's address space in bytes (the first field of /proc/self/statm, in pages): what
// RLIMIT_AS caps, so a test that makes a rank run out of memory sets the limit a little above
// it. 0 when it cannot be read.
inline long long AddressSpaceBytes() {
  long long pages = 0;
  std::ifstream in("/proc/self/statm");
  if (!(in >> pages)) pages = 0;
  return pages * sysconf(_SC_PAGESIZE);
}

// This process's resident memory in KiB (VmRSS); -1 when it cannot be read.
inline long RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// A thread id names a /proc entry of its own, so `id` may be a process's or a thread's; '?' when
// it cannot be read (gone).
inline char ProcState(pid_t id) {
  std::ifstream in("/proc/" + std::to_string(id) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

// The number of the system call that thread `id` (of this process) is blocked in: the kernel
// gives it in /proc/<id>/syscall only while the thread sleeps in one ("running" otherwise). -1
// while it runs, sleeps outside a system call, or is gone.
inline long BlockedSyscall(pid_t id) {
  std::ifstream in("/proc/" + std::to_string(id) + "/syscall");
  long nr = -1;
  return in >> nr ? nr : -1;
}

// poll() as the C library makes it (poll, or ppoll where the kernel has no poll), and the sleeps
// of std::this_thread::sleep_for and nanosleep().
#ifdef SYS_poll
inline constexpr std::initializer_list<long> kPollSyscalls = {SYS_poll, SYS_ppoll};
#else
inline constexpr std::initializer_list<long> kPollSyscalls = {SYS_ppoll};
#endif
#ifdef SYS_nanosleep
inline constexpr std::initializer_list<long> kSleepSyscalls = {SYS_nanosleep, SYS_clock_nanosleep};
#else
inline constexpr std::initializer_list<long> kSleepSyscalls = {SYS_clock_nanosleep};
#endif

// Waits until thread `id` is blocked in one of the system calls `nrs` (in any, when `nrs` is
// empty): the event a test must see before it acts, when what it asserts is how that sleeper is
// woken. Looks every 100 us (pacing the look, not ordering anything) for at most `limit_ms`;
// false when the thread never got there.
inline bool WaitUntilBlockedIn(pid_t id, std::initializer_list<long> nrs, int limit_ms = 30000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  for (;;) {
    const long nr = BlockedSyscall(id);
    if (nr >= 0 && nrs.size() == 0) return true;
    for (long n : nrs)
      if (nr == n) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}
inline bool WaitUntilBlocked(pid_t id, int limit_ms = 30000) {
  return WaitUntilBlockedIn(id, {}, limit_ms);
}

// The calling thread's id, for another thread to watch it with the functions above.
inline pid_t ThisThreadId() {
  return static_cast<pid_t>(syscall(SYS_gettid));
}

}  // namespace braid_test_common
