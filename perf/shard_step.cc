// shard_step_perf: the sharded step's time per step for each preset, against the planner's
// prediction (issue 14: the planner's ranking of the presets must agree with the measured one).
//
//   braidrun [--emulate 2x2 --link 1gbit] -- build/perf/shard_step_perf
//       [--params N] [--buckets B] [--micro-batches M] [--steps S] [--profile FILE]
//       [--presets a,b,...]
//
// Each rank registers N fp32 parameters in B equal buckets and runs S timed steps (after one
// untimed) of M micro-batches: per micro-batch every bucket is gathered and released (forward),
// then gathered, released and its gradient handed over in reverse order (backward); then the
// step. There is no compute, so a step's time is its communication plus the local copies and the
// fp32 AdamW on the OS shard. Rank 0 prints per preset the median step time (the slowest rank's),
// the planner's predicted communication time for the same model on the link model of FILE
// (braid-info --profile; else the flags' defaults), their ratio, and both rankings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/shard.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "shard_step_perf: %s\n", what.c_str());
  std::exit(1);
}

struct Result {
  std::string preset;
  double measured = 0, predicted = 0;
};

// One preset: seconds per step (median over the timed steps, max over ranks).
double Run(braidComm_t comm, const braidShardConfig_t& cfg, size_t numel, int nbuckets, int M,
           int steps) {
  std::vector<size_t> sizes(nbuckets, numel / nbuckets);
  std::vector<std::vector<float>> init(nbuckets);
  std::vector<const void*> ptrs;
  for (int b = 0; b < nbuckets; ++b) {
    init[b].assign(sizes[b], 0.25f);
    ptrs.push_back(init[b].data());
  }
  braidShard_t sh = nullptr;
  if (braidShardCreate(comm, &cfg, nbuckets, sizes.data(), braidFloat32, ptrs.data(), &sh) !=
      braidSuccess)
    Die(std::string("create ") + cfg.preset + ": " + braidShardGetLastError(nullptr));
  std::vector<float> grad(sizes[0], 1e-3f);
  braidShardAdamW_t opt = BRAID_SHARD_ADAMW_INITIALIZER;
  std::vector<double> times;
  for (int s = 0; s <= steps; ++s) {
    braidBarrier(comm);
    const double t0 = Now();
    for (int m = 0; m < M; ++m) {
      const void* p = nullptr;
      for (int b = 0; b < nbuckets; ++b) {
        if (braidShardGather(sh, b, &p) != braidSuccess || braidShardRelease(sh, b) != braidSuccess)
          Die(std::string("forward: ") + braidShardGetLastError(sh));
      }
      for (int b = nbuckets - 1; b >= 0; --b) {
        if (braidShardGather(sh, b, &p) != braidSuccess ||
            braidShardRelease(sh, b) != braidSuccess ||
            braidShardReduceGrad(sh, b, grad.data()) != braidSuccess)
          Die(std::string("backward: ") + braidShardGetLastError(sh));
      }
    }
    if (braidShardStep(sh, &opt) != braidSuccess)
      Die(std::string("step: ") + braidShardGetLastError(sh));
    double dt = Now() - t0;
    // The step is as slow as its slowest rank.
    braidAllReduce(&dt, &dt, 1, braidFloat64, braidMax, comm);
    if (s > 0) times.push_back(dt);  // the first step is a warm-up
  }
  braidShardDestroy(sh);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double params = 8e6;
  int nbuckets = 8, M = 2, steps = 3;
  const char* profile = nullptr;
  std::string presets = "ddp,zero1,zero2,zero3,fsdp-hybrid,mics,paro-nig,paro-iig,paro-igg";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Die("missing value for " + a);
    const char* v = argv[++i];
    if (a == "--params")
      params = std::atof(v);
    else if (a == "--buckets")
      nbuckets = std::atoi(v);
    else if (a == "--micro-batches")
      M = std::atoi(v);
    else if (a == "--steps")
      steps = std::atoi(v);
    else if (a == "--profile")
      profile = v;
    else if (a == "--presets")
      presets = v;
    else
      Die("unknown flag '" + a + "'");
  }
  if (params < 1 || nbuckets < 1 || M < 1 || steps < 1) Die("sizes and counts must be >= 1");
  braidComm_t comm = nullptr;
  if (braidInitFromEnv(&comm) != braidSuccess)
    Die(std::string("init: ") + braidGetLastError(nullptr));
  int rank = 0;
  braidCommUserRank(comm, &rank);

  braidShardModel_t model = BRAID_SHARD_MODEL_INITIALIZER;
  model.params = static_cast<double>(static_cast<size_t>(params) / nbuckets * nbuckets);
  model.layers = nbuckets;
  model.hidden = model.seq = 1;  // no activations: the benchmark computes nothing
  model.microBatches = M;
  model.paramBytes = 4;  // the step runs fp32 parameters and gradients
  braidShardCluster_t cluster = BRAID_SHARD_CLUSTER_INITIALIZER;
  cluster.deviceMemory = 1e15;
  if (profile && braidLinkProfileLoad(profile, &cluster.link) != braidSuccess)
    Die(braidGetLastError(nullptr));

  std::vector<Result> results;
  size_t start = 0;
  while (start <= presets.size()) {
    size_t end = presets.find(',', start);
    if (end == std::string::npos) end = presets.size();
    const std::string name = presets.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    braidShardConfig_t cfg;
    if (braidShardPreset(name.c_str(), comm, &cfg) != braidSuccess)
      Die(braidShardGetLastError(nullptr));
    Result r;
    r.preset = name;
    r.measured = Run(comm, cfg, static_cast<size_t>(model.params), nbuckets, M, steps);
    cluster.ranksPerNode = cfg.ranksPerNode;
    cluster.nodes = cfg.nodes;
    braidShardPlanEntry_t e;
    if (braidShardPlanEvaluate(&model, &cluster, nullptr, &cfg, &e) != braidSuccess)
      Die(braidShardGetLastError(nullptr));
    r.predicted = e.commSeconds;
    results.push_back(r);
  }
  if (rank == 0) {
    std::printf(
        "# %.3g fp32 parameters in %d buckets, %d micro-batches, %d ranks per node x %d "
        "nodes; link model intra %.3g s %.3g B/s, inter %.3g s %.3g B/s per node\n",
        model.params, nbuckets, M, cluster.ranksPerNode, cluster.nodes, cluster.link.intraLatency,
        cluster.link.intraBandwidth, cluster.link.interLatency, cluster.link.interBandwidth);
    std::printf("%-12s %12s %12s %8s\n", "preset", "measured_ms", "predicted_ms", "ratio");
    for (const auto& r : results)
      std::printf("%-12s %12.1f %12.1f %8.2f\n", r.preset.c_str(), r.measured * 1e3,
                  r.predicted * 1e3, r.predicted / r.measured);
    auto ranking = [&](double Result::*key) {
      std::vector<Result> v = results;
      std::stable_sort(v.begin(), v.end(),
                       [&](const Result& a, const Result& b) { return a.*key < b.*key; });
      std::string s;
      for (const auto& r : v) s += (s.empty() ? "" : " < ") + r.preset;
      return s;
    };
    std::printf("measured:  %s\npredicted: %s\n", ranking(&Result::measured).c_str(),
                ranking(&Result::predicted).c_str());
  }
  braidCommDestroy(comm);
  return 0;
}
