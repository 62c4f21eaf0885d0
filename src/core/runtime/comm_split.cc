// braidCommSplit: the ranks exchange (colour, key, whether they share) with an all-gather over
// the parent communicator. Shared (the default, BRAID_SPLIT_SHARE / braidConfig_t.splitShare):
// each rank makes a view of the parent (braidComm::initView) on the spot: no rendezvous, socket,
// segment or thread. Independent: each colour's first member starts a rendezvous and a second
// all-gather hands its unique id to the other members, which then join as an ordinary new
// communicator.
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
  // The child's options: the caller's, or the parent's (timeout, transports, algorithms).
  CommOptions opts;
  if (config) {
    auto o = MakeCommOptions(config);
    if (!o.ok()) return Fail(raw, Status(o.status()).prepend("braidCommSplit: "));
    opts = std::move(*o);
  } else {
    opts.config = raw->config();
  }
  // Every rank takes part in the exchange, also one with a bad argument, so that nobody hangs.
  int32_t mine[3] = {color, key, opts.config.split_share ? 1 : 0};
  std::vector<int32_t> all(3 * n);
  Status st = AllGatherBytes(*ref, mine, all.data(), sizeof(mine));
  if (!st.ok()) return Fail(raw, st.prepend("braidCommSplit: exchanging colours: "));
  // Every rank numbers the split alike (the view's wire id), whichever path it takes.
  const uint32_t view_id = raw->nextSplitId(color);

  std::vector<int> members;
  bool share = true;  // views only when every rank asks for them: all ranks take the same path
  for (int r = 0; r < n; ++r) share = share && all[3 * r + 2] == 1;
  if (color != BRAID_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; ++r)
      if (all[3 * r] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[3 * a + 1] < all[3 * b + 1]; });
  }
  if (share) {
    if (members.empty()) return braidSuccess;  // BRAID_SPLIT_NOCOLOR
    const int new_rank =
        static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
    auto child = std::make_shared<braidComm>();
    st = child->initView(*ref, members, new_rank, view_id, opts);
    if (!st.ok()) return Fail(raw, st.prepend("braidCommSplit: "));
    child->setState(braidComm::State::kReady);
    *newcomm = RegisterComm(std::move(child));
    return braidSuccess;
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
