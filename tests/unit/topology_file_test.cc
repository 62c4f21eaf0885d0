// The topology file format: every kind of malformed file is refused with "<origin>:<line>: " and
// the problem; the bounds hold; the round trip is exact, numbers and optional fields included.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "topology/topology_file.h"

namespace braid::topo {
namespace {

const char* kHeader = "braid-topology 1\n";

struct Bad {
  std::string text;
  int line;              // the line the message must name; 0: no line (whole-file problems)
  std::string contains;  // a piece of the message
};

std::string Describe(const Bad& b) {
  return "input:\n" + b.text;
}

void ExpectRefused(const Bad& b) {
  auto t = ParseTopology(b.text, "t");
  ASSERT_FALSE(t.ok()) << Describe(b);
  const std::string& m = t.status().message();
  EXPECT_EQ(t.status().cls(), ErrorClass::kInvalidArgument);
  if (b.line > 0) {
    EXPECT_EQ(m.rfind("t:" + std::to_string(b.line) + ": ", 0), 0u) << m << "\n" << Describe(b);
  }
  EXPECT_NE(m.find(b.contains), std::string::npos) << m << "\n" << Describe(b);
}

TEST(TopologyFile, RefusesMalformedLinesNamingTheLine) {
  const std::string h = kHeader;
  const std::string node = "node n\n";
  const std::vector<Bad> cases = {
      // Header and structure.
      {"", 0, "no header"},
      {"# only a comment\n", 0, "no header"},
      {"node n\n", 1, "expected the header"},
      {"braid-topology 2\n", 1, "version '2' is not supported"},
      {"braid-topology\n", 1, "not supported"},
      {h + "braid-topology 1\n", 2, "header appears twice"},
      {h + "frobnicate x\n", 2, "unknown keyword 'frobnicate'"},
      {h + "nic x type=ib\n", 2, "outside a node"},
      {h + "cpu packages=1 numa=1 cores=1 threads=1\n", 2, "outside a node"},
      {h + "cluster a\ncluster b\n", 3, "'cluster' appears twice"},
      // Unknown, missing, duplicate and empty fields.
      {h + node + "  nic x type=ib sped=1g\n", 3, "unknown field 'sped'"},
      {h + node + "  nic x speed=1g\n", 3, "needs type="},
      {h + node + "  nic x type=ib type=ib\n", 3, "given twice"},
      {h + node + "  nic x type=\n", 3, "empty value"},
      {h + node + "  nic x type=ib stray\n", 3, "expected key=value"},
      {h + "cluster c x=1\n", 2, "unknown field 'x'"},
      {h + "node n colour=red\n", 2, "unknown field 'colour'"},
      {h + node + "  gpu g\n", 3, "needs vendor="},
      {h + node + "  cpu packages=1 numa=1 cores=2\n", 3, "needs threads="},
      {h + node + "  cpu x packages=1\n", 3, "takes only fields"},
      {h + node + "  nic\n", 3, "needs a name"},
      {h + "node bad/name\n", 2, "needs a name"},
      {h + "node " + std::string(65, 'a') + "\n", 2, "needs a name"},
      // Enumerations.
      {h + node + "  nic x type=myrinet\n", 3, "expected ib, roce, slingshot or ethernet"},
      {h + node + "  gpu g vendor=3dfx\n", 3, "expected nvidia, amd"},
      {h + "level rack bw=1GB/s lat=1us\n", 2, "unknown level 'rack'"},
      {h + node + "  gpu g vendor=nvidia pci=07:00.0\n", 3, "PCI bus id"},
      {h + node + "  gpu g vendor=nvidia pci=0000:07:00.0x\n", 3, "PCI bus id"},
      // Duplicate names.
      {h + "node a\nnode a\n", 3, "already defined on line 2"},
      {h + "switch s\nswitch s\n", 3, "already defined on line 2"},
      {h + "level node bw=1GB/s lat=1us\nlevel node bw=1GB/s lat=1us\n", 3, "given twice"},
      {h + node + "  nic x type=ib\n  nic x type=roce\n", 4, "defined twice"},
      {h + node + "  group g\n  group g\n", 4, "defined twice"},
      {h + node + "  gpu g vendor=amd\n  gpu g vendor=amd\n", 4, "defined twice"},
      {h + node +
           "  cpu packages=1 numa=1 cores=1 threads=1\n"
           "  cpu packages=1 numa=1 cores=1 threads=1\n",
       4, "two 'cpu' lines"},
      // Dangling references and cycles (found after the whole file, reported where they are).
      {h + "switch s parent=nowhere\n", 2, "parent 'nowhere' is not defined"},
      {h + "\nnode n switch=nowhere\n", 3, "switch 'nowhere' is not defined"},
      {h + node + "  group a\n  gpu g vendor=amd group=b\n", 4, "group 'b' is not defined"},
      {h + "switch a parent=a\n", 2, "cycle"},
      {h + "switch a parent=b\nswitch b parent=c\nswitch c parent=a\n", 2,
       "cycle: a -> b -> c -> a"},
      {h + "switch top\nswitch a parent=b\nswitch b parent=a\n", 3, "cycle"},
      // Bandwidths and latencies: negative, zero, absurd, not numbers, wrong or missing units.
      {h + "level node bw=-5GB/s lat=1us\n", 2, "expected a bandwidth"},
      {h + "level node bw=0GB/s lat=1us\n", 2, "out of range"},
      {h + "level node bw=0.5B/s lat=1us\n", 2, "out of range"},
      {h + "level node bw=5000TB/s lat=1us\n", 2, "out of range"},
      {h + "level node bw=1e400GB/s lat=1us\n", 2, "expected a bandwidth"},
      {h + "level node bw=infGB/s lat=1us\n", 2, "expected a bandwidth"},
      {h + "level node bw=nanGB/s lat=1us\n", 2, "expected a bandwidth"},
      {h + "level node bw=fastGB/s lat=1us\n", 2, "expected a bandwidth"},
      {h + "level node bw=25Gb/s lat=1us\n", 2, "bytes/s"},  // bits are for NICs
      {h + "level node bw=25 lat=1us\n", 2, "with a unit"},
      {h + "level node bw=0x10GB/s lat=1us\n", 2, "expected a bandwidth"},
      {h + "level node bw=1GB/s lat=0us\n", 2, "out of range"},
      {h + "level node bw=1GB/s lat=-1us\n", 2, "expected a latency"},
      {h + "level node bw=1GB/s lat=1e-30s\n", 2, "out of range"},
      {h + "level node bw=1GB/s lat=1000s\n", 2, "out of range"},
      {h + "level node bw=1GB/s lat=1\n", 2, "with a unit"},
      {h + "level node bw=1GB/s lat=1fortnight\n", 2, "expected a latency"},
      {h + "level node bw=1GB/s\n", 2, "needs lat="},
      {h + "switch s bw=1GB/s\n", 2, "go together"},
      {h + node + "  group g lat=1us\n", 3, "go together"},
      // NIC speeds.
      {h + node + "  nic x type=ib speed=0\n", 3, "out of range"},
      {h + node + "  nic x type=ib speed=-200g\n", 3, "expected bits/s"},
      {h + node + "  nic x type=ib speed=fast\n", 3, "expected bits/s"},
      {h + node + "  nic x type=ib speed=200q\n", 3, "expected bits/s"},
      {h + node + "  nic x type=ib speed=1.5\n", 3, "whole number"},
      {h + node + "  nic x type=ib speed=999t\n", 3, "out of range"},
      // Integers: not numbers, negative, huge.
      {h + node + "  nic x type=ib numa=-1\n", 3, "expected an integer"},
      {h + node + "  nic x type=ib numa=1x\n", 3, "expected an integer"},
      {h + node + "  nic x type=ib numa=4096\n", 3, "expected an integer"},
      {h + node + "  cpu packages=1 numa=1 cores=99999999999 threads=1\n", 3,
       "expected an integer"},
      {h + node + "  cpu packages=1 numa=1 cores=abc threads=1\n", 3, "expected an integer"},
      {h + node + "  cpu packages=0 numa=1 cores=1 threads=1\n", 3, "expected an integer"},
      {h + node + "  cpu packages=1 numa=1 cores=8 threads=4\n", 3, "cores <= threads"},
      {h + node + "  cpu packages=4 numa=1 cores=2 threads=4\n", 3, "packages <= cores"},
      // Bytes a text file should not have.
      {h + "node n\x01\n", 2, "not printable"},
      {h + std::string("node n\0x", 8) + "\n", 2, "not printable"},
      {h + "node n\xc3\xa9\n", 2, "not printable"},
  };
  for (const Bad& b : cases) ExpectRefused(b);
}

TEST(TopologyFile, BoundsEverything) {
  // Line length.
  ExpectRefused({std::string(kHeader) + "# " + std::string(2000, 'x') + "\n", 2, "limit is 1024"});
  // File size.
  std::string big(kMaxFileBytes + 1, '\n');
  ExpectRefused({std::string(kHeader) + big, 0, "at most"});
  // Node count: the first node past the limit names its line.
  std::string nodes = kHeader;
  for (size_t i = 0; i <= kMaxNodes; ++i) nodes += "node n" + std::to_string(i) + "\n";
  ExpectRefused({nodes, static_cast<int>(kMaxNodes) + 2, "more than 4096 nodes"});
  // Per-node counts.
  for (const char* kind : {"nic", "group", "gpu"}) {
    std::string text = std::string(kHeader) + "node n\n";
    for (size_t i = 0; i <= kMaxPerNode; ++i) {
      text += std::string(kind) + " x" + std::to_string(i);
      text += std::string(kind) == "nic"   ? " type=ib\n"
              : std::string(kind) == "gpu" ? " vendor=amd\n"
                                           : "\n";
    }
    ExpectRefused({text, static_cast<int>(kMaxPerNode) + 3, "more than 256"});
  }
  std::string switches = kHeader;
  for (size_t i = 0; i <= kMaxSwitches; ++i) switches += "switch s" + std::to_string(i) + "\n";
  ExpectRefused({switches, static_cast<int>(kMaxSwitches) + 2, "more than 1024 switch"});
}

TEST(TopologyFile, AcceptsCommentsBlankLinesCrlfAndForwardReferences) {
  const std::string text =
      "# a comment first\r\n"
      "\n"
      "braid-topology 1   # trailing comment\r\n"
      "\tcluster  c\r\n"
      "switch leaf parent=spine bw=10GB/s lat=1.25us\n"  // parent defined below
      "switch spine\n"
      "node n switch=leaf\n"
      "  gpu g vendor=intel group=later\n"  // group defined below, within the node
      "  group later\n"
      "  nic hsn0 type=slingshot speed=200Gb/s\n"
      "  nic eth0 type=ethernet speed=2500M\n";
  auto t = ParseTopology(text, "t");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->name, "c");
  ASSERT_EQ(t->switches.size(), 2u);
  EXPECT_EQ(t->switches[0].parent, "spine");
  EXPECT_EQ(t->switches[0].link->latency, 1.25e-6);
  EXPECT_EQ(t->nodes[0].nics[0].speed_bps, 200000000000u);
  EXPECT_EQ(t->nodes[0].nics[1].speed_bps, 2500000000u);
  EXPECT_EQ(t->nodes[0].nics[0].numa, -1);  // omitted: unknown
  EXPECT_EQ(t->nodes[0].devices[0].group, "later");
}

TEST(TopologyFile, RoundTripIsExact) {
  Topology t;
  t.name = "odd-numbers";
  // Values no unit writes as a short decimal: the dump must still read back bit for bit.
  t.levels[0] = Link{1.0 / 3.0 * 1e9, 1.0 / 7.0 * 1e-6};
  t.levels[1] = Link{12.5e9, 0.5e-6};
  t.levels[2] = Link{kMinBandwidth, kMinLatency};
  t.levels[3] = Link{kMaxBandwidth, kMaxLatency};
  t.switches = {SwitchDomain{"leaf", "spine", Link{123456789.125, 3.3e-5}},
                SwitchDomain{"spine", "", std::nullopt}};
  Node n;
  n.name = "n:0.a-b_c";
  n.switch_domain = "leaf";
  n.link = Link{7e10, 9.99e-7};
  n.cpu = CpuInfo{3, 5, 7, 14};
  n.nics = {Nic{"a", NicType::kInfiniBand, 200000000000, 0},
            Nic{"b", NicType::kRoCE, 2500000000, kMaxNuma},
            Nic{"c", NicType::kSlingshot, 1234567, -1}, Nic{"d", NicType::kEthernet, 0, 3}};
  n.groups = {DeviceGroup{"g", Link{2e11, 1e-6}}, DeviceGroup{"h", std::nullopt}};
  n.devices = {Device{"x", Vendor::kNvidia, "0000:07:00.0", 3, "g"},
               Device{"y", Vendor::kUnknown, "", -1, ""},
               Device{"z", Vendor::kIntel, "abcd:ef:1f.7", 0, "h"}};
  t.nodes = {n, Node{"bare", "", std::nullopt, {}, {}, {}, {}}};
  ASSERT_TRUE(Validate(t).ok()) << Validate(t).message();

  const std::string text = DumpTopology(t);
  auto back = ParseTopology(text, "dump");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  EXPECT_EQ(*back, t) << text;
  EXPECT_EQ(DumpTopology(*back), text);
  // Readable units where they are exact.
  EXPECT_NE(text.find("bw=12.5GB/s lat=500ns"), std::string::npos) << text;
  EXPECT_NE(text.find("speed=200g"), std::string::npos) << text;
  EXPECT_NE(text.find("speed=2500m"), std::string::npos) << text;
}

TEST(TopologyFile, LoadFileErrorsNameThePath) {
  auto missing = LoadTopologyFile("/nonexistent/braid.topo");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/braid.topo"), std::string::npos);

  char path[] = "/tmp/braid_topo_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = std::string(kHeader) + "node a\nnode a\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  auto dup = LoadTopologyFile(path);
  unlink(path);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message().rfind(std::string(path) + ":3: ", 0), 0u)
      << dup.status().message();
}

TEST(TopologyFile, ValidateCatchesWhatTypesCannot) {
  Topology t;
  t.switches = {SwitchDomain{"a", "b", std::nullopt}, SwitchDomain{"b", "a", std::nullopt}};
  EXPECT_NE(Validate(t).message().find("cycle"), std::string::npos);
  t.switches = {SwitchDomain{"a", "missing", std::nullopt}};
  EXPECT_NE(Validate(t).message().find("not defined"), std::string::npos);
  t.switches.clear();
  t.levels[1] = Link{-1, 1e-6};
  EXPECT_NE(Validate(t).message().find("positive"), std::string::npos);
}

}  // namespace
}  // namespace braid::topo
