#include "common/traffic.h"

namespace braid_perf {

bool NodeTraffic::Init(braidComm_t comm) {
  comm_ = comm;
  int rank = 0, nranks = 0;
  if (braidCommUserRank(comm, &rank) != braidSuccess ||
      braidCommCount(comm, &nranks) != braidSuccess)
    return false;
  braidComm_t node = nullptr;
  if (braidCommSplitLevel(comm, braidLevelNode, &node) != braidSuccess) return false;
  // The node view numbers its ranks anew; gathering the members' ranks on `comm` maps them back.
  int local_size = 0;
  bool ok = braidCommCount(node, &local_size) == braidSuccess;
  std::vector<int32_t> members(ok ? local_size : 0);
  const int32_t mine = rank;
  ok = ok && braidAllGather(&mine, members.data(), 1, braidInt32, node) == braidSuccess;
  if (braidCommDestroy(node) != braidSuccess) ok = false;
  if (!ok) return false;
  same_node_.assign(nranks, 0);
  for (int32_t r : members)
    if (r >= 0 && r < nranks) same_node_[r] = 1;
  return true;
}

bool NodeTraffic::Read(TrafficBytes* out) const {
  *out = {};
  for (size_t peer = 0; peer < same_node_.size(); ++peer) {
    // Counted where the bytes arrive: summed over ranks, what was received is what was sent,
    // and a rank's own operations are complete only once it received all of theirs. A rank's
    // sent bytes are not all counted when its call completes: a peer reads its board posts
    // (one-sided) when the peer gets there.
    uint64_t received = 0;
    if (braidCommPeerTraffic(comm_, static_cast<int>(peer), nullptr, &received, nullptr, 0) !=
        braidSuccess)
      return false;
    (same_node_[peer] ? out->intra_node : out->inter_node) += received;
  }
  return true;
}

}  // namespace braid_perf
