#include "topology/parallel_layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "topology/groups.h"

namespace braid::topo {

namespace {

std::string Degrees(const ParallelDegrees& d) {
  return "tp=" + std::to_string(d.tp) + " pp=" + std::to_string(d.pp) +
         " dp=" + std::to_string(d.dp);
}

}  // namespace

Result<ParallelLayout> HolmesLayout(const Topology& t, const ParallelDegrees& deg) {
  const std::vector<Slot> slots = Slots(t);
  const int n = static_cast<int>(slots.size());
  if (deg.tp < 1 || deg.pp < 1 || deg.dp < 1)
    return InvalidArgument("parallel degrees must be >= 1 (" + Degrees(deg) + ")");
  if (static_cast<int64_t>(deg.tp) * deg.pp * deg.dp != n)
    return InvalidArgument(Degrees(deg) + " makes " +
                           std::to_string(static_cast<int64_t>(deg.tp) * deg.pp * deg.dp) +
                           " ranks but the topology has " + std::to_string(n) + " slots");
  // Units: tensor-parallel groups, tp consecutive slots of one node.
  std::vector<std::vector<int>> node_slots(t.nodes.size());
  for (int s = 0; s < n; ++s) node_slots[static_cast<size_t>(slots[s].node)].push_back(s);
  std::vector<std::vector<int>> units_of_node(t.nodes.size());
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const auto& ns = node_slots[i];
    if (ns.size() % static_cast<size_t>(deg.tp) != 0)
      return InvalidArgument("tp=" + std::to_string(deg.tp) + " does not divide node " +
                             t.nodes[i].name + "'s " + std::to_string(ns.size()) +
                             " slots: a tensor-parallel group must stay inside its node");
    for (size_t k = 0; k < ns.size(); k += static_cast<size_t>(deg.tp))
      units_of_node[i].push_back(static_cast<int>(k / static_cast<size_t>(deg.tp)));
  }
  // Stages in fabric order, each taking dp units of one fabric group.
  ParallelLayout out;
  out.degrees = deg;
  out.slot_of.assign(static_cast<size_t>(n), -1);
  int stage = 0;
  std::string where;
  std::string largest;
  size_t largest_units = 0;
  for (const FabricGroup& f : FabricGroups(t)) {
    std::vector<std::pair<int, int>> units;  // (node, unit index within the node)
    for (int node : f.nodes)
      for (int u : units_of_node[static_cast<size_t>(node)]) units.emplace_back(node, u);
    if (units.size() > largest_units) {
      largest_units = units.size();
      largest = NicTypeName(f.type);
    }
    const size_t stages_here = units.size() / static_cast<size_t>(deg.dp);
    if (units.size() % static_cast<size_t>(deg.dp) != 0 || stages_here == 0)
      return InvalidArgument(
          "the " + std::string(NicTypeName(f.type)) + " fabric holds " +
          std::to_string(units.size() * static_cast<size_t>(deg.tp)) + " slots (" +
          std::to_string(units.size()) +
          " tensor-parallel groups), not a multiple of dp=" + std::to_string(deg.dp) +
          ": a stage's data-parallel groups must stay inside one fabric (Holmes)");
    for (size_t k = 0; k < stages_here; ++k, ++stage) {
      for (int d = 0; d < deg.dp; ++d) {
        const auto [node, u] = units[k * static_cast<size_t>(deg.dp) + static_cast<size_t>(d)];
        for (int tr = 0; tr < deg.tp; ++tr)
          out.slot_of[static_cast<size_t>((stage * deg.dp + d) * deg.tp + tr)] =
              node_slots[static_cast<size_t>(node)][static_cast<size_t>(u * deg.tp + tr)];
      }
      out.stage_fabric.push_back(f.type);
    }
    where += std::string(where.empty() ? "" : ", ") + std::to_string(stages_here) + " stage" +
             (stages_here == 1 ? "" : "s") + " on " + NicTypeName(f.type);
  }
  for (size_t p = 1; p < out.stage_fabric.size(); ++p)
    if (out.stage_fabric[p] != out.stage_fabric[p - 1]) ++out.cross_fabric_edges;
  out.explain = Degrees(deg) + ": tensor-parallel groups of " + std::to_string(deg.tp) +
                " inside a node; each pipeline stage's " + std::to_string(deg.dp) +
                " data-parallel replicas on one fabric (" + where + "); " +
                std::to_string(out.cross_fabric_edges) +
                " pipeline edge(s) cross between fabrics, carrying activations only.";
  (void)largest;
  return out;
}

Result<std::vector<int>> SplitLayers(int layers, const std::vector<double>& stage_speed) {
  const int stages = static_cast<int>(stage_speed.size());
  if (stages == 0) return InvalidArgument("SplitLayers: no stages");
  for (double s : stage_speed)
    if (!(s > 0) || !std::isfinite(s))
      return InvalidArgument("SplitLayers: stage speeds must be positive and finite");
  if (layers < stages)
    return InvalidArgument("SplitLayers: " + std::to_string(layers) + " layers cannot fill " +
                           std::to_string(stages) + " stages");
  // One layer each, then the rest in proportion to speed, by largest remainder.
  const double total = std::accumulate(stage_speed.begin(), stage_speed.end(), 0.0);
  const int rest = layers - stages;
  std::vector<int> out(static_cast<size_t>(stages), 1);
  std::vector<std::pair<double, int>> remainder;
  int given = 0;
  for (int i = 0; i < stages; ++i) {
    const double share = rest * stage_speed[static_cast<size_t>(i)] / total;
    const int whole = static_cast<int>(std::floor(share));
    out[static_cast<size_t>(i)] += whole;
    given += whole;
    remainder.emplace_back(share - whole, i);
  }
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int k = 0; given < rest; ++k, ++given) ++out[static_cast<size_t>(remainder[k].second)];
  return out;
}

}  // namespace braid::topo
