#include "topology/verbs_ports.h"

#include <algorithm>
#include <cstring>

#ifdef BRAID_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

namespace braid::topo {

uint64_t VerbsRateBps(uint8_t active_width, uint32_t active_speed) {
  // Lanes per width code, and Gb/s per lane per speed code (IB spec: SDR .. XDR; FDR10 is 10).
  int lanes = 0;
  switch (active_width) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      return 0;
  }
  double gbps = 0;
  switch (active_speed) {
    case 1:
      gbps = 2.5;
      break;
    case 2:
      gbps = 5;
      break;
    case 4:
      gbps = 10;
      break;
    case 8:
      gbps = 10;
      break;
    case 16:
      gbps = 14;
      break;
    case 32:
      gbps = 25;
      break;
    case 64:
      gbps = 50;
      break;
    case 128:
      gbps = 100;
      break;
    case 256:
      gbps = 200;
      break;
    default:
      return 0;
  }
  return static_cast<uint64_t>(lanes * gbps * 1e9);
}

std::vector<VerbsPort> QueryVerbsPorts(std::vector<std::string>* notes) {
  std::vector<VerbsPort> out;
#ifdef BRAID_HAVE_VERBS
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return out;
  for (int d = 0; d < n; ++d) {
    const char* name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) {
      if (notes) notes->push_back(std::string(name ? name : "?") + ": verbs cannot open it");
      continue;
    }
    ibv_device_attr dev{};
    if (ibv_query_device(ctx, &dev) == 0) {
      for (int p = 1; p <= dev.phys_port_cnt; ++p) {
        ibv_port_attr attr{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(p), &attr) != 0) continue;
        VerbsPort port;
        port.device = name ? name : "";
        port.port = p;
        port.ports_of_device = dev.phys_port_cnt;
        port.infiniband = attr.link_layer != IBV_LINK_LAYER_ETHERNET;
        if (attr.state == IBV_PORT_ACTIVE)
          port.rate_bps = VerbsRateBps(attr.active_width, attr.active_speed);
        if (!port.infiniband) {
          // The first RoCE v2 GID, an IPv4-mapped one (::ffff:a.b.c.d) if there is one.
          for (int i = 0; i < attr.gid_tbl_len; ++i) {
            ibv_gid_entry e{};
            if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(p), static_cast<uint32_t>(i), &e, 0) !=
                    0 ||
                e.gid_type != IBV_GID_TYPE_ROCE_V2)
              continue;
            static const uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            const bool v4 = std::memcmp(e.gid.raw, kV4Prefix, sizeof(kV4Prefix)) == 0;
            if (port.roce_v2_gid < 0 || v4) port.roce_v2_gid = i;
            if (v4) break;
          }
        }
        out.push_back(std::move(port));
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
#else
  (void)notes;
#endif
  return out;
}

void MergeVerbsPorts(const std::vector<VerbsPort>& ports, std::vector<Nic>* nics,
                     std::vector<std::string>* notes) {
  for (const VerbsPort& p : ports) {
    const std::string name =
        p.ports_of_device > 1 ? p.device + ":" + std::to_string(p.port) : p.device;
    auto it =
        std::find_if(nics->begin(), nics->end(), [&](const Nic& n) { return n.name == name; });
    if (it == nics->end()) {
      // A port sysfs did not show (a container without the host's /sys/class/infiniband).
      Nic nic;
      nic.name = name;
      nic.type = p.infiniband ? NicType::kInfiniBand : NicType::kRoCE;
      nic.speed_bps = p.rate_bps;
      nic.gid_index = p.infiniband ? -1 : p.roce_v2_gid;
      nics->push_back(nic);
      if (notes) notes->push_back(name + ": listed by verbs only (no sysfs entry)");
      continue;
    }
    if (it->speed_bps == 0 && p.rate_bps) it->speed_bps = p.rate_bps;
    if (it->type == NicType::kRoCE) it->gid_index = p.roce_v2_gid;
  }
}

}  // namespace braid::topo
