// Discovery on this machine (the CPU layout against sysconf and sysfs, the NICs against
// /sys/class/net) and on fake sysfs trees (InfiniBand, RoCE, IPoIB, virtual interfaces).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "topology/discover.h"
#include "topology/topology_file.h"

namespace braid::topo {
namespace {

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

TEST(Discover, ThisMachine) {
  auto d = Discover();
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->topology.nodes.size(), 1u);
  const Node& n = d->topology.nodes[0];
  EXPECT_GE(n.cpu.packages, 1);
  EXPECT_GE(n.cpu.numa_nodes, 1);
  // Hardware threads are what sysconf counts; cores are the distinct (package, core_id) pairs
  // sysfs lists, counted here independently of the code under test.
  EXPECT_EQ(n.cpu.threads, sysconf(_SC_NPROCESSORS_ONLN));
  std::set<std::pair<std::string, std::string>> cores;
  for (const std::string& cpu : Entries("/sys/devices/system/cpu")) {
    const std::string dir = "/sys/devices/system/cpu/" + cpu + "/topology/";
    std::ifstream pkg(dir + "physical_package_id"), core(dir + "core_id");
    std::string p, c;
    if (pkg >> p && core >> c) cores.insert({p, c});
  }
  if (!cores.empty()) {
    EXPECT_EQ(n.cpu.cores, static_cast<int>(cores.size()));
  }
  EXPECT_LE(n.cpu.cores, n.cpu.threads);

  // The NICs: /sys/class/net minus lo and minus virtual interfaces (no device behind them),
  // minus netdevs of RDMA devices (this machine has none).
  std::set<std::string> want;
  for (const std::string& ifname : Entries("/sys/class/net"))
    if (ifname != "lo" && Exists("/sys/class/net/" + ifname + "/device")) want.insert(ifname);
  std::set<std::string> got;
  for (const Nic& nic : n.nics) {
    got.insert(nic.name);
    if (!Exists("/sys/class/infiniband")) {
      EXPECT_EQ(nic.type, NicType::kEthernet) << nic.name;
    }
  }
  if (!Exists("/sys/class/infiniband")) {
    EXPECT_EQ(got, want);
  }
  for (const std::string& note : d->notes) std::printf("note: %s\n", note.c_str());
  std::printf("method: %s\n%s", d->method.c_str(), DumpTopology(d->topology).c_str());

  // What discovery finds, the file format can hold.
  auto back = ParseTopology(DumpTopology(d->topology), "dump");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, d->topology);
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid_fake_sysfs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    options_.sys_class_net = root_ + "/net";
    options_.sys_class_infiniband = root_ + "/infiniband";
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void Write(const std::string& rel, const std::string& content) {
    const std::string path = root_ + "/" + rel;
    std::string cmd = "mkdir -p \"$(dirname '" + path + "')\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ofstream(path) << content;
  }
  std::string root_;
  DiscoverOptions options_;
};

TEST_F(FakeSysfs, InfinibandRoceEthernetAndWhatIsSkipped) {
  // An IB HCA with one port and its IPoIB netdev.
  Write("infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  Write("infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  Write("infiniband/mlx5_0/device/numa_node", "3\n");
  Write("infiniband/mlx5_0/device/net/ib0/type", "32\n");
  // A dual-port RoCE NIC whose netdev is eth2.
  Write("infiniband/mlx5_1/ports/1/link_layer", "Ethernet\n");
  Write("infiniband/mlx5_1/ports/1/rate", "100 Gb/sec (4X EDR)\n");
  Write("infiniband/mlx5_1/ports/2/link_layer", "Ethernet\n");
  Write("infiniband/mlx5_1/ports/2/rate", "25 Gb/sec (1X EDR)\n");
  Write("infiniband/mlx5_1/device/numa_node", "-1\n");
  Write("infiniband/mlx5_1/device/net/eth2/type", "1\n");
  // A port with an unknown link layer.
  Write("infiniband/odd0/ports/1/link_layer", "Omni-Path\n");
  // Net interfaces: loopback, the RDMA netdevs, a plain NIC, a virtual bridge, an IPoIB netdev
  // of an HCA not listed above, a NIC whose speed is unreadable.
  Write("net/lo/type", "772\n");
  Write("net/ib0/type", "32\n");
  Write("net/ib0/device/numa_node", "3\n");
  Write("net/eth2/type", "1\n");
  Write("net/eth2/device/numa_node", "0\n");
  Write("net/eth0/type", "1\n");
  Write("net/eth0/speed", "25000\n");
  Write("net/eth0/device/numa_node", "1\n");
  Write("net/br0/type", "1\n");
  Write("net/ib7/type", "32\n");
  Write("net/ib7/device/numa_node", "0\n");
  Write("net/eth1/type", "1\n");
  Write("net/eth1/speed", "-1\n");
  Write("net/eth1/device/numa_node", "-1\n");

  std::vector<std::string> notes;
  std::vector<Nic> nics = DiscoverNics(options_, &notes);
  ASSERT_EQ(nics.size(), 5u);
  EXPECT_EQ(nics[0], (Nic{"mlx5_0", NicType::kInfiniBand, 200000000000, 3}));
  EXPECT_EQ(nics[1], (Nic{"mlx5_1:1", NicType::kRoCE, 100000000000, -1}));
  EXPECT_EQ(nics[2], (Nic{"mlx5_1:2", NicType::kRoCE, 25000000000, -1}));
  EXPECT_EQ(nics[3], (Nic{"eth0", NicType::kEthernet, 25000000000, 1}));
  EXPECT_EQ(nics[4], (Nic{"eth1", NicType::kEthernet, 0, -1}));
  std::string all;
  for (const std::string& n : notes) all += n + "\n";
  EXPECT_NE(all.find("Omni-Path"), std::string::npos) << all;
  EXPECT_NE(all.find("br0: virtual"), std::string::npos) << all;
  EXPECT_NE(all.find("ib0: the netdev of an RDMA device"), std::string::npos) << all;
  EXPECT_NE(all.find("eth2: the netdev of an RDMA device"), std::string::npos) << all;
  EXPECT_NE(all.find("ib7: IPoIB"), std::string::npos) << all;
  EXPECT_NE(all.find("eth1: speed unknown"), std::string::npos) << all;
  EXPECT_EQ(all.find("lo:"), std::string::npos) << all;  // loopback is not worth a note
}

}  // namespace
}  // namespace braid::topo
