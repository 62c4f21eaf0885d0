// The topology file format (docs/topology.md): a line-oriented text form of topo::Topology that
// BRAID_TOPO_FILE names, that topologies/ ships examples of, and that braid-info dumps.
//
//   braid-topology 1                       # header: format version, first non-comment line
//   cluster mixed
//   level switch bw=25GB/s lat=2us         # default link per level
//   switch leaf0 parent=spine bw=25GB/s lat=1.5us
//   node n0 switch=leaf0                   # cpu/nic/group/gpu lines belong to the last node
//     cpu packages=2 numa=8 cores=128 threads=256
//     nic mlx5_0 type=ib speed=200g numa=3
//     group nvswitch bw=300GB/s lat=1us
//     gpu gpu0 vendor=nvidia pci=0000:07:00.0 numa=3 group=nvswitch
//
// The loader is written for hostile input (the fuzz target tests/fuzz/fuzz_topology_file.cc):
// everything is bounded (file size, line length, name length, counts of every kind, every
// number's range), and every refusal is an InvalidArgument "<origin>:<line>: <problem>" that says
// what was expected. DumpTopology writes the canonical form; ParseTopology(DumpTopology(t)) == t
// for every model the loader accepts.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "topology/topology.h"

namespace braid::topo {

inline constexpr int kTopologyFileVersion = 1;

// Bounds on what a file may hold. Generous for real machines (a DGX node has 8 GPUs and 10 NICs;
// a 4096-node job is large), small enough that a hostile file cannot make braid allocate much.
inline constexpr size_t kMaxFileBytes = 1 << 20;
inline constexpr size_t kMaxLineBytes = 1024;
inline constexpr size_t kMaxNameBytes = 64;
inline constexpr size_t kMaxNodes = 4096;
inline constexpr size_t kMaxSwitches = 1024;
inline constexpr size_t kMaxPerNode = 256;  // NICs, groups and devices, each
inline constexpr double kMinBandwidth = 1e3, kMaxBandwidth = 1e15;  // bytes/s: 1 kB/s .. 1 PB/s
inline constexpr double kMinLatency = 1e-10, kMaxLatency = 100;     // s: 0.1 ns .. 100 s
inline constexpr uint64_t kMinNicSpeed = 1000000, kMaxNicSpeed = 10000000000000;  // 1M..10T b/s
inline constexpr int kMaxNuma = 4095;
inline constexpr int kMaxGidIndex = 65535;  // a port's GID table is far smaller
inline constexpr int kMaxPackages = 64;
inline constexpr int kMaxThreads = 1 << 20;

// Parses `text`; `origin` (a path, or "<string>") starts every error message.
Result<Topology> ParseTopology(std::string_view text, const std::string& origin);

// Reads and parses the file at `path` (at most kMaxFileBytes).
Result<Topology> LoadTopologyFile(const std::string& path);

// The canonical text of `t`. Numbers are written with the largest unit that keeps them exact, so
// the round trip is bit-exact.
std::string DumpTopology(const Topology& t);

}  // namespace braid::topo
