// braid-plan: the sharding planner (braidShardPlan, sharding.md section 4) from the command line.
// Prints the ranked configurations that fit with their memory and time, the presets for
// comparison, the planner's explanation, what the other cost model (--model braid|lins) picks
// with both picks' terms side by side under both models, and last
// `choice: s_p=AxB s_g=AxB s_os=AxB`. Built on the public API only, like a trainer would call it.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "braid/shard.h"

namespace {

void Usage(FILE* out) {
  std::fprintf(
      out,
      "usage: braid-plan --params N --layers L --hidden H --seq S --micro-batch B\n"
      "                  --micro-batches M --gpus-per-node R --nodes N --mem BYTES\n"
      "                  (--intra-bw BYTES/S --inter-bw BYTES/S | --profile FILE)\n"
      "                  [--intra-lat SECONDS] [--inter-lat SECONDS] [--nics K] [--recompute]\n"
      "                  [--quant] [--overlap] [--partial-node] [--reserve BYTES]\n"
      "                  [--param-bytes 2|4] [--top K] [--model braid|lins]\n"
      "  numbers take K, M, G, T suffixes (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024);\n"
      "  bandwidths are bytes/s per direction, --inter-bw per node (all its --nics NICs\n"
      "  together, default 1);\n"
      "  --profile reads a link profile (BRAID_LINK_PROFILE format): both levels, over the\n"
      "  --*-bw and --*-lat flags;\n"
      "  --model: braid (default) prices the step braid runs, lins prices Lins' executor with\n"
      "  Lins' terms and constraints (sharding.md section 4.1); both cost each collective with\n"
      "  braid's cost model.\n");
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "braid-plan: %s\n", msg.c_str());
  Usage(stderr);
  return 2;
}

// "6.7e9", "80G", "64Gi": a finite number >= 0, else false.
bool ParseNumber(const char* text, double* out) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || errno == ERANGE) return false;
  std::string suffix = end;
  double mult = 1;
  if (!suffix.empty()) {
    const bool binary = suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I');
    if (suffix.size() != 1 && !binary) return false;
    const char* units = "KMGT";
    const char* at = std::strchr(units, std::toupper(static_cast<unsigned char>(suffix[0])));
    if (!at || !*at) return false;
    for (int i = 0; i <= at - units; ++i) mult *= binary ? 1024.0 : 1000.0;
  }
  v *= mult;
  if (!std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

bool ParseInt(const char* text, int* out) {
  double v = 0;
  if (!ParseNumber(text, &v) || v != std::floor(v) || v > 1e9) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string Factor(const braidShardFactor_t& f) {
  return std::to_string(f.intra) + "x" + std::to_string(f.inter);
}

std::string Options(const braidShardConfig_t& c) {
  std::string s;
  if (c.hpz) s += "hpZ";
  if (c.qwz) s += s.empty() ? "qwZ" : "+qwZ";
  if (c.qgz) s += s.empty() ? "qgZ" : "+qgZ";
  return s.empty() ? "-" : s;
}

void Row(const char* label, const braidShardPlanEntry_t& e) {
  std::printf("%-12s %-7s %-7s %-7s %-9s %9.2f %8.2f %8.2f %9.2f %10.2f %12.2f%s\n", label,
              Factor(e.config.p).c_str(), Factor(e.config.g).c_str(), Factor(e.config.os).c_str(),
              Options(e.config).c_str(), e.stateBytes / 1e9, e.activationBytes / 1e9,
              e.bufferBytes / 1e9, e.memoryBytes / 1e9, e.commSeconds * 1e3, e.interBytes / 1e9,
              e.fits ? "" : "  (over memory)");
}

const char* ModelFlag(int m) {
  return m == braidShardCostLins ? "lins" : "braid";
}

std::string Name(const braidShardConfig_t& c) {
  // Piecewise: a "literal" + std::string&& chain trips GCC 12's -Wrestrict false positive.
  std::string s = Factor(c.p);
  s += "/";
  s += Factor(c.g);
  s += "/";
  s += Factor(c.os);
  if (Options(c) != "-") {
    s += " ";
    s += Options(c);
  }
  return s;
}

// One model's terms of the two picks, lined up by term name; a pick the model does not price
// gets the reason instead.
void TermTable(const braidShardModel_t& model, const braidShardCluster_t& cluster,
               braidShardPlanOptions_t options, int cost_model,
               const braidShardConfig_t* const picks[2]) {
  options.costModel = cost_model;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, double>> got[2];
  std::string refused[2];
  double total[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    braidShardPlanTerm_t terms[32];
    int count = 0;
    if (braidShardPlanTerms(&model, &cluster, &options, picks[k], terms, 32, &count) !=
        braidSuccess) {
      refused[k] = braidShardGetLastError(nullptr);
      continue;
    }
    for (int i = 0; i < count && i < 32; ++i) {
      got[k].push_back({terms[i].term, terms[i].seconds});
      total[k] += terms[i].seconds;
      bool seen = false;
      for (const auto& n : names) seen = seen || n == terms[i].term;
      if (!seen) names.push_back(terms[i].term);
    }
  }
  std::printf("%s model (ms):\n", cost_model == braidShardCostLins ? "Lins'" : "braid's");
  for (const auto& n : names) {
    std::printf("  %-26s", n.c_str());
    for (int k = 0; k < 2; ++k) {
      double v = 0;
      for (const auto& [term, sec] : got[k])
        if (term == n) v += sec;
      if (refused[k].empty())
        std::printf(" %26.1f", v * 1e3);
      else
        std::printf(" %26s", "-");
    }
    std::printf("\n");
  }
  std::printf("  %-26s", "total");
  for (int k = 0; k < 2; ++k)
    if (refused[k].empty())
      std::printf(" %26.1f", total[k] * 1e3);
    else
      std::printf(" %26s", "not priced");
  std::printf("\n");
  for (int k = 0; k < 2; ++k)
    if (!refused[k].empty())
      std::printf("  (%s: %s)\n", Name(*picks[k]).c_str(), refused[k].c_str());
}

}  // namespace

int main(int argc, char** argv) {
  braidShardModel_t model = BRAID_SHARD_MODEL_INITIALIZER;
  braidShardCluster_t cluster = BRAID_SHARD_CLUSTER_INITIALIZER;
  braidShardPlanOptions_t options = BRAID_SHARD_PLAN_OPTIONS_INITIALIZER;
  bool have[6] = {};  // params, mem, intra-bw, inter-bw, gpus-per-node, nodes
  const char* profile = nullptr;
  int top = 20;
  model.layers = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      Usage(stdout);
      return 0;
    }
    if (a == "--recompute") {
      model.recompute = 1;
      continue;
    }
    if (a == "--quant") {
      options.allowQuantization = 1;
      continue;
    }
    if (a == "--overlap") {
      options.assumeOverlap = 1;
      continue;
    }
    if (a == "--partial-node") {
      options.allowPartialNode = 1;
      continue;
    }
    static const char* const kValueFlags[] = {
        "--params",        "--layers",      "--hidden",        "--seq",       "--micro-batch",
        "--micro-batches", "--param-bytes", "--gpus-per-node", "--nodes",     "--mem",
        "--intra-bw",      "--inter-bw",    "--intra-lat",     "--inter-lat", "--reserve",
        "--top",           "--profile",     "--nics",          "--model"};
    bool known = false;
    for (const char* f : kValueFlags) known = known || a == f;
    if (!known) return Fail("unknown flag '" + a + "'");
    if (i + 1 >= argc) return Fail("missing value for " + a);
    const char* v = argv[++i];
    double d = 0;
    bool ok = true;
    if (a == "--params") {
      ok = ParseNumber(v, &model.params) && model.params >= 1;
      have[0] = true;
    } else if (a == "--layers") {
      ok = ParseInt(v, &model.layers) && model.layers >= 1;
    } else if (a == "--hidden") {
      ok = ParseInt(v, &model.hidden) && model.hidden >= 1;
    } else if (a == "--seq") {
      ok = ParseInt(v, &model.seq) && model.seq >= 1;
    } else if (a == "--micro-batch") {
      ok = ParseInt(v, &model.microBatch) && model.microBatch >= 1;
    } else if (a == "--micro-batches") {
      ok = ParseInt(v, &model.microBatches) && model.microBatches >= 1;
    } else if (a == "--param-bytes") {
      ok = ParseInt(v, &model.paramBytes) && (model.paramBytes == 2 || model.paramBytes == 4);
    } else if (a == "--gpus-per-node") {
      ok = ParseInt(v, &cluster.ranksPerNode) && cluster.ranksPerNode >= 1;
      have[4] = true;
    } else if (a == "--nodes") {
      ok = ParseInt(v, &cluster.nodes) && cluster.nodes >= 1;
      have[5] = true;
    } else if (a == "--mem") {
      ok = ParseNumber(v, &cluster.deviceMemory) && cluster.deviceMemory > 0;
      have[1] = true;
    } else if (a == "--intra-bw") {
      ok = ParseNumber(v, &cluster.link.intraBandwidth) && cluster.link.intraBandwidth > 0;
      have[2] = true;
    } else if (a == "--inter-bw") {
      ok = ParseNumber(v, &cluster.link.interBandwidth) && cluster.link.interBandwidth > 0;
      have[3] = true;
    } else if (a == "--intra-lat") {
      ok = ParseNumber(v, &cluster.link.intraLatency);
    } else if (a == "--inter-lat") {
      ok = ParseNumber(v, &cluster.link.interLatency);
    } else if (a == "--nics") {
      ok = ParseInt(v, &cluster.link.nicsPerNode) && cluster.link.nicsPerNode >= 1 &&
           cluster.link.nicsPerNode <= 1024;
    } else if (a == "--reserve") {
      ok = ParseNumber(v, &options.reserveBytes);
    } else if (a == "--top") {
      ok = ParseNumber(v, &d) && d >= 1 && d == std::floor(d);
      top = ok ? static_cast<int>(std::fmin(d, 1e6)) : top;
    } else if (a == "--profile") {
      profile = v;
    } else if (a == "--model") {
      ok = std::strcmp(v, "braid") == 0 || std::strcmp(v, "lins") == 0;
      options.costModel = std::strcmp(v, "lins") == 0 ? braidShardCostLins : braidShardCostBraid;
    } else {
      return Fail("unknown flag '" + a + "'");
    }
    if (!ok) return Fail("bad value '" + std::string(v) + "' for " + a);
  }
  if (profile) {
    // A level the file does not hold (one node measures no inter-node link) must come from the
    // flags: mark it unset, and refuse below if the file does not set it either.
    if (!have[2]) cluster.link.intraBandwidth = -1;
    if (!have[3]) cluster.link.interBandwidth = -1;
    if (braidLinkProfileLoad(profile, &cluster.link) != braidSuccess)
      return Fail(braidGetLastError(nullptr));
    if (cluster.link.intraBandwidth < 0)
      return Fail(std::string("the profile ") + profile +
                  " holds no intra-node level: give --intra-bw");
    if (cluster.link.interBandwidth < 0)
      return Fail(std::string("the profile ") + profile +
                  " holds no inter-node level (it was measured on one node): give --inter-bw");
    have[2] = have[3] = true;
  }
  const char* names[6] = {"--params",   "--mem",           "--intra-bw",
                          "--inter-bw", "--gpus-per-node", "--nodes"};
  for (int k = 0; k < 6; ++k)
    if (!have[k]) return Fail(std::string("missing ") + names[k]);
  for (auto [flag, value] :
       {std::pair{"--layers", model.layers}, {"--hidden", model.hidden}, {"--seq", model.seq}})
    if (value < 1) return Fail(std::string("missing ") + flag);

  braidShardPlan_t plan{};
  if (braidShardPlan(&model, &cluster, &options, &plan) != braidSuccess) {
    std::fprintf(stderr, "braid-plan: %s\n", braidShardGetLastError(nullptr));
    return 1;
  }
  std::printf("model %.3g parameters, %d layers, hidden %d, seq %d, micro-batch %d x %d%s\n",
              model.params, model.layers, model.hidden, model.seq, model.microBatch,
              model.microBatches, model.recompute ? ", recomputation" : "");
  std::printf(
      "cluster %d nodes x %d devices, %.1f GB each; intra %.3g B/s %.3g s, inter %.3g B/s %.3g "
      "s per node\n",
      cluster.nodes, cluster.ranksPerNode, cluster.deviceMemory / 1e9, cluster.link.intraBandwidth,
      cluster.link.intraLatency, cluster.link.interBandwidth, cluster.link.interLatency);
  std::printf("cost model: %s\n", options.costModel == braidShardCostLins
                                      ? "lins (Lins' terms, constraints and memory model; each "
                                        "collective costed by braid's cost model)"
                                      : "braid (the collectives braid's step runs)");
  std::printf("%d valid configurations, %d fit\n\n", plan.considered, plan.count);
  std::printf("%-12s %-7s %-7s %-7s %-9s %9s %8s %8s %9s %10s %12s\n", "rank", "s_p", "s_g", "s_os",
              "options", "states_GB", "act_GB", "buf_GB", "memory_GB", "comm_ms", "inter_GB/node");
  for (int i = 0; i < plan.count && i < top; ++i)
    Row(std::to_string(i + 1).c_str(), plan.ranked[i]);
  if (plan.count > top) std::printf("... %d more (--top)\n", plan.count - top);
  std::printf("\npresets on this cluster:\n");
  for (const char* name : {"ddp", "zero1", "zero2", "zero3", "fsdp-hybrid", "mics", "zero++",
                           "paro-nig", "paro-iig", "paro-igg", "zero-topo"}) {
    braidShardConfig_t c;
    braidShardPlanEntry_t e;
    if (braidShardPresetForShape(name, cluster.ranksPerNode, cluster.nodes, &c) != braidSuccess)
      continue;
    if (braidShardPlanEvaluate(&model, &cluster, &options, &c, &e) != braidSuccess) {
      // Under Lins' model: a preset its executor cannot run (hpZ, quantization, s_g between).
      const std::string why = braidShardGetLastError(nullptr);
      const std::string::size_type at = why.find("configuration: ");
      std::printf("%-12s not priced: %s\n", name,
                  at == std::string::npos ? why.c_str() : why.substr(at + 15).c_str());
      continue;
    }
    Row(name, e);
  }
  std::printf("\n%s\n", plan.explanation);
  // The other model's pick, and both picks' terms under both models.
  braidShardPlanOptions_t other = options;
  other.costModel =
      options.costModel == braidShardCostLins ? braidShardCostBraid : braidShardCostLins;
  braidShardPlan_t theirs{};
  if (braidShardPlan(&model, &cluster, &other, &theirs) != braidSuccess) {
    std::printf("\n--model %s: %s\n", ModelFlag(other.costModel), braidShardGetLastError(nullptr));
  } else {
    const braidShardConfig_t* picks[2] = {&plan.best.config, &theirs.best.config};
    std::printf(
        "\nthe two models' picks (s_p/s_g/s_os), term by term:\n  %-26s %26s %26s\n", "",
        ("--model " + std::string(ModelFlag(options.costModel)) + ": " + Name(*picks[0])).c_str(),
        ("--model " + std::string(ModelFlag(other.costModel)) + ": " + Name(*picks[1])).c_str());
    TermTable(model, cluster, options, braidShardCostBraid, picks);
    TermTable(model, cluster, options, braidShardCostLins, picks);
    braidShardPlanFree(&theirs);
  }
  std::printf("\n");
  const braidShardConfig_t& b = plan.best.config;
  std::printf("choice: s_p=%s s_g=%s s_os=%s\n", Factor(b.p).c_str(), Factor(b.g).c_str(),
              Factor(b.os).c_str());
  braidShardPlanFree(&plan);
  return 0;
}
