#include "transport/ucx/ucx_fabric.h"

#include <algorithm>
#include <sstream>

namespace braid::ucx {

const char* RouteName(Route r) {
  switch (r) {
    case Route::kInfiniBand:
      return "ib";
    case Route::kRoCE:
      return "roce";
    case Route::kLocal:
      return "local";
    case Route::kNetwork:
      return "net";
  }
  return "?";
}

std::optional<Route> RouteByName(const std::string& name) {
  for (int r = 0; r < kNumRoutes; ++r)
    if (name == RouteName(static_cast<Route>(r))) return static_cast<Route>(r);
  return std::nullopt;
}

std::string DeviceNameOf(const std::string& nic) {
  return nic.find(':') == std::string::npos ? nic + ":1" : nic;
}

namespace {

uint8_t NicTypeOf(Route route) {
  return route == Route::kInfiniBand ? kNicInfiniBand : kNicRoCE;
}

const char* FabricLongName(Route route) {
  return route == Route::kInfiniBand ? "InfiniBand" : "RoCE";
}

}  // namespace

FabricPlan PlanFabric(Route route, const std::vector<TransportContext::Nic>& nics,
                      const std::vector<Device>& found) {
  FabricPlan plan;
  std::vector<std::string> wanted;
  std::vector<int> gids;
  for (const auto& nic : nics) {
    if (nic.type != NicTypeOf(route)) continue;
    const std::string dev = DeviceNameOf(nic.name);
    wanted.push_back(dev);
    const bool has = std::any_of(found.begin(), found.end(),
                                 [&](const Device& d) { return d.network && d.name == dev; });
    if (has && std::find(plan.devices.begin(), plan.devices.end(), dev) == plan.devices.end()) {
      plan.devices.push_back(dev);
      gids.push_back(nic.gid_index);
    }
  }
  if (plan.devices.empty()) {
    std::ostringstream why;
    if (wanted.empty()) {
      why << "this node has no " << FabricLongName(route) << " NIC";
    } else {
      why << "UCX found none of this node's " << FabricLongName(route) << " devices (";
      for (size_t i = 0; i < wanted.size(); ++i) why << (i ? ", " : "") << wanted[i];
      why << "); it found: ";
      bool any = false;
      for (const Device& d : found)
        if (d.network) {
          why << (any ? ", " : "") << d.transport << "/" << d.name;
          any = true;
        }
      if (!any) why << "no network device";
    }
    plan.why_not = why.str();
    return plan;
  }
  std::string list;
  for (const auto& d : plan.devices) list += (list.empty() ? "" : ",") + d;
  plan.config.emplace_back("NET_DEVICES", list);
  if (route == Route::kRoCE && gids[0] >= 0 &&
      std::all_of(gids.begin(), gids.end(), [&](int g) { return g == gids[0]; }))
    plan.config.emplace_back("IB_GID_INDEX", std::to_string(gids[0]));
  return plan;
}

Config RouteConfig(Route route, const FabricPlan* plan, const std::vector<Device>& found,
                   const std::string& ifname) {
  switch (route) {
    case Route::kInfiniBand:
    case Route::kRoCE:
      return plan ? plan->config : Config{};
    case Route::kNetwork: {
      std::string devices = ifname;
      if (devices.empty()) {
        for (const Device& d : found)
          if (d.transport == "tcp" && d.name != "lo")
            devices += (devices.empty() ? "" : ",") + d.name;
        if (devices.empty()) devices = "lo";
      }
      return {{"TLS", "tcp"}, {"NET_DEVICES", devices}};
    }
    case Route::kLocal:
      return {{"TLS", "^tcp"}};
  }
  return {};
}

Config CommonConfig(Route route, uint64_t in_place_bytes) {
  return {{"RNDV_THRESH", CreditsLargeParts(route) ? "inf" : std::to_string(in_place_bytes)},
          {"KEEPALIVE_INTERVAL", "1s"}};
}

bool CreditsLargeParts(Route route) {
  return route == Route::kNetwork;
}

RouteMask WantedRoutes(const TransportContext& ctx, bool forced) {
  RouteMask want = 0;
  if (ctx.rank < 0 || static_cast<size_t>(ctx.rank) >= ctx.ranks.size()) return 0;
  const RankInfo& me = ctx.ranks[static_cast<size_t>(ctx.rank)];
  uint8_t local_types = 0;
  for (const auto& nic : ctx.local_nics) local_types |= static_cast<uint8_t>(1u << nic.type);
  for (const RankInfo& peer : ctx.ranks) {
    if (peer.rank == me.rank) continue;
    if (peer.host_id == me.host_id) {
      if (forced) want |= RouteBit(Route::kLocal);
      continue;
    }
    if (forced) want |= RouteBit(Route::kNetwork);
    const unsigned common = local_types & me.nic_types & peer.nic_types;
    for (Route r : {Route::kInfiniBand, Route::kRoCE})
      if (common & (1u << NicTypeOf(r))) want |= RouteBit(r);
  }
  return want;
}

std::optional<Route> ChooseRoute(const RankInfo& me, RouteMask my_routes, const RankInfo& peer,
                                 RouteMask peer_routes) {
  const RouteMask both = my_routes & peer_routes;
  if (me.host_id == peer.host_id) {
    if (both & RouteBit(Route::kLocal)) return Route::kLocal;
    return std::nullopt;
  }
  const unsigned common = me.nic_types & peer.nic_types;
  for (Route r : {Route::kInfiniBand, Route::kRoCE})
    if ((common & (1u << NicTypeOf(r))) && (both & RouteBit(r))) return r;
  if (both & RouteBit(Route::kNetwork)) return Route::kNetwork;
  return std::nullopt;
}

bool NamedIn(const std::string& list) {
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ','))
    if (name == "ucx") return true;
  return false;
}

}  // namespace braid::ucx
