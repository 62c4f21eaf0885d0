// sim_at_scale: the simulator's predictions for flat and hierarchical algorithms on clusters this
// machine cannot run (issue 10: "simulated at scale"). No network, no ranks: every rank's schedule
// is built and the event simulation (src/algorithms/simulator.h) prices it on a link model.
//
//   sim_at_scale [--nodes G] [--gpus M] [--links dgx-a100|emulated-1g] [--topology FILE]
//                [--intra-bw B/s] [--intra-lat S] [--inter-bw B/s] [--inter-lat S] [--nics K]
//                [--sizes BYTES,...] [--colls allgather,reducescatter,allreduce]
//                [--channels C] [--chunk BYTES] [--algos ring,hring,...] [--threads T]
//                [--symmetry on|off] [--ties keep|full]
//
// On a cluster of identical nodes the simulator runs one node's ranks where the schedules are
// alike on every node (simulator.h; the ranks_run column says "8/shift", "8/xor", or the number
// of ranks when it ran them all). --symmetry off runs every rank. A symmetric run that met ties
// at a shared NIC runs every rank again unless --ties keep (the default above 4096 ranks, where
// that takes minutes): the row then says "~", the model with every node serving its ties in node
// 0's order (docs/hierarchical.md gives the difference measured at 1024 ranks).
//
// --inter-bw is a node's whole inter-node link, --nics the NICs it is made of (LinkModel, tuner.h;
// the presets set both). --topology takes the machine from a topology file's first node (G copies
// of it): one rank per device, the ranks of a device group forming the third level, and the link
// model from the file's levels (device_group, node, switch per NIC times the node's NICs), e.g.
// topologies/frontier.topo for the 3-level variants (hring3, ho_ring3); the rows of a 3-level
// variant also print its time over its 2-level counterpart's. Sizes are the collective's whole
// buffer, as in the nccl-tests tables (all-gather: the gathered result, reduce-scatter: the input,
// all-reduce: the buffer). Per (collective, size) it prints one row per algorithm that serves the
// request: the simulated time, the closed-form estimate the tuner ranks with, the ratio to the flat
// ring, and the wall and CPU time the simulation (schedule builds included) took; then the tuner's
// pick for that cluster. Exit 0 when every simulation ran, 1 when one failed, 2 for bad flags.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/simulator.h"
#include "algorithms/tuner.h"
#include "topology/groups.h"
#include "topology/topology_file.h"

namespace {

using namespace braid;

struct Options {
  int nodes = 128, gpus = 8;
  LinkModel model;
  std::vector<uint64_t> sizes = {uint64_t{64} << 20, uint64_t{1} << 30};
  std::vector<CollKind> colls = {CollKind::kAllGather, CollKind::kReduceScatter,
                                 CollKind::kAllReduce};
  std::vector<std::string> algos = {"ring",     "rail_ring", "hring",    "ho_ring", "hring3",
                                    "ho_ring3", "torus2d",   "torus2d3", "leader"};
  // Device groups per node from --topology: rank j of a node is in group dgroup[j]; empty: none.
  std::vector<int> dgroup;
  int channels = 2;
  uint64_t chunk = 512 * 1024;
  // Threads that build the ranks' schedules (simulator.h): the machine's cores by default.
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Simulate one node's ranks where the schedules are alike on every node (simulator.h).
  bool symmetry = true;
  // Keep a symmetric answer that met ties at a shared NIC (the row says "~"): 1 yes, 0 no (run
  // every rank instead), -1 above kFullSimulationRanks only.
  int accept_ties = -1;
};

// Above this many ranks a full simulation takes minutes (simulator.h): symmetric answers with
// ties are kept by default.
constexpr int kFullSimulationRanks = 4096;

// DGX-A100 (the cluster of the HO-Ring and Lins papers): 8 GPUs on NVSwitch, NVLink 3 at about
// 240 GB/s of achievable bus bandwidth per GPU and direction, ~3 us per message; 8 HDR
// InfiniBand NICs of 200 Gb/s per node, one per GPU, ~24 GB/s achievable each, ~6 us per message
// (RDMA write plus completion). `inter` is the node's whole link, the sum of its NICs.
LinkModel DgxA100() {
  LinkModel m;
  m.intra = {3e-6, 240e9};
  m.inter = {6e-6, 8 * 24e9};
  m.nics_per_node = 8;
  return m;
}

// The emulated cluster of docs/emulated-cluster.md: veth pairs on one host (shm inside a node),
// one 1 Gbit/s tbf-shaped link per node, as calibrated there (0.12-0.13 GB/s, ~50 us).
LinkModel Emulated1G() {
  LinkModel m;
  m.intra = {5e-6, 4e9};
  m.inter = {50e-6, 0.125e9};
  m.nics_per_node = 1;
  return m;
}

// The machine of a topology file's first node, `nodes` times (see the header).
bool FromTopology(const std::string& path, Options* o, std::string* err) {
  auto t = topo::LoadTopologyFile(path);
  if (!t.ok()) {
    *err = t.status().message();
    return false;
  }
  if (t->nodes.empty() || t->nodes[0].devices.empty()) {
    *err = path + ": the first node has no devices (one rank per device)";
    return false;
  }
  const topo::Node& node = t->nodes[0];
  auto level = [&](topo::Level l) -> std::optional<topo::Link> { return t->level(l); };
  const auto group = topo::DeviceGroupLink(*t, 0), intra = level(topo::Level::kNode);
  auto inter = level(topo::Level::kSwitch);
  if (!inter) inter = level(topo::Level::kCluster);
  if (!intra || !inter) {
    *err = path + ": needs the node and switch (or cluster) levels' links";
    return false;
  }
  const int nics = std::max<int>(1, static_cast<int>(node.nics.size()));
  o->model = LinkModel{};
  o->model.intra = {intra->latency, intra->bandwidth};
  o->model.inter = {inter->latency, inter->bandwidth * nics};
  o->model.nics_per_node = nics;
  if (group) o->model.group = LinkParams{group->latency, group->bandwidth};
  o->gpus = static_cast<int>(node.devices.size());
  o->dgroup.clear();
  std::vector<std::string> names;
  for (const topo::Device& d : node.devices) {
    const std::string name = d.group.empty() ? "=" + d.name : d.group;
    auto it = std::find(names.begin(), names.end(), name);
    o->dgroup.push_back(static_cast<int>(it - names.begin()));
    if (it == names.end()) names.push_back(name);
  }
  return true;
}

// The process's CPU time: the simulation's cost on a shared machine, where wall time also counts
// the other jobs' slices.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool ParseBytes(const char* s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  switch (*end) {
    case 'K':
      v *= 1024;
      ++end;
      break;
    case 'M':
      v *= 1024.0 * 1024;
      ++end;
      break;
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  if (*end != '\0') return false;
  *out = v;
  return true;
}

std::vector<std::string> SplitCommas(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

int Usage(const char* why) {
  std::fprintf(
      stderr,
      "sim_at_scale: %s\nusage: sim_at_scale [--nodes G] [--gpus M] "
      "[--links dgx-a100|emulated-1g] [--topology FILE] [--intra-bw B/s] [--intra-lat S] "
      "[--inter-bw B/s] "
      "[--inter-lat S] [--nics K] [--sizes BYTES,...] [--colls allgather,reducescatter,allreduce] "
      "[--channels C] [--chunk BYTES] [--algos NAME,...] [--threads T] [--symmetry on|off] [--ties "
      "keep|full]\n",
      why);
  return 2;
}

bool ParseArgs(int argc, char** argv, Options* o, std::string* err) {
  o->model = DgxA100();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      *err = flag + " needs a value";
      return false;
    }
    const char* v = argv[++i];
    double x = 0;
    auto positive_int = [&](int* dst) {
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (end == v || *end != '\0' || n < 1 || n > 65536) return false;
      *dst = static_cast<int>(n);
      return true;
    };
    bool ok = true;
    if (flag == "--nodes") {
      ok = positive_int(&o->nodes);
    } else if (flag == "--gpus") {
      ok = positive_int(&o->gpus);
      o->dgroup.clear();  // a --topology before it no longer describes the node
    } else if (flag == "--threads") {
      ok = positive_int(&o->threads) && o->threads <= 256;
    } else if (flag == "--symmetry") {
      ok = std::strcmp(v, "on") == 0 || std::strcmp(v, "off") == 0;
      o->symmetry = std::strcmp(v, "on") == 0;
    } else if (flag == "--ties") {
      ok = std::strcmp(v, "keep") == 0 || std::strcmp(v, "full") == 0;
      o->accept_ties = std::strcmp(v, "keep") == 0 ? 1 : 0;
    } else if (flag == "--nics") {
      ok = positive_int(&o->model.nics_per_node);
    } else if (flag == "--channels") {
      ok = positive_int(&o->channels) && o->channels <= 64;
    } else if (flag == "--links") {
      if (std::strcmp(v, "dgx-a100") == 0)
        o->model = DgxA100();
      else if (std::strcmp(v, "emulated-1g") == 0)
        o->model = Emulated1G();
      else
        ok = false;
    } else if (flag == "--topology") {
      if (!FromTopology(v, o, err)) return false;
    } else if (flag == "--intra-bw" || flag == "--inter-bw") {
      ok = ParseBytes(v, &x) && x > 0;
      (flag == "--intra-bw" ? o->model.intra : o->model.inter).beta_bytes_s = x;
    } else if (flag == "--intra-lat" || flag == "--inter-lat") {
      char* end = nullptr;
      x = std::strtod(v, &end);
      ok = end != v && *end == '\0' && x >= 0;
      (flag == "--intra-lat" ? o->model.intra : o->model.inter).alpha_s = x;
    } else if (flag == "--chunk") {
      ok = ParseBytes(v, &x) && x >= 1;
      o->chunk = static_cast<uint64_t>(x);
    } else if (flag == "--sizes") {
      o->sizes.clear();
      for (const std::string& s : SplitCommas(v)) {
        if (!ParseBytes(s.c_str(), &x) || x < 1) {
          ok = false;
          break;
        }
        o->sizes.push_back(static_cast<uint64_t>(x));
      }
      ok = ok && !o->sizes.empty();
    } else if (flag == "--colls") {
      o->colls.clear();
      for (const std::string& s : SplitCommas(v)) {
        if (s == "allgather")
          o->colls.push_back(CollKind::kAllGather);
        else if (s == "reducescatter")
          o->colls.push_back(CollKind::kReduceScatter);
        else if (s == "allreduce")
          o->colls.push_back(CollKind::kAllReduce);
        else
          ok = false;
      }
      ok = ok && !o->colls.empty();
    } else if (flag == "--algos") {
      o->algos = SplitCommas(v);
      for (const std::string& a : o->algos)
        if (FindAlgorithm(a) == nullptr) {
          *err = "unknown algorithm '" + a + "'";
          return false;
        }
      ok = !o->algos.empty();
    } else {
      *err = "unknown flag " + flag;
      return false;
    }
    if (!ok) {
      *err = "bad value '" + std::string(v) + "' for " + flag;
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string err;
  if (!ParseArgs(argc, argv, &o, &err)) return Usage(err.c_str());
  const int n = o.nodes * o.gpus;
  GroupLayout layout;
  layout.nnodes = o.nodes;
  for (int r = 0; r < n; ++r) {
    layout.node_of.push_back(r / o.gpus);
    layout.local_rank.push_back(r % o.gpus);
    if (!o.dgroup.empty()) layout.dgroup_of.push_back(o.dgroup[static_cast<size_t>(r % o.gpus)]);
  }
  auto tuner = Tuner::Create("", n, o.model, &layout);
  if (!tuner.ok()) {
    std::fprintf(stderr, "sim_at_scale: tuner: %s\n", tuner.status().message().c_str());
    return 1;
  }
  std::printf(
      "# %d nodes x %d ranks = %d ranks; intra %.3g B/s %.3g s, inter (per node, %d NICs) %.3g "
      "B/s %.3g s; %d channels, chunk %" PRIu64 " B; %d threads build schedules\n",
      o.nodes, o.gpus, n, o.model.intra.beta_bytes_s, o.model.intra.alpha_s, o.model.nics_per_node,
      o.model.inter.beta_bytes_s, o.model.inter.alpha_s, o.channels, o.chunk, o.threads);
  if (!o.dgroup.empty())
    std::printf("# %d device groups per node; device-group link %.3g B/s %.3g s\n",
                *std::max_element(o.dgroup.begin(), o.dgroup.end()) + 1,
                o.model.of(LinkClass::kDeviceGroup).beta_bytes_s,
                o.model.of(LinkClass::kDeviceGroup).alpha_s);
  std::printf("%-14s %12s %-9s %12s %12s %9s %9s %9s %9s %12s\n", "collective", "bytes",
              "algorithm", "simulated_s", "estimate_s", "vs_ring", "vs_2lvl", "sim_ms", "cpu_ms",
              "ranks_run");
  int failures = 0;
  for (CollKind kind : o.colls) {
    for (uint64_t bytes : o.sizes) {
      CollArgs a;
      a.kind = kind;
      a.dtype = DataType::kFloat32;
      a.op = ReduceOp::kSum;
      a.nranks = n;
      a.nchannels = o.channels;
      a.chunk_bytes = o.chunk;
      a.layout = &layout;
      const uint64_t elems = bytes / 4;
      // all-gather: count per rank; reduce-scatter: recvcount per rank; all-reduce: the buffer.
      a.count = kind == CollKind::kAllReduce ? elems : elems / static_cast<uint64_t>(n);
      if (a.count == 0) a.count = 1;
      double ring = 0;
      std::vector<std::pair<std::string, double>> times;  // for the 3-level rows' ratio
      for (const std::string& name : o.algos) {
        const Algorithm* algo = FindAlgorithm(name);
        if (!algo->supports(a)) continue;
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = CpuSeconds();
        SimulateOptions so;
        so.threads = o.threads;
        so.symmetry = o.symmetry;
        so.accept_ties = o.accept_ties == 1 || (o.accept_ties < 0 && n > kFullSimulationRanks);
        auto t = Simulate(*algo, a, o.model, so);
        const double cpu_ms = 1e3 * (CpuSeconds() - c0);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (!t.ok()) {
          std::printf("%-14s %12" PRIu64 " %-9s FAILED: %s\n", CollKindName(kind), bytes,
                      name.c_str(), t.status().message().c_str());
          ++failures;
          continue;
        }
        const double secs = t->seconds;
        if (name == "ring") ring = secs;
        times.emplace_back(name, secs);
        char ratio[32] = "-", two[32] = "-";
        if (ring > 0) std::snprintf(ratio, sizeof ratio, "%.3f", secs / ring);
        if (name.back() == '3')  // hring3 over hring, ho_ring3 over ho_ring, torus2d3 over torus2d
          for (const auto& [other, ot] : times)
            if (other == name.substr(0, name.size() - 1) && ot > 0)
              std::snprintf(two, sizeof two, "%.3f", secs / ot);
        // The ranks the event simulation ran: all, or one node's under a symmetry of the nodes.
        char run[32];
        if (*t->symmetry)
          std::snprintf(run, sizeof run, "%d/%s%s", t->simulated_ranks, t->symmetry,
                        t->ties ? "~" : "");
        else
          std::snprintf(run, sizeof run, "%d", t->simulated_ranks);
        std::printf("%-14s %12" PRIu64 " %-9s %12.6f %12.6f %9s %9s %9.1f %9.1f %12s\n",
                    CollKindName(kind), bytes, name.c_str(), secs,
                    algo->estimate_seconds(a, o.model), ratio, two, ms, cpu_ms, run);
      }
      const Algorithm* pick = tuner->choose(a);
      std::printf("%-14s %12" PRIu64 " tuner picks %s\n", CollKindName(kind), bytes,
                  pick ? pick->name() : "(none)");
    }
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("# peak resident memory %.1f MiB\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
  return failures == 0 ? 0 : 1;
}
