// braidrun --emulate GxM: an emulated cluster of G nodes (network namespaces made by the
// emucluster script next to braidrun) with M ranks each. The launcher creates the cluster before
// its first rank and removes it after its last, on every exit path (normal, a failed rank, a
// forwarded SIGINT/SIGTERM, an error in braidrun itself); a braidrun killed with SIGKILL leaves a
// cluster that the next `emucluster up` or `emucluster sweep` removes (its name holds our pid).
#pragma once

#include <string>
#include <vector>

namespace braidrun {

struct EmulationSpec {
  int nodes = 0;           // G; 0 = no emulation
  int ranks_per_node = 0;  // M
  std::string link;        // RATE[,DELAY[,LOSS]] for the emucluster script, "" = unshaped
  int nics = 1;            // K links a node (emucluster --nics): eth0..eth(K-1)
};

inline constexpr int kMaxEmulatedNics = 16;  // as tools/emucluster allows

// Parses "GxM" (e.g. "2x4"); false when malformed or out of range.
bool ParseEmulation(const std::string& text, EmulationSpec* spec);

class EmulatedCluster {
 public:
  // Creates the cluster (runs `emucluster up`), opens every node's namespace and registers an
  // atexit teardown. On failure prints why and exits.
  static void Start(const EmulationSpec& spec);
  static bool active();
  static const EmulationSpec& spec();
  // The node of `rank` and its namespace descriptor (to setns() into in the child).
  static int NodeOf(int rank);
  static int NamespaceFd(int node);
  // BRAID_HOSTID of a node ("<cluster>-node<i>").
  static std::string HostId(int node);
  // BRAID_SOCKET_IFNAME of `rank`: its node's eth0, or with K NICs eth(local rank mod K) (the
  // cost model's NIC of a rank), named exactly ("=eth1": "eth1" would also match eth10).
  static std::string Interface(int rank);
  // Runs `fn` with this thread in node 0's namespace (sockets made there stay there), then
  // returns to the original namespace.
  template <typename F>
  static auto InNodeZero(F fn) {
    Enter(0);
    auto r = fn();
    Leave();
    return r;
  }
  // Removes the cluster now (idempotent).
  static void Stop();

 private:
  static void Enter(int node);
  static void Leave();
};

}  // namespace braidrun
