// The tuner: override grammar, default table from the cost model, and the choice per request.
#include "algorithms/tuner.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string_view>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/link_profile.h"
#include "core/base/log.h"

namespace braid {
namespace {

// The collectives an algorithm can be chosen for ("all" expands to these).
constexpr CollKind kTunable[] = {
    CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
    CollKind::kReduce,    CollKind::kAllToAll,      CollKind::kBarrier};

// Channels the default table assumes.
constexpr int kTableChannels = 2;

// Size points the default table is evaluated at: 2^0 .. 2^kMaxLog2 bytes.
constexpr int kMaxLog2 = 40;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t pos = s.find(sep, start);
    parts.push_back(
        s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

Status GrammarError(const std::string& what) {
  return InvalidArgument(
      "algorithm override: " + what +
      " (grammar: coll:algo[@lo-hi][,algo@lo-hi...][;coll:...], sizes like 64K, 1M, inf)");
}

Result<uint64_t> ParseSize(std::string_view tok) {
  const std::string t = Lower(Trim(tok));
  if (t == "inf") return UINT64_MAX;
  if (t.empty()) return GrammarError("missing size");
  uint64_t v = 0;
  size_t i = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) {
    const uint64_t d = static_cast<uint64_t>(t[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return GrammarError("size '" + t + "' is too large");
    v = v * 10 + d;
  }
  if (i == 0) return GrammarError("bad size '" + t + "'");
  uint64_t mult = 1;
  if (i + 1 == t.size()) {
    switch (t[i]) {
      case 'k':
        mult = uint64_t{1} << 10;
        break;
      case 'm':
        mult = uint64_t{1} << 20;
        break;
      case 'g':
        mult = uint64_t{1} << 30;
        break;
      default:
        return GrammarError("bad size '" + t + "' (suffixes: K, M, G)");
    }
  } else if (i != t.size()) {
    return GrammarError("bad size '" + t + "'");
  }
  if (v > UINT64_MAX / mult) return GrammarError("size '" + t + "' is too large");
  return v * mult;
}

Result<std::vector<CollKind>> ParseColl(std::string_view tok) {
  const std::string t = Lower(Trim(tok));
  if (t.empty()) return GrammarError("missing collective name before ':'");
  if (t == "all") return std::vector<CollKind>(std::begin(kTunable), std::end(kTunable));
  for (CollKind k : kTunable)
    if (t == CollKindName(k)) return std::vector<CollKind>{k};
  return GrammarError(
      "unknown collective '" + t +
      "' (known: allreduce, reducescatter, allgather, broadcast, reduce, alltoall, barrier, all)");
}

std::string KnownAlgorithms() {
  std::string s;
  for (const auto* list : {&AllAlgorithms(), &HierarchicalAlgorithms()})
    for (const Algorithm* a : *list) s += std::string(s.empty() ? "" : ", ") + a->name();
  return s + ", " + kOneShotAlgorithm + " (leader = hier_leader)";
}

std::string FormatSize(uint64_t b) {
  if (b == UINT64_MAX) return "inf";
  static const char kSuffix[] = {'G', 'M', 'K'};
  for (int i = 0; i < 3; ++i) {
    const uint64_t unit = uint64_t{1} << (30 - 10 * i);
    if (b >= unit && b % unit == 0) return std::to_string(b / unit) + kSuffix[i];
  }
  return std::to_string(b);
}

// Whether the hierarchical algorithms compete for `args`: a layout of several nodes. (Each one's
// supports() then refuses uneven groups itself.) On one node they would be the flat ring under
// another name.
bool SpansNodes(const CollArgs& args) {
  const GroupLayout* l = args.layout;
  return l && l->nnodes > 1 && static_cast<int>(l->node_of.size()) == args.nranks;
}

// The fastest algorithm for `args` by the cost model (first in registry order on ties, to
// rounding: the flat algorithms before the hierarchical ones).
const Algorithm* BestByModel(const CollArgs& args, const LinkModel& model) {
  const Algorithm* best = nullptr;
  double best_t = std::numeric_limits<double>::infinity();
  auto consider = [&](const std::vector<const Algorithm*>& list) {
    for (const Algorithm* a : list) {
      if (!a->supports(args) || !a->rankedFor(args, model)) continue;
      const double t = a->estimate_seconds(args, model);
      // Equal estimates summed in another order differ in their last bits: such a tie stays
      // with the earlier algorithm (PAT's rounds against Bruck's on one node, same messages and
      // bytes).
      if (!best || t < best_t * (1 - 1e-12)) {
        best = a;
        best_t = t;
      }
    }
  };
  consider(AllAlgorithms());
  if (SpansNodes(args)) consider(HierarchicalAlgorithms());
  return best;
}

}  // namespace

Result<std::vector<TunerRule>> ParseTunerOverride(const std::string& spec) {
  std::vector<TunerRule> rules;
  for (std::string_view raw : Split(spec, ';')) {
    const std::string_view entry = Trim(raw);
    if (entry.empty()) continue;  // tolerate "a;;b" and a trailing ';'
    const size_t colon = entry.find(':');
    std::vector<CollKind> kinds;
    std::string_view choices = entry;
    if (colon == std::string_view::npos) {
      // NCCL_ALGO style: bare algorithm names apply to every collective.
      kinds.assign(std::begin(kTunable), std::end(kTunable));
    } else {
      BRAID_ASSIGN_OR_RETURN(kinds, ParseColl(entry.substr(0, colon)));
      choices = entry.substr(colon + 1);
    }
    if (Trim(choices).empty())
      return GrammarError("no algorithm after '" + std::string(entry) + "'");
    for (std::string_view raw_choice : Split(choices, ',')) {
      const std::string_view choice = Trim(raw_choice);
      if (choice.empty()) return GrammarError("empty choice in '" + std::string(entry) + "'");
      const size_t at = choice.find('@');
      const std::string name = Lower(Trim(choice.substr(0, at)));
      if (name.empty())
        return GrammarError("missing algorithm name in '" + std::string(choice) + "'");
      if (!FindAlgorithm(name) && name != kOneShotAlgorithm)
        return GrammarError("unknown algorithm '" + name + "' (known: " + KnownAlgorithms() + ")");
      uint64_t lo = 0, hi = UINT64_MAX;
      if (at != std::string_view::npos) {
        const std::string_view range = Trim(choice.substr(at + 1));
        const size_t dash = range.find('-');
        if (dash == std::string_view::npos)
          return GrammarError("range '" + std::string(range) + "' must be lo-hi");
        BRAID_ASSIGN_OR_RETURN(lo, ParseSize(range.substr(0, dash)));
        BRAID_ASSIGN_OR_RETURN(hi, ParseSize(range.substr(dash + 1)));
        if (lo >= hi) return GrammarError("empty range '" + std::string(range) + "'");
      }
      for (CollKind k : kinds) rules.push_back(TunerRule{k, lo, hi, name});
    }
  }
  return rules;
}

Result<Tuner> Tuner::Create(const std::string& override_spec, int nranks, const LinkModel& model,
                            const GroupLayout* layout) {
  if (nranks < 1) return InvalidArgument("tuner: nranks must be >= 1");
  Tuner t;
  BRAID_ASSIGN_OR_RETURN(t.overrides_, ParseTunerOverride(override_spec));
  t.nranks_ = nranks;
  t.model_ = model;
  t.layout_ = layout;
  // One closed-form estimate per algorithm per size point: cheap at any nranks.
  for (CollKind kind : kTunable) {
    std::string prev;
    uint64_t start = 0;
    const int points = kind == CollKind::kBarrier ? 1 : kMaxLog2 + 1;
    for (int k = 0; k < points; ++k) {
      const uint64_t bytes = uint64_t{1} << k;
      CollArgs args;
      args.kind = kind;
      args.dtype = DataType::kInt8;
      args.nranks = nranks;
      args.layout = layout;
      // The table assumes the default two channels (BRAID_NCHANNELS), what HO-Ring needs; a
      // request with fewer (the express lane, BRAID_NCHANNELS=1) that the table's pick cannot
      // serve is ranked afresh by choose().
      args.nchannels = kTableChannels;
      const bool per_rank = kind == CollKind::kAllGather || kind == CollKind::kReduceScatter ||
                            kind == CollKind::kAllToAll;
      args.count =
          kind == CollKind::kBarrier ? 0 : std::max<uint64_t>(per_rank ? bytes / nranks : bytes, 1);
      const Algorithm* best = BestByModel(args, model);
      const std::string name = best ? best->name() : "";
      if (name == prev) continue;
      if (!prev.empty()) t.defaults_.push_back(TunerRule{kind, start, bytes, prev});
      start = k == 0 ? 0 : bytes;
      prev = name;
    }
    if (!prev.empty()) t.defaults_.push_back(TunerRule{kind, start, UINT64_MAX, prev});
  }
  return t;
}

const Algorithm* Tuner::choose(const CollArgs& args) const {
  const uint64_t bytes = CollBytes(args);
  auto covers = [&](const TunerRule& r) {
    return r.kind == args.kind && bytes >= r.min_bytes &&
           (r.max_bytes == UINT64_MAX || bytes < r.max_bytes);
  };
  for (const TunerRule& r : overrides_) {
    if (!covers(r)) continue;
    const Algorithm* a = FindAlgorithm(r.algorithm);
    if (a && a->supports(args)) return a;
    BRAID_TRACE("tuner: %s cannot serve %s of %" PRIu64 " bytes on %d ranks%s; falling back",
                r.algorithm.c_str(), CollKindName(args.kind), bytes, args.nranks,
                args.in_place ? " in place" : "");
  }
  for (const TunerRule& r : defaults_) {
    if (!covers(r)) continue;
    const Algorithm* a = FindAlgorithm(r.algorithm);
    if (a && a->supports(args)) return a;
  }
  return BestByModel(args, model_);
}

std::string Tuner::describe() const {
  std::string s =
      "algorithm table for " + std::to_string(nranks_) + " ranks" +
      (layout_ && layout_->nnodes > 1 ? " on " + std::to_string(layout_->nnodes) + " nodes" : "") +
      " (first matching line wins; sizes are the collective's total bytes):\n";
  // The model the table was computed with: a calibrated model changes the table, so whoever
  // reads the table must see which one it was.
  s += "  link model: " + DescribeLinkParams(LinkClass::kIntraNode, model_.intra) + ", " +
       DescribeLinkParams(LinkClass::kInterNode, model_.inter) +
       (model_.group ? ", " + DescribeLinkParams(LinkClass::kDeviceGroup, *model_.group) : "") +
       (model_.intra_tcp ? "; a node's ranks talk over tcp" : "") + "\n";
  auto line = [&](const char* origin, const TunerRule& r) {
    char buf[160];
    const std::string range = FormatSize(r.min_bytes) + "-" + FormatSize(r.max_bytes);
    std::snprintf(buf, sizeof(buf), "  %-9s %-14s %-12s %s\n", origin, CollKindName(r.kind),
                  range.c_str(), r.algorithm.c_str());
    s += buf;
  };
  for (const TunerRule& r : overrides_) line("override", r);
  for (const TunerRule& r : defaults_) line("model", r);
  return s;
}

const std::string* Tuner::overrideFor(CollKind kind, uint64_t bytes) const {
  for (const TunerRule& r : overrides_)
    if (r.kind == kind && bytes >= r.min_bytes &&
        (r.max_bytes == UINT64_MAX || bytes < r.max_bytes))
      return &r.algorithm;
  return nullptr;
}

uint64_t CollBytes(const CollArgs& args) {
  uint64_t n = args.count;
  switch (args.kind) {
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      n *= static_cast<uint64_t>(std::max(args.nranks, 1));
      break;
    default:
      break;
  }
  return n * DataTypeSize(args.dtype);
}

}  // namespace braid
