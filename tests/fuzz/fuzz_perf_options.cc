// Fuzzes the perf binaries' command line (perf/common/options.cc): ParseOptions, nccl-tests'
// flags plus -A, -M (host, cuda), --quant/--block and --traffic, and ParseSize, the size grammar
// of -b/-e/-i.
//
// Input: the arguments, one per line (argv[0] is supplied). An even input length parses as a
// binary with a reduction operator (all_reduce_perf), an odd one without (all_gather_perf).
// Invariants: accepted options are within the ranges the usage text states, with at least one
// op and one type; a refusal exits 2 (0 only for -h); ParseSize agrees with an independent
// reference of its grammar.
#include <getopt.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/options.h"

using namespace braid_perf;

namespace {

// Digits, then nothing or one of K/M/G (either case, 1024-based); false past 64 bits.
bool ReferenceSize(const std::string& s, uint64_t* out) {
  size_t i = 0;
  uint64_t v = 0;
  bool overflow = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    unsigned d = static_cast<unsigned>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) overflow = true;
    v = v * 10 + d;
  }
  if (i == 0 || overflow) return false;
  uint64_t mult = 1;
  if (i + 1 == s.size()) {
    char c = s[i];
    if (c == 'K' || c == 'k')
      mult = 1ull << 10;
    else if (c == 'M' || c == 'm')
      mult = 1ull << 20;
    else if (c == 'G' || c == 'g')
      mult = 1ull << 30;
    else
      return false;
  } else if (i != s.size()) {
    return false;
  }
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

// glibc's getopt keeps a pointer into the previous argv between calls (a half-parsed "-Fz"
// cluster) unless optind is 0 on entry. A perf binary parses once per process; the fuzzer parses
// millions of argvs, so it starts every run from a freshly initialised getopt.
void ResetGetopt() {
  static char name[] = "reset";
  static char* argv[] = {name, nullptr};
  optind = 0;
  opterr = 0;
  (void)getopt(1, argv, "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const bool has_op = size % 2 == 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = {has_op ? "all_reduce_perf" : "all_gather_perf"};
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    args.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  for (const std::string& a : args) {
    // The C string the parser sees ends at the first NUL, as an argv element would.
    const std::string c = a.substr(0, a.find('\0'));
    uint64_t got = 0, want = 0;
    const bool ok = ParseSize(c.c_str(), &got);
    if (ok != ReferenceSize(c, &want) || (ok && got != want)) std::abort();
  }

  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ResetGetopt();
  Options o;
  int status = -1;
  // all_gather_perf has a quantized form (default --block 2048): --quant and --block are parsed
  // there and refused for all_reduce_perf.
  const int quant_block = has_op ? 0 : 2048;
  const bool ok = ParseOptions(static_cast<int>(args.size()), argv.data(), args[0].c_str(), has_op,
                               quant_block, &o, &status);
  if (!ok) {
    if (status != 0 && status != 2) std::abort();
    return 0;
  }
  if (status != 0) std::abort();
  if (o.quantized && (has_op || (o.quant.bits != 8 && o.quant.bits != 4) || o.quant.blockSize < 1 ||
                      o.quant.blockSize > (1 << 20)))
    std::abort();
  // --traffic is a flag without a value; getopt_long also takes an unambiguous prefix ("--tr").
  if (o.traffic) {
    bool named = false;
    for (size_t i = 1; i < args.size(); ++i) {
      const std::string a = args[i].substr(0, args[i].find('\0'));
      named |= a.size() >= 4 && std::string("--traffic").compare(0, a.size(), a) == 0;
    }
    if (!named) std::abort();
  }
  if (o.min_bytes > o.max_bytes) std::abort();
  if (o.step_factor < 1 || o.iters < 1 || o.warmup_iters < 0 || o.agg_iters < 1) std::abort();
  if (o.check_iters < 0 || o.root < 0 || o.blocking < 0 || o.blocking > 1) std::abort();
  if (o.average < 0 || o.average > 3 || o.timeout_s < 0 || o.nthreads < 1 || o.nthreads > 1024)
    std::abort();
  if (o.ngpus != 1 || (o.memtype != "host" && o.memtype != "cuda") || o.graph_iters < 0)
    std::abort();
  // -M cuda runs the NCCL API, which has none of the host-only options.
  if (o.memtype == "cuda" && (o.quantized || o.traffic || o.predict || !o.algo.empty()))
    std::abort();
  if (o.ops.empty() || o.types.empty()) std::abort();
  if (!has_op && (o.ops.size() != 1 || o.ops[0] != nullptr)) std::abort();
  for (const TypeInfo* t : o.types)
    if (!t || t->size == 0) std::abort();
  // A sweep that can never advance would spin forever in the harness.
  if (o.min_bytes != o.max_bytes && o.step_factor <= 1 && o.step_bytes == 0) std::abort();
  return 0;
}
