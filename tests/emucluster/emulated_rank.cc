// One rank of the emulated-cluster tests (emulated_cluster_test.cc), started by
// `braidrun --emulate GxM`. Modes:
//   check  all-reduce and all-to-all, bit-exact against references computed here; then, from the
//          transports' counters (braidCommPeerTraffic), every peer on this rank's node
//          (BRAID_HOSTID) is served by shm, every other by tcp, every peer got bytes, and the
//          node's eth0 (this namespace's /proc/net/dev) sent at least this rank's TCP bytes, so
//          inter-node traffic really crossed the emulated links. Exit 0 when all hold.
//   pause  init, then wait for a signal (the Ctrl-C test).
//   nics K under `braidrun --emulate GxM --nics K`: the communicator counts K NICs per node
//          (braidCommLinkParams); then, on a view forcing `ring` and one forcing `rail_ring`,
//          all-reduce, all-gather and reduce-scatter bit-exact against references computed here;
//          the rank's own NIC (BRAID_SOCKET_IFNAME) sent at least the TCP bytes the rank sent in
//          each; and where the two differ: with rail_ring the ranks each channel leaves a node
//          from send half of a ring crossing's bytes each (on 2 ranks a node with 2 NICs: both
//          NICs carry a channel), with ring the ranks that enter a node (local rank 0, NIC 0)
//          send nothing across (the ring leaves every node through one NIC).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace {

int Fail(int rank, const char* what, int code) {
  std::fprintf(stderr, "[rank %d] %s\n", rank, what);
  return code;
}

// Bytes sent by interface `ifname` in this process's network namespace.
long long TxBytes(const std::string& ifname) {
  std::ifstream dev("/proc/net/dev");
  std::string line;
  while (std::getline(dev, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != ifname) continue;
    std::istringstream in(line.substr(colon + 1));
    long long v[9] = {};
    for (auto& x : v) in >> x;
    return v[8];  // receive: bytes packets errs drop fifo frame compressed multicast; then tx bytes
  }
  return -1;
}

// TCP bytes this rank has sent to ranks of other nodes (m ranks a node), all calls so far.
unsigned long long TcpSentAcross(braidComm_t comm, int rank, int n, int m) {
  unsigned long long total = 0;
  for (int q = 0; q < n; ++q) {
    if (q / m == rank / m) continue;
    uint64_t sent = 0;
    if (braidCommPeerTraffic(comm, q, &sent, nullptr, nullptr, 0) == braidSuccess) total += sent;
  }
  return total;
}

// The "nics K" mode (see the top of the file).
int CheckNics(braidComm_t comm, int rank, int n, int m, int nics) {
  braidLinkParams_t link{};
  if (braidCommLinkParams(comm, &link) != braidSuccess) return Fail(rank, "link params", 20);
  if (link.nicsPerNode != nics) {
    std::fprintf(stderr, "[rank %d] the communicator counts %d NICs per node, expected %d\n", rank,
                 link.nicsPerNode, nics);
    return 21;
  }
  const char* env = std::getenv("BRAID_SOCKET_IFNAME");
  std::string nic = env ? env : "";
  if (!nic.empty() && nic[0] == '=') nic.erase(0, 1);
  const int local = rank % m;
  if (nic != "eth" + std::to_string(local % nics))
    return Fail(rank, ("BRAID_SOCKET_IFNAME is '" + nic + "'").c_str(), 22);
  // Odd counts, above the chunk (512 KiB), so that the rings run two channels and pieces of
  // uneven size.
  const size_t ar_count = 1000003, per = 262147;
  std::vector<int32_t> ar_in(ar_count), ar_out(ar_count), ag_in(per), ag_out(per * n),
      rs_in(per * n), rs_out(per);
  for (size_t i = 0; i < ar_count; ++i) ar_in[i] = static_cast<int32_t>(rank * 7919 + i % 1009);
  for (size_t i = 0; i < per; ++i) ag_in[i] = (rank << 24) | static_cast<int32_t>(i);
  for (size_t i = 0; i < per * n; ++i) rs_in[i] = static_cast<int32_t>(rank * 31 + i % 4093);
  for (const char* algo : {"ring", "rail_ring"}) {
    const std::string rules =
        std::string("allreduce:") + algo + ";allgather:" + algo + ";reducescatter:" + algo;
    braidConfig_t cfg = BRAID_CONFIG_INITIALIZER;
    cfg.algorithms = rules.c_str();
    cfg.splitShare = 1;
    braidComm_t view = nullptr;
    if (braidCommSplit(comm, 0, rank, &view, &cfg) != braidSuccess)
      return Fail(rank, braidGetLastError(comm), 23);
    const long long tx0 = TxBytes(nic);
    const unsigned long long tcp0 = TcpSentAcross(comm, rank, n, m);
    if (braidAllReduce(ar_in.data(), ar_out.data(), ar_count, braidInt32, braidSum, view) !=
            braidSuccess ||
        braidAllGather(ag_in.data(), ag_out.data(), per, braidInt32, view) != braidSuccess ||
        braidReduceScatter(rs_in.data(), rs_out.data(), per, braidInt32, braidSum, view) !=
            braidSuccess)
      return Fail(rank, braidGetLastError(view), 24);
    for (size_t i = 0; i < ar_count; ++i) {
      const int64_t want = 7919LL * n * (n - 1) / 2 + static_cast<int64_t>(n) * (i % 1009);
      if (ar_out[i] != want)
        return Fail(rank, (std::string(algo) + ": all-reduce wrong").c_str(), 25);
    }
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < per; ++i)
        if (ag_out[p * per + i] != ((p << 24) | static_cast<int32_t>(i)))
          return Fail(rank, (std::string(algo) + ": all-gather wrong").c_str(), 26);
    for (size_t i = 0; i < per; ++i) {
      const size_t g = rank * per + i;
      const int64_t want = 31LL * n * (n - 1) / 2 + static_cast<int64_t>(n) * (g % 4093);
      if (rs_out[i] != want)
        return Fail(rank, (std::string(algo) + ": reduce-scatter wrong").c_str(), 27);
    }
    // Every rank of the node has sent before anyone reads its NIC's counter.
    if (braidBarrier(comm) != braidSuccess) return Fail(rank, braidGetLastError(comm), 28);
    const long long tx = TxBytes(nic) - tx0;
    const unsigned long long tcp = TcpSentAcross(comm, rank, n, m) - tcp0;
    // What one ring crossing carries over the three calls: all-reduce 2 (n-1) blocks of
    // count / n, all-gather and reduce-scatter (n-1) blocks of `per`, in 4-byte elements; the
    // node's crossings carry that much in all, over one NIC (ring) or spread over its NICs.
    const unsigned long long crossing = 4ULL * (n - 1) * (2 * (ar_count / n) + 2 * per);
    std::printf(
        "[rank %d] %s: %s sent %lld bytes, this rank %llu over tcp (a ring crossing: %llu)\n", rank,
        algo, nic.c_str(), tx, tcp, crossing);
    if (tx0 < 0 || tx < static_cast<long long>(tcp)) {
      std::fprintf(stderr,
                   "[rank %d] %s: %s sent %lld bytes, less than this rank's %llu TCP bytes\n", rank,
                   algo, nic.c_str(), tx, tcp);
      return 29;
    }
    const bool rail = std::string(algo) == "rail_ring";
    // With the default two channels the rail ring leaves a node from local ranks m - 1
    // (channel 0) and 0 (channel 1), NICs (m - 1) mod K and 0, each carrying half a crossing.
    const bool leaves = local == m - 1 || local == 0;
    if (rail && m > 1 && leaves && tcp < crossing / 4) {
      std::fprintf(stderr,
                   "[rank %d] rail_ring: this rank sent only %llu of a crossing's %llu bytes\n",
                   rank, tcp, crossing);
      return 30;
    }
    if (!rail && m > 1 && local == 0 && tcp > crossing / 16) {
      std::fprintf(stderr, "[rank %d] ring: local rank 0 sent %llu bytes across (expected ~0)\n",
                   rank, tcp);
      return 31;
    }
    if (braidCommDestroy(view) != braidSuccess) return Fail(rank, "view destroy", 32);
  }
  braidCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  const long long tx_before = TxBytes("eth0");
  braidComm_t comm;
  if (braidInitFromEnv(&comm) != braidSuccess) {
    std::fprintf(stderr, "init: %s\n", braidGetLastError(nullptr));
    return 2;
  }
  int rank = 0, n = 0;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  if (mode == "pause") {
    pause();
    return 0;
  }
  const int m = std::atoi(std::getenv("BRAID_LOCAL_SIZE") ? std::getenv("BRAID_LOCAL_SIZE") : "0");
  if (m < 1 || n % m != 0) return Fail(rank, "BRAID_LOCAL_SIZE missing or not a divisor", 3);
  if (mode == "nics") return CheckNics(comm, rank, n, m, argc > 2 ? std::atoi(argv[2]) : 0);

  // All-reduce of integers (exact in any order): element i of rank r is r * 1000 + i.
  const size_t count = 300000;  // above the express lane: several channels and chunks
  std::vector<int32_t> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(rank * 1000 + i % 977);
  if (braidAllReduce(in.data(), out.data(), count, braidInt32, braidSum, comm) != braidSuccess)
    return Fail(rank, braidGetLastError(comm), 4);
  for (size_t i = 0; i < count; ++i) {
    const int64_t want = 1000LL * n * (n - 1) / 2 + static_cast<int64_t>(n) * (i % 977);
    if (out[i] != want) return Fail(rank, "all-reduce: wrong element", 5);
  }
  // All-to-all: block q of rank r is (r, q, i).
  const size_t per = 4099;
  std::vector<int32_t> a_in(per * n), a_out(per * n);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < per; ++i) a_in[q * per + i] = (rank << 24) | (q << 16) | int32_t(i);
  if (braidAllToAll(a_in.data(), a_out.data(), per, braidInt32, comm) != braidSuccess)
    return Fail(rank, braidGetLastError(comm), 6);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < per; ++i)
      if (a_out[p * per + i] != ((p << 24) | (rank << 16) | int32_t(i)))
        return Fail(rank, "all-to-all: wrong element", 7);

  // Where the bytes went.
  unsigned long long tcp_sent = 0;
  for (int q = 0; q < n; ++q) {
    uint64_t sent = 0, received = 0;
    char transport[16];
    if (braidCommPeerTraffic(comm, q, &sent, &received, transport, sizeof transport) !=
        braidSuccess)
      return Fail(rank, braidGetLastError(comm), 8);
    const bool same_node = q / m == rank / m;
    const char* want = q == rank ? "self" : same_node ? "shm" : "tcp";
    if (std::strcmp(transport, want) != 0) {
      std::fprintf(stderr, "[rank %d] peer %d (%s node) is served by %s, expected %s\n", rank, q,
                   same_node ? "same" : "other", transport, want);
      return 9;
    }
    if (q != rank && (sent == 0 || received == 0)) {
      std::fprintf(stderr, "[rank %d] no traffic with peer %d (%llu sent, %llu received)\n", rank,
                   q, static_cast<unsigned long long>(sent),
                   static_cast<unsigned long long>(received));
      return 10;
    }
    if (!same_node) tcp_sent += sent;
  }
  // Every rank of the node must have sent before anyone reads the link's counter.
  if (braidBarrier(comm) != braidSuccess) return Fail(rank, braidGetLastError(comm), 11);
  const long long tx_after = TxBytes("eth0");
  if (n > m && (tx_before < 0 || tx_after - tx_before < static_cast<long long>(tcp_sent))) {
    std::fprintf(stderr, "[rank %d] eth0 sent %lld bytes, less than this rank's %llu TCP bytes\n",
                 rank, tx_after - tx_before, tcp_sent);
    return 12;
  }
  std::printf("[rank %d] ok: %llu bytes over tcp, eth0 sent %lld\n", rank, tcp_sent,
              tx_after - tx_before);
  braidCommDestroy(comm);
  return 0;
}
