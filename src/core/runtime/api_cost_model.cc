// The cost model's C API for callers without a communicator (the sharding planner):
// braidEstimateCollective ranks the same algorithms the tuner ranks for a layout of equal nodes,
// with the same closed forms, so a plan and the engine's choice cost a collective alike;
// braidLinkProfileLoad reads the link profile a calibrated job wrote, with the tuner's parser.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "algorithms/board_schedules.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/codec.h"
#include "algorithms/cost_model.h"
#include "algorithms/link_profile.h"
#include "algorithms/tuner.h"
#include "core/base/datatype.h"
#include "core/runtime/api_errors.h"
#include "core/runtime/board_selection.h"

namespace braid {
namespace {

// The block size of the ZeRO++ weight format (braid.h: 2048-8192 for weights): the encoded size
// hardly depends on it beyond this.
constexpr uint32_t kEstimateQuantBlock = 2048;

// An enum argument as the caller passed it. C lets any int through an enum parameter; in C++ a
// value outside the enumerators' range is undefined (clang's UBSan reports its load), so it is read
// as an int and checked before it is used as the enum.
template <typename E>
int RawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

Status CheckArgs(int coll, int dtype, int bits, int R, int n, int share,
                 const braidLinkParams_t* link, const double* seconds) {
  const std::string api = "braidEstimateCollective: ";
  if (!link || !seconds) return InvalidArgument(api + "link and seconds must not be NULL");
  if (coll < braidCollAllReduce || coll > braidCollBroadcast)
    return InvalidArgument(api + "unknown collective " + std::to_string(coll));
  if (dtype < 0 || dtype >= braidNumTypes)
    return InvalidArgument(api + "unknown datatype " + std::to_string(dtype));
  if (bits != 0 && bits != 4 && bits != 8)
    return InvalidArgument(api + "quantBits must be 0, 4 or 8, not " + std::to_string(bits));
  if (bits && coll != braidCollAllGather && coll != braidCollReduceScatter)
    return InvalidArgument(api + "only all-gather and reduce-scatter have quantized forms");
  // 2^20 ranks is far beyond any job; the bound keeps the layout allocation sane.
  if (R < 1 || n < 1 || static_cast<int64_t>(R) * n > (1 << 20))
    return InvalidArgument(api + "group of " + std::to_string(R) + " ranks per node x " +
                           std::to_string(n) + " nodes: both >= 1, at most 2^20 ranks");
  if (share < 1) return InvalidArgument(api + "nicSharing must be >= 1");
  if (link->nicsPerNode < 0 || link->nicsPerNode > 1024)
    return InvalidArgument(api + "nicsPerNode must be in [0, 1024]");
  const LinkParams levels[2] = {{link->intraLatency, link->intraBandwidth},
                                {link->interLatency, link->interBandwidth}};
  for (const LinkParams& p : levels)
    if (!(p.alpha_s >= 0) || !(p.beta_bytes_s > 0) || p.alpha_s > 1e3 || p.beta_bytes_s > 1e18)
      return InvalidArgument(api + "link latency must be >= 0 and bandwidth > 0 (finite)");
  return Status();
}

}  // namespace
}  // namespace braid

using namespace braid;

namespace braid {
namespace {

// One collective's arguments, layout and link model as the tuner would see them for a group of
// R x n node-major ranks (the layout lives here so that args.layout stays valid).
struct Estimate {
  GroupLayout layout;
  LinkModel model;
  CollArgs args;
  Estimate() = default;
  Estimate(const Estimate&) = delete;
};

void Prepare(braidCollective_t collective, uint64_t bytes, braidDataType_t datatype, int quantBits,
             int R, int n, int nicSharing, const braidLinkParams_t* link, Estimate* e) {
  const int N = R * n;
  GroupLayout& layout = e->layout;
  layout.nnodes = n;
  layout.node_of.resize(N);
  layout.local_rank.resize(N);
  for (int r = 0; r < N; ++r) {
    layout.node_of[r] = r / R;
    layout.local_rank[r] = r % R;
  }
  LinkModel& model = e->model;
  model.intra = {link->intraLatency, link->intraBandwidth};
  // Groups that run at once on the same nodes take turns on each NIC they use (simulator.h).
  // A group is a block of R consecutive local ranks of the node's R * nicSharing, and local
  // rank r crosses through NIC r mod nics: a group of at least `nics` ranks per node uses every
  // NIC, shared with the other groups; a smaller one uses R of them, each shared by the
  // R * nicSharing / nics ranks on it.
  const int nics = std::max(link->nicsPerNode, 1);
  const LinkParams node{link->interLatency, link->interBandwidth};
  if (R >= nics) {
    model.nics_per_node = nics;
    model.inter = SharedLink(node, nicSharing);
  } else {
    model.nics_per_node = R;
    const int per_nic = std::max(1, (R * nicSharing + nics - 1) / nics);
    model.inter = SharedLink({node.alpha_s, node.beta_bytes_s * R / nics}, per_nic);
  }

  CollArgs& a = e->args;
  a.kind = collective == braidCollAllReduce       ? CollKind::kAllReduce
           : collective == braidCollReduceScatter ? CollKind::kReduceScatter
           : collective == braidCollAllGather     ? CollKind::kAllGather
                                                  : CollKind::kBroadcast;
  a.dtype = static_cast<DataType>(datatype);
  a.nranks = N;
  a.nchannels = 2;  // what the tuner's default table assumes
  a.layout = &layout;
  uint64_t esize = DataTypeSize(a.dtype);
  uint64_t elems = bytes / esize;
  if (quantBits) {
    // The quantized schedules move encoded blocks; cost them as the algorithm the tuner would
    // pick for that many bytes (each block still crosses each level once).
    const Codec codec(quantBits == 8 ? CodecId::kInt8 : CodecId::kInt4, kEstimateQuantBlock);
    elems = EncodedBytes(codec, a.dtype, elems);
    a.dtype = DataType::kUint8;
  }
  const bool per_rank = a.kind == CollKind::kReduceScatter || a.kind == CollKind::kAllGather;
  a.count = per_rank ? (elems + N - 1) / N : elems;
  a.op = ReduceOp::kSum;
}

}  // namespace
}  // namespace braid

extern "C" braidResult_t braidEstimateCollective(braidCollective_t collective, uint64_t bytes,
                                                 braidDataType_t datatype, int quantBits,
                                                 int ranksPerNode, int nodes, int nicSharing,
                                                 const braidLinkParams_t* link, double* seconds,
                                                 char* algorithm, size_t algorithmLen) {
  try {
    Status st = CheckArgs(RawEnum(collective), RawEnum(datatype), quantBits, ranksPerNode, nodes,
                          nicSharing, link, seconds);
    if (!st.ok()) return Fail(st);
    const int n = nodes, N = ranksPerNode * nodes;
    Estimate e;
    Prepare(collective, bytes, datatype, quantBits, ranksPerNode, nodes, nicSharing, link, &e);
    CollArgs& a = e.args;
    const LinkModel& model = e.model;

    const Algorithm* best = nullptr;
    double best_t = std::numeric_limits<double>::infinity();
    if (N == 1) {
      *seconds = 0;
    } else {
      auto consider = [&](const std::vector<const Algorithm*>& list) {
        for (const Algorithm* algo : list) {
          // What the tuner ranks (BestByModel): an algorithm it would not run here (rankedFor:
          // hpat by name only, the rail ring with one NIC, ...) is not quoted either.
          if (!algo->supports(a) || !algo->rankedFor(a, model)) continue;
          const double t = algo->estimate_seconds(a, model);
          // Ties to rounding stay with the earlier algorithm, as in the tuner.
          if (!best || t < best_t * (1 - 1e-12)) {
            best = algo;
            best_t = t;
          }
        }
      };
      consider(AllAlgorithms());
      if (n > 1) consider(HierarchicalAlgorithms());
      // One node: its ranks share a host, whose board (at BRAID_ONESHOT_BYTES's default size)
      // runs the small calls as one-sided schedules, priced by the model's board link: those it
      // takes by default where every rank has a core (board_selection.h), as on a GPU node.
      if (n == 1) {
        const CollArgs plain = a;
        a.board = DefaultBoardArgs();
        if (BoardLargestPost(a) <= BoardCoreBytes(a.kind)) consider({&BoardAlgorithm()});
        a = plain;
      }
      if (!best)
        return Fail(InternalError("braidEstimateCollective: no algorithm serves " +
                                  std::string(CollKindName(a.kind)) + " on " + std::to_string(N) +
                                  " ranks"));
      *seconds = best_t;
    }
    if (algorithm && algorithmLen)
      std::snprintf(algorithm, algorithmLen, "%s", best ? best->name() : "none");
    return braidSuccess;
  } catch (const std::exception& e) {
    return Fail(SystemError(std::string("braidEstimateCollective: ") + e.what()));
  }
}

extern "C" braidResult_t braidEstimateAlgorithm(const char* algorithm, braidCollective_t collective,
                                                uint64_t bytes, braidDataType_t datatype,
                                                int quantBits, int ranksPerNode, int nodes,
                                                int nicSharing, const braidLinkParams_t* link,
                                                double* seconds) {
  try {
    if (!algorithm) return Fail(InvalidArgument("braidEstimateAlgorithm: algorithm is NULL"));
    Status st = CheckArgs(RawEnum(collective), RawEnum(datatype), quantBits, ranksPerNode, nodes,
                          nicSharing, link, seconds);
    if (!st.ok())
      return Fail(InvalidArgument("braidEstimateAlgorithm: " +
                                  st.message().substr(st.message().find(": ") + 2)));
    const Algorithm* algo = FindAlgorithm(algorithm);
    if (!algo)
      return Fail(InvalidArgument(std::string("braidEstimateAlgorithm: unknown algorithm '") +
                                  algorithm + "' (BRAID_ALGO's names, docs/algorithms.md)"));
    Estimate e;
    Prepare(collective, bytes, datatype, quantBits, ranksPerNode, nodes, nicSharing, link, &e);
    if (e.args.nranks == 1) {
      *seconds = 0;
      return braidSuccess;
    }
    if (!algo->supports(e.args))
      return Fail(InvalidArgument(std::string("braidEstimateAlgorithm: ") + algorithm +
                                  " does not serve " + CollKindName(e.args.kind) + " on " +
                                  std::to_string(ranksPerNode) + " x " + std::to_string(nodes) +
                                  " ranks"));
    *seconds = algo->estimate_seconds(e.args, e.model);
    return braidSuccess;
  } catch (const std::exception& e) {
    return Fail(SystemError(std::string("braidEstimateAlgorithm: ") + e.what()));
  }
}

extern "C" braidResult_t braidLinkProfileLoad(const char* path, braidLinkParams_t* link) {
  try {
    if (!path || !link) return Fail(InvalidArgument("braidLinkProfileLoad: NULL argument"));
    auto profile = LoadLinkProfile(path);
    if (!profile.ok())
      return Fail(InvalidArgument("braidLinkProfileLoad: " + profile.status().message()));
    if (!profile->has_value())
      return Fail(
          InvalidArgument(std::string("braidLinkProfileLoad: ") + path + " does not exist"));
    const LinkProfile& p = **profile;
    if (p.holds(LinkClass::kIntraNode)) {
      link->intraLatency = p.of(LinkClass::kIntraNode).alpha_s;
      link->intraBandwidth = p.of(LinkClass::kIntraNode).beta_bytes_s;
    }
    if (p.holds(LinkClass::kInterNode)) {
      link->interLatency = p.of(LinkClass::kInterNode).alpha_s;
      link->interBandwidth = p.of(LinkClass::kInterNode).beta_bytes_s;
    }
    return braidSuccess;
  } catch (const std::exception& e) {
    return Fail(SystemError(std::string("braidLinkProfileLoad: ") + e.what()));
  }
}
