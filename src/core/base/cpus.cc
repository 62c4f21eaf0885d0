#include "core/base/cpus.h"

#include <sched.h>

#include <algorithm>

namespace braid {

std::string AffinityMaskHex() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "1";
  std::string hex;
  for (int base = 0; base < CPU_SETSIZE; base += 4) {
    int nibble = 0;
    for (int b = 0; b < 4; ++b)
      if (CPU_ISSET(base + b, &set)) nibble |= 1 << b;
    hex.push_back("0123456789abcdef"[nibble]);
  }
  while (hex.size() > 1 && hex.back() == '0') hex.pop_back();
  return hex;
}

int CpusInUnion(const std::vector<std::string>& masks) {
  constexpr size_t kMaxDigits = CPU_SETSIZE / 4;
  std::vector<int> nibbles;
  for (const std::string& m : masks) {
    if (m.empty() || m.size() > kMaxDigits) return -1;
    if (nibbles.size() < m.size()) nibbles.resize(m.size(), 0);
    for (size_t i = 0; i < m.size(); ++i) {
      const char c = m[i];
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) return -1;
      nibbles[i] |= v;
    }
  }
  int n = 0;
  for (int v : nibbles) n += __builtin_popcount(static_cast<unsigned>(v));
  return std::max(n, 1);
}

}  // namespace braid
