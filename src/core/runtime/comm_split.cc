// braidCommSplit: the ranks exchange (colour, key) with an all-gather over the parent
// communicator; each colour's first member starts a rendezvous and a second all-gather hands its
// unique id to the other members, which then join as an ordinary new communicator.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/net/bootstrap.h"

using namespace braid;

namespace {

Status AllGatherBytes(const CommRef& comm, const void* mine, void* all, size_t bytes) {
  OpDesc d;
  d.kind = CollKind::kAllGather;
  d.dtype = DataType::kUint8;
  d.sendbuf = mine;
  d.recvbuf = all;
  d.count = bytes;
  return RunInternal(comm, std::move(d));
}

}  // namespace

extern "C" braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm,
                                        const braidConfig_t* config) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(Status(ref.status()).prepend("braidCommSplit: "));
  braidComm* raw = ref->get();
  if (!newcomm) return Fail(raw, InvalidArgument("braidCommSplit: newcomm is NULL"));
  *newcomm = nullptr;
  if (color < 0 && color != BRAID_SPLIT_NOCOLOR)
    return Fail(raw, InvalidArgument("braidCommSplit: color " + std::to_string(color) +
                                     " is negative (use BRAID_SPLIT_NOCOLOR to opt out)"));
  const int n = raw->nranks(), me = raw->rank();
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * n);
  Status st = AllGatherBytes(*ref, mine, all.data(), sizeof(mine));
  if (!st.ok()) return Fail(raw, st.prepend("braidCommSplit: exchanging colours: "));

  std::vector<int> members;
  if (color != BRAID_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; ++r)
      if (all[2 * r] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  }
  braidUniqueId id_mine;
  std::memset(&id_mine, 0, sizeof(id_mine));
  const bool leader = !members.empty() && members[0] == me;
  Status leader_status;
  if (leader) {
    RendezvousOptions o;
    o.ifname = raw->config().socket_ifname;
    o.timeout_ms = raw->config().timeout_ms;
    auto id = StartRendezvous(o);
    // A failed leader still takes part in the exchange (with a zero id) so nobody hangs.
    if (id.ok())
      EncodeUniqueId(*id, &id_mine);
    else
      leader_status = id.status();
  }
  std::vector<braidUniqueId> ids(n);
  st = AllGatherBytes(*ref, &id_mine, ids.data(), sizeof(braidUniqueId));
  if (!st.ok()) return Fail(raw, st.prepend("braidCommSplit: exchanging ids: "));
  if (!leader_status.ok()) return Fail(raw, leader_status.prepend("braidCommSplit: "));
  if (members.empty()) return braidSuccess;  // BRAID_SPLIT_NOCOLOR

  const braidUniqueId& id = ids[members[0]];
  if (!DecodeUniqueId(id).ok())
    return Fail(raw, RemoteError("braidCommSplit: the leader of colour " + std::to_string(color) +
                                 " (rank " + std::to_string(members[0]) +
                                 ") could not start a rendezvous"));
  int new_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  return InitChildComm(*raw, newcomm, static_cast<int>(members.size()), id, new_rank, config);
}
