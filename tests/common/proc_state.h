// The state letter of a process or thread in /proc ('S' asleep, 'T' stopped, 'Z' exited but not
// reaped): what tests that wait for a peer or a thread to reach a state read. Shared by the unit
// and fault tiers.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <string>

namespace braid_test_common {

// A thread id names a /proc entry of its own, so `id` may be a process's or a thread's; '?' when
// it cannot be read (gone).
inline char ProcState(pid_t id) {
  std::ifstream in("/proc/" + std::to_string(id) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

}  // namespace braid_test_common
