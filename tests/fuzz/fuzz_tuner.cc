// Fuzzes the tuner grammar (src/algorithms/tuner.cc): BRAID_ALGO / NCCL_ALGO values, the perf
// binaries' -A flag and rank 0's algorithm string that every rank adopts at init.
//
// Input: the spec text. nranks (1..16) is derived from the bytes, so Tuner::Create and choose()
// run on many group sizes without a binary prefix that would make the seeds unreadable.
// Invariants: a spec that parses has only non-empty ranges of known algorithms, and printing its
// rules back in the grammar parses to the same rules; Tuner::Create accepts exactly the specs the
// parser accepts; choose() always returns an algorithm that supports the request, the override's
// when the first override covering it supports it ("oneshot" rules, for the small-message board,
// are passed over).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/tuner.h"

using namespace braid;

namespace {

constexpr size_t kMaxSpec = 4096;  // real values are tens of bytes; keeps the parse cheap

std::string Size(uint64_t b) {
  return b == UINT64_MAX ? "inf" : std::to_string(b);
}

std::string Print(const std::vector<TunerRule>& rules) {
  std::string s;
  for (const TunerRule& r : rules) {
    if (!s.empty()) s += ';';
    s += std::string(CollKindName(r.kind)) + ":" + r.algorithm + "@" + Size(r.min_bytes) + "-" +
         Size(r.max_bytes);
  }
  return s;
}

bool Same(const std::vector<TunerRule>& a, const std::vector<TunerRule>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind || a[i].min_bytes != b[i].min_bytes ||
        a[i].max_bytes != b[i].max_bytes || a[i].algorithm != b[i].algorithm)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxSpec) return 0;
  const std::string spec(reinterpret_cast<const char*>(data), size);
  unsigned sum = 0;
  for (size_t i = 0; i < size; ++i) sum += data[i];
  const int nranks = 1 + static_cast<int>(sum % 16);

  auto rules = ParseTunerOverride(spec);
  auto tuner = Tuner::Create(spec, nranks, LinkModel{}, nullptr);
  if (rules.ok() != tuner.ok()) std::abort();
  if (!rules.ok()) {
    if (rules.status().message().empty()) std::abort();
    return 0;
  }
  for (const TunerRule& r : *rules) {
    if (r.min_bytes >= r.max_bytes) std::abort();
    // "oneshot" names the small-message board, which is not a schedule (tuner.h).
    if (!FindAlgorithm(r.algorithm) && r.algorithm != kOneShotAlgorithm) std::abort();
  }
  auto again = ParseTunerOverride(Print(*rules));
  if (!again.ok() || !Same(*rules, *again)) std::abort();

  if (tuner->describe().empty()) std::abort();
  static const CollKind kKinds[] = {
      CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
      CollKind::kReduce,    CollKind::kAllToAll,      CollKind::kBarrier};
  for (CollKind kind : kKinds) {
    for (uint64_t count : {uint64_t{1}, uint64_t{1000}, uint64_t{1} << 20}) {
      CollArgs args;
      args.kind = kind;
      args.count = kind == CollKind::kBarrier ? 0 : count;
      args.nranks = nranks;
      const Algorithm* a = tuner->choose(args);
      if (!a || !a->supports(args)) std::abort();
      // The first override rule that covers the request wins when it can serve it.
      const uint64_t bytes = CollBytes(args);
      for (const TunerRule& r : *rules) {
        if (r.kind != kind || bytes < r.min_bytes ||
            (r.max_bytes != UINT64_MAX && bytes >= r.max_bytes))
          continue;
        const Algorithm* forced = FindAlgorithm(r.algorithm);
        if (!forced) continue;  // "oneshot": a call the engine runs falls to the next rule
        if (forced->supports(args)) {
          if (a != forced) std::abort();
          break;
        }
      }
    }
  }
  return 0;
}
