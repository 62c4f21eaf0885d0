#include "topology/discover.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#ifdef BRAID_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "topology/topology_file.h"
#include "topology/verbs_ports.h"

namespace braid::topo {
namespace {

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = opendir(path.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// The first line of a small sysfs file, without trailing whitespace; empty when unreadable
// (reading `speed` of a down interface fails with EINVAL, which means "unknown" too).
std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

long ReadLong(const std::string& path, long fallback) {
  const std::string s = ReadLine(path);
  if (s.empty()) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 0);
  return end && *end == '\0' ? v : fallback;
}

int NumaOf(const std::string& device_dir) {
  const long n = ReadLong(device_dir + "/numa_node", -1);
  return n >= 0 && n <= kMaxNuma ? static_cast<int>(n) : -1;
}

// A name the file format accepts: other bytes become '_', at most kMaxNameBytes.
std::string SafeName(std::string s) {
  if (s.size() > kMaxNameBytes) s.resize(kMaxNameBytes);
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == ':'))
      c = '_';
  return s.empty() ? std::string("node") : s;
}

uint64_t ClampSpeed(double bps) {
  if (!(bps >= static_cast<double>(kMinNicSpeed))) return 0;
  return static_cast<uint64_t>(std::min(bps, static_cast<double>(kMaxNicSpeed)));
}

Vendor VendorOf(unsigned id) {
  switch (id) {
    case 0x10de:
      return Vendor::kNvidia;
    case 0x1002:
      return Vendor::kAmd;
    case 0x8086:
      return Vendor::kIntel;
    default:
      return Vendor::kUnknown;
  }
}

// A GPU or accelerator: display controllers (class 0x03xx, which includes NVIDIA's 3D
// controllers 0x0302 and AMD Instinct's 0x0380) and processing accelerators (0x1200), from the
// three GPU vendors only, so that a server's BMC VGA (ASPEED, Matrox) is not taken for a GPU.
bool IsGpu(unsigned class_id, unsigned vendor_id) {
  const bool accel = (class_id >> 8) == 0x03 || class_id == 0x1200;
  return accel && VendorOf(vendor_id) != Vendor::kUnknown;
}

[[maybe_unused]] std::string PciId(unsigned domain, unsigned bus, unsigned dev, unsigned func) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain & 0xffff, bus & 0xff, dev & 0x1f,
                func & 0x7);
  return buf;
}

// CPU layout from sysfs and sysconf: the fallback without hwloc.
[[maybe_unused]] CpuInfo SysfsCpu() {
  CpuInfo c;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  c.threads = online > 0 ? static_cast<int>(std::min<long>(online, kMaxThreads)) : 1;
  std::set<long> packages;
  std::set<std::pair<long, long>> cores;
  for (const std::string& cpu : ListDir("/sys/devices/system/cpu")) {
    if (cpu.size() < 4 || cpu.compare(0, 3, "cpu") != 0 || !std::isdigit(cpu[3])) continue;
    const std::string dir = "/sys/devices/system/cpu/" + cpu + "/topology/";
    const long pkg = ReadLong(dir + "physical_package_id", -1);
    const long core = ReadLong(dir + "core_id", -1);
    if (pkg < 0 || core < 0) continue;  // offline CPUs have no topology directory
    packages.insert(pkg);
    cores.insert({pkg, core});
  }
  int numa = 0;
  for (const std::string& n : ListDir("/sys/devices/system/node"))
    if (n.size() > 4 && n.compare(0, 4, "node") == 0 && std::isdigit(n[4])) ++numa;
  c.packages = std::clamp(static_cast<int>(packages.size()), 1, kMaxPackages);
  c.cores = cores.empty() ? c.threads : std::min(static_cast<int>(cores.size()), c.threads);
  c.numa_nodes = std::max(numa, 1);
  c.packages = std::min(c.packages, c.cores);
  return c;
}

// GPUs from /sys/bus/pci/devices: the fallback without hwloc.
[[maybe_unused]] std::vector<Device> SysfsGpus() {
  std::vector<Device> gpus;
  const std::string root = "/sys/bus/pci/devices/";
  for (const std::string& bdf : ListDir(root)) {
    const long cls = ReadLong(root + bdf + "/class", -1);  // 0xCCSSPP
    const long vendor = ReadLong(root + bdf + "/vendor", -1);
    if (cls < 0 || vendor < 0 ||
        !IsGpu(static_cast<unsigned>(cls >> 8), static_cast<unsigned>(vendor)))
      continue;
    Device d;
    d.name = "gpu" + std::to_string(gpus.size());
    d.vendor = VendorOf(static_cast<unsigned>(vendor));
    d.pci = bdf.size() == 12 ? bdf : std::string();
    d.numa = NumaOf(root + bdf);
    gpus.push_back(std::move(d));
  }
  return gpus;
}

#ifdef BRAID_HAVE_HWLOC
// The NUMA node (OS index) closest to an I/O object: the first in its non-I/O ancestor's set.
int HwlocNuma(hwloc_topology_t topo, hwloc_obj_t io) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, io);
  if (!anc || !anc->nodeset) return -1;
  const int first = hwloc_bitmap_first(anc->nodeset);
  return first >= 0 && first <= kMaxNuma ? first : -1;
}

struct HwlocView {
  CpuInfo cpu;
  std::vector<Device> gpus;
  std::map<std::string, int> osdev_numa;  // network and RDMA OS devices by name
};

// hwloc components braid never loads (ReadHwloc says why).
constexpr const char* kHwlocComponentsNotLoaded[] = {"gl",   "opencl", "cuda",
                                                     "nvml", "rsmi",   "levelzero"};

Result<HwlocView> ReadHwloc() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return SystemError("hwloc_topology_init failed");
  // I/O objects are filtered out by default in hwloc 2.x; KEEP_IMPORTANT keeps GPUs, NICs,
  // RDMA devices and the bridges above them, not every PCI function.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#if HWLOC_API_VERSION >= 0x00020100
  // hwloc's Linux backend reads PCI devices from sysfs itself; its "pci" component (libpciaccess)
  // finds the same devices here but leaks about 1 KiB per load under the I/O filter (hwloc issue
  // open-mpi/hwloc#636, which LeakSanitizer reports in the sanitizer tier) and is not safe to run
  // from two threads at once (open-mpi/hwloc#297). Without it the result is the same.
  hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  // Only the core and Linux backends run (CPU, NUMA, PCI from sysfs, OS devices). The others
  // hwloc may load as plugins do what a collective library must not do at init: "gl" probes X
  // displays (connects to 127.0.0.1:6000-6009 and /tmp/.X11-unix), "opencl", "cuda", "nvml",
  // "rsmi" and "levelzero" initialise vendor runtimes (a CUDA context in every rank, before the
  // application chose its device). braid reads GPUs from the PCI devices the Linux backend lists.
  for (const char* c : kHwlocComponentsNotLoaded)
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, c);
#endif
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return SystemError("hwloc_topology_load failed");
  }
  HwlocView v;
  const int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  const int packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  const int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  // Some hypervisors expose no package or core objects: count what is there, at least one.
  v.cpu.threads = std::clamp(pus, 1, kMaxThreads);
  v.cpu.cores = std::clamp(cores > 0 ? cores : pus, 1, v.cpu.threads);
  v.cpu.packages = std::clamp(packages, 1, std::min(kMaxPackages, v.cpu.cores));
  v.cpu.numa_nodes = std::clamp(numa, 1, kMaxNuma + 1);
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o;
       o = hwloc_get_next_pcidev(topo, o)) {
    const auto& p = o->attr->pcidev;
    if (!IsGpu(p.class_id, p.vendor_id)) continue;
    Device d;
    d.name = "gpu" + std::to_string(v.gpus.size());
    d.vendor = VendorOf(p.vendor_id);
    d.pci = PciId(p.domain, p.bus, p.dev, p.func);
    d.numa = HwlocNuma(topo, o);
    v.gpus.push_back(std::move(d));
  }
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
    const auto type = o->attr->osdev.type;
    if (o->name && (type == HWLOC_OBJ_OSDEV_NETWORK || type == HWLOC_OBJ_OSDEV_OPENFABRICS))
      v.osdev_numa[o->name] = HwlocNuma(topo, o);
  }
  hwloc_topology_destroy(topo);
  return v;
}
#endif

}  // namespace

std::vector<Nic> DiscoverNics(const DiscoverOptions& options, std::vector<std::string>* notes) {
  std::vector<Nic> nics;
  std::set<std::string> rdma_netdevs;
  const std::string& ib = options.sys_class_infiniband;
  for (const std::string& dev : ListDir(ib)) {
    const std::string dir = ib + "/" + dev;
    for (const std::string& nd : ListDir(dir + "/device/net")) rdma_netdevs.insert(nd);
    const std::vector<std::string> ports = ListDir(dir + "/ports");
    for (const std::string& port : ports) {
      const std::string pdir = dir + "/ports/" + port;
      const std::string layer = ReadLine(pdir + "/link_layer");
      Nic nic;
      nic.name = SafeName(ports.size() == 1 ? dev : dev + ":" + port);
      if (layer == "InfiniBand") {
        nic.type = NicType::kInfiniBand;
      } else if (layer == "Ethernet") {
        nic.type = NicType::kRoCE;  // an RDMA device whose link layer is Ethernet
      } else {
        notes->push_back(dev + " port " + port + ": link layer '" + layer +
                         "' is neither InfiniBand nor Ethernet; skipped");
        continue;
      }
      // "200 Gb/sec (4X HDR)"
      const std::string rate = ReadLine(pdir + "/rate");
      nic.speed_bps = ClampSpeed(std::strtod(rate.c_str(), nullptr) * 1e9);
      if (!nic.speed_bps) notes->push_back(nic.name + ": rate unknown ('" + rate + "')");
      nic.numa = NumaOf(dir + "/device");
      nics.push_back(std::move(nic));
    }
  }
  const std::string& net = options.sys_class_net;
  for (const std::string& ifname : ListDir(net)) {
    const std::string dir = net + "/" + ifname;
    const long arp_type = ReadLong(dir + "/type", -1);
    if (ifname == "lo" || arp_type == 772) continue;  // ARPHRD_LOOPBACK
    if (!Exists(dir + "/device")) {
      notes->push_back(ifname + ": virtual interface (no device behind it); skipped");
      continue;
    }
    if (rdma_netdevs.count(ifname)) {
      notes->push_back(ifname + ": the netdev of an RDMA device listed above; skipped");
      continue;
    }
    if (arp_type == 32) {  // ARPHRD_INFINIBAND: IPoIB on an HCA the RDMA pass did not list
      notes->push_back(ifname + ": IPoIB interface; skipped");
      continue;
    }
    Nic nic;
    nic.name = SafeName(ifname);
    nic.type = NicType::kEthernet;
    const long mbps = ReadLong(dir + "/speed", -1);  // Mb/s; -1 or unreadable: unknown
    nic.speed_bps = mbps > 0 ? ClampSpeed(static_cast<double>(mbps) * 1e6) : 0;
    if (!nic.speed_bps) notes->push_back(ifname + ": speed unknown (the driver reports none)");
    nic.numa = NumaOf(dir + "/device");
    nics.push_back(std::move(nic));
  }
  return nics;
}

Result<Discovery> Discover(const DiscoverOptions& options) {
  Discovery out;
  Node node;
  if (!options.node_name.empty()) {
    node.name = SafeName(options.node_name);
  } else {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
    node.name = SafeName(host);
  }
#ifdef BRAID_HAVE_HWLOC
  BRAID_ASSIGN_OR_RETURN(HwlocView hw, ReadHwloc());
  out.method = std::string("hwloc ") + HWLOC_VERSION + " + sysfs";
  node.cpu = hw.cpu;
  node.devices = std::move(hw.gpus);
#else
  out.method = "sysfs + sysconf (no hwloc)";
  out.notes.push_back(
      "braid was built without hwloc: CPU layout from sysfs/sysconf, GPUs from "
      "/sys/bus/pci; install hwloc (libhwloc-dev) and rebuild for I/O affinity");
  node.cpu = SysfsCpu();
  node.devices = SysfsGpus();
#endif
  node.nics = DiscoverNics(options, &out.notes);
  // What verbs adds (RoCE v2 GID indexes, ports sysfs does not show): only for this machine's own
  // sysfs, not for the fake trees tests point discovery at.
  if (options.sys_class_infiniband == DiscoverOptions{}.sys_class_infiniband)
    MergeVerbsPorts(QueryVerbsPorts(&out.notes), &node.nics, &out.notes);
#ifdef BRAID_HAVE_HWLOC
  for (Nic& nic : node.nics) {
    if (nic.numa >= 0) continue;
    // hwloc names an RDMA port's device without the ":port" this model adds.
    auto it = hw.osdev_numa.find(nic.name.substr(0, nic.name.find(':')));
    if (it != hw.osdev_numa.end()) nic.numa = it->second;
  }
#endif
  if (node.devices.empty()) out.notes.push_back("no GPU found: one CPU slot on this node");
  out.topology.name = "local";
  out.topology.nodes.push_back(std::move(node));
  BRAID_RETURN_IF_ERROR(Validate(out.topology));
  return out;
}

}  // namespace braid::topo
