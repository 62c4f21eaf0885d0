// shard_step_perf: the sharded step's time per step for each preset, against the planner's
// prediction (issue 14: the planner's ranking of the presets must agree with the measured one),
// and what the gather prefetch hides behind compute (issue 13).
//
//   braidrun [--emulate 2x2 --link 1gbit] -- build/perf/shard_step_perf
//       [--params N] [--buckets B] [--micro-batches M] [--steps S] [--profile FILE]
//       [--presets a,b,...] [--compute-us U] [--overlap on|off|both]
//
// Each rank registers N fp32 parameters in B equal buckets and runs S timed steps (after one
// untimed) of M micro-batches: per micro-batch every bucket is gathered, computed on and
// released (forward), then gathered, computed on, released and its gradient handed over in
// reverse order (backward); then the step. "Computing" is a sleep of U microseconds per bucket
// and pass (default 0): the device's time, during which the rank's CPU is free, as it would be
// while a GPU computes. --overlap off turns the prefetch off (braidShardSetPrefetch), both runs
// each preset both ways.
//
// Rank 0 prints per preset and overlap setting (each the median over the timed steps of the
// slowest rank): step_ms, the whole step; comm_ms, the time the layer's calls were blocked on
// communication (braidShardTraffic's exposedSeconds: without compute, the step minus its local
// copies and the fp32 AdamW); gather_ms, the time spent in braidShardGather calls other than the
// first of each pass (those have nothing to hide behind); the planner's predicted communication
// time for the same model on the link model of FILE (braid-info --profile; else the flags'
// defaults) and predicted / comm_ms; and the rankings by comm_ms and by prediction. With
// --overlap both, per preset: hidden = 1 - gather_ms(on) / gather_ms(off), the share of the
// hideable gather time the prefetch hid.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

struct Times {
  double step = 0, comm = 0, gather = 0;  // seconds per step
};

struct Result {
  std::string preset;
  bool overlap = true;
  Times t;
  double predicted = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Compute(int us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// One preset: the medians over the timed steps of the slowest rank's times.
Times Run(braidComm_t comm, const braidShardConfig_t& cfg, size_t numel, int nbuckets, int M,
          int steps, int compute_us, bool overlap) {
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
  if (braidShardSetPrefetch(sh, overlap ? 1 : 0) != braidSuccess)
    Die(std::string("prefetch: ") + braidShardGetLastError(sh));
  std::vector<float> grad(sizes[0], 1e-3f);
  braidShardAdamW_t opt = BRAID_SHARD_ADAMW_INITIALIZER;
  std::vector<double> step_s, comm_s, gather_s;
  for (int s = 0; s <= steps; ++s) {
    braidBarrier(comm);
    braidShardTrafficReset(sh);
    double gather = 0.0;
    // Times a gather; the first of each pass has nothing before it to hide behind.
    auto gather_one = [&](int b, bool first) {
      const void* p = nullptr;
      const double g0 = Now();
      if (braidShardGather(sh, b, &p) != braidSuccess)
        Die(std::string("gather: ") + braidShardGetLastError(sh));
      if (!first) gather += Now() - g0;
    };
    const double t0 = Now();
    for (int m = 0; m < M; ++m) {
      for (int b = 0; b < nbuckets; ++b) {
        gather_one(b, b == 0);
        Compute(compute_us);
        if (braidShardRelease(sh, b) != braidSuccess)
          Die(std::string("forward: ") + braidShardGetLastError(sh));
      }
      for (int b = nbuckets - 1; b >= 0; --b) {
        gather_one(b, b == nbuckets - 1);
        Compute(compute_us);
        if (braidShardRelease(sh, b) != braidSuccess ||
            braidShardReduceGrad(sh, b, grad.data()) != braidSuccess)
          Die(std::string("backward: ") + braidShardGetLastError(sh));
      }
    }
    if (braidShardStep(sh, &opt) != braidSuccess)
      Die(std::string("step: ") + braidShardGetLastError(sh));
    braidShardTraffic_t t{};
    braidShardTraffic(sh, &t);
    // The step is as slow as its slowest rank.
    double v[3] = {Now() - t0, t.exposedSeconds, gather};
    braidAllReduce(v, v, 3, braidFloat64, braidMax, comm);
    if (s == 0) continue;  // the first step is a warm-up
    step_s.push_back(v[0]);
    comm_s.push_back(v[1]);
    gather_s.push_back(v[2]);
  }
  braidShardDestroy(sh);
  return {Median(step_s), Median(comm_s), Median(gather_s)};
}

}  // namespace

int main(int argc, char** argv) {
  double params = 8e6;
  int nbuckets = 8, M = 2, steps = 3, compute_us = 0;
  std::string overlap = "on";
  const char* profile = nullptr;
  std::string presets =
      "ddp,zero1,zero2,zero3,fsdp-hybrid,mics,zero++,paro-nig,paro-iig,paro-igg,zero-topo";
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
    else if (a == "--compute-us")
      compute_us = std::atoi(v);
    else if (a == "--overlap")
      overlap = v;
    else
      Die("unknown flag '" + a + "'");
  }
  if (params < 1 || nbuckets < 1 || M < 1 || steps < 1) Die("sizes and counts must be >= 1");
  if (compute_us < 0) Die("--compute-us must be >= 0");
  if (overlap != "on" && overlap != "off" && overlap != "both")
    Die("--overlap must be on, off or both, not '" + overlap + "'");
  std::vector<bool> modes;
  if (overlap != "off") modes.push_back(true);
  if (overlap != "on") modes.push_back(false);
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
    cluster.ranksPerNode = cfg.ranksPerNode;
    cluster.nodes = cfg.nodes;
    braidShardPlanEntry_t e;
    if (braidShardPlanEvaluate(&model, &cluster, nullptr, &cfg, &e) != braidSuccess)
      Die(braidShardGetLastError(nullptr));
    for (bool on : modes) {
      Result r;
      r.preset = name;
      r.overlap = on;
      r.t = Run(comm, cfg, static_cast<size_t>(model.params), nbuckets, M, steps, compute_us, on);
      r.predicted = e.commSeconds;
      results.push_back(r);
    }
  }
  if (rank == 0) {
    std::printf(
        "# %.3g fp32 parameters in %d buckets, %d micro-batches, %d ranks per node x %d "
        "nodes; link model intra %.3g s %.3g B/s, inter %.3g s %.3g B/s per node\n",
        model.params, nbuckets, M, cluster.ranksPerNode, cluster.nodes, cluster.link.intraLatency,
        cluster.link.intraBandwidth, cluster.link.interLatency, cluster.link.interBandwidth);
    std::printf("# compute %d us per bucket and pass\n", compute_us);
    std::printf("%-12s %7s %9s %9s %9s %12s %8s %7s\n", "preset", "overlap", "step_ms", "comm_ms",
                "gather_ms", "predicted_ms", "ratio", "hidden");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      // With both settings, "off" follows "on" for the same preset.
      std::string hidden = "";
      // Presets without gathers (s_p = 1) have nothing to hide: "-".
      if (!r.overlap && i > 0 && results[i - 1].preset == r.preset) hidden = "-";
      if (!r.overlap && i > 0 && results[i - 1].preset == r.preset && r.t.gather > 1e-3) {
        char b[16];
        std::snprintf(b, sizeof(b), "%.2f", 1.0 - results[i - 1].t.gather / r.t.gather);
        hidden = b;
      }
      std::printf("%-12s %7s %9.1f %9.1f %9.1f %12.1f %8.2f %7s\n", r.preset.c_str(),
                  r.overlap ? "on" : "off", r.t.step * 1e3, r.t.comm * 1e3, r.t.gather * 1e3,
                  r.predicted * 1e3, r.predicted / r.t.comm, hidden.c_str());
    }
    auto ranking = [&](bool by_prediction) {
      std::vector<Result> v;
      for (const auto& r : results)
        if (r.overlap == modes[0]) v.push_back(r);
      std::stable_sort(v.begin(), v.end(), [&](const Result& a, const Result& b) {
        return by_prediction ? a.predicted < b.predicted : a.t.comm < b.t.comm;
      });
      std::string s;
      for (const auto& r : v) s += (s.empty() ? "" : " < ") + r.preset;
      return s;
    };
    std::printf("measured (comm_ms): %s\npredicted:          %s\n", ranking(false).c_str(),
                ranking(true).c_str());
  }
  braidCommDestroy(comm);
  return 0;
}
