// braidCommSplitLevel, braidCommSplitByFabric and braidCommSplitRanks: views of a communicator
// (braidComm::initView) whose members every rank can compute from what init exchanged (the
// layout, each rank's placement) or is given (a list of ranks), so making one needs no
// communication at all. The view's wire id comes from the parent's id and the group's identity,
// the same on every member whenever each makes it.
#include <string>
#include <unordered_set>
#include <vector>

#include "core/runtime/api_errors.h"
#include "core/runtime/comm_registry.h"
#include "core/runtime/placement.h"

using namespace braid;

namespace {

uint32_t GroupViewId(uint32_t parent, uint32_t kind, uint32_t which) {
  uint32_t h = 2166136261u;  // FNV-1a, as braidComm::nextSplitId
  for (uint32_t v : {parent, kind, which})
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 16777619u;
    }
  return h ? h : 1;
}

braidResult_t MakeView(const CommRef& parent, const char* func, std::vector<int> members,
                       uint32_t id, braidComm_t* newcomm) {
  int me = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == parent->rank()) me = static_cast<int>(i);
  if (me < 0)
    return Fail(parent.get(), InternalError(std::string(func) + ": this rank is not a member"));
  CommOptions opts;
  opts.config = parent->config();
  auto child = std::make_shared<braidComm>();
  Status st = child->initView(parent, members, me, id, opts);
  if (!st.ok()) return Fail(parent.get(), st.prepend(std::string(func) + ": "));
  child->setState(braidComm::State::kReady);
  *newcomm = RegisterComm(std::move(child));
  return braidSuccess;
}

}  // namespace

extern "C" braidResult_t braidCommSplitLevel(braidComm_t comm, braidLevel_t level,
                                             braidComm_t* newcomm) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(Status(ref.status()).prepend("braidCommSplitLevel: "));
  if (!newcomm) return Fail(ref->get(), InvalidArgument("braidCommSplitLevel: newcomm is NULL"));
  *newcomm = nullptr;
  const braidComm& c = **ref;
  const GroupLayout& l = c.layout();
  const int me = c.rank();
  std::vector<int> members;
  uint32_t which;
  switch (level) {
    case braidLevelNode:
      which = static_cast<uint32_t>(l.node_of[me]);
      for (int r = 0; r < c.nranks(); ++r)
        if (l.node_of[r] == l.node_of[me]) members.push_back(r);
      break;
    case braidLevelSameLocalRank:
      which = static_cast<uint32_t>(l.local_rank[me]);
      for (int r = 0; r < c.nranks(); ++r)
        if (l.local_rank[r] == l.local_rank[me]) members.push_back(r);
      break;
    case braidLevelDeviceGroup: {
      const auto& infos = c.rankInfos();
      const std::string& mine = infos[me].device_group;
      // The view id names the group by the node and the first member (every member computes
      // the same): device group names repeat across nodes.
      which = 0;
      for (int r = 0; r < c.nranks(); ++r)
        if (r == me ||
            (!mine.empty() && l.node_of[r] == l.node_of[me] && infos[r].device_group == mine)) {
          if (members.empty()) which = static_cast<uint32_t>(r);
          members.push_back(r);
        }
      break;
    }
    default:
      return Fail(ref->get(),
                  InvalidArgument("braidCommSplitLevel: level " + std::to_string(level) +
                                  " is not braidLevelNode (0), braidLevelSameLocalRank (1) or "
                                  "braidLevelDeviceGroup (2)"));
  }
  return MakeView(*ref, "braidCommSplitLevel", std::move(members),
                  GroupViewId(c.commId(), 0x1e7e1000u + static_cast<uint32_t>(level), which),
                  newcomm);
}

extern "C" braidResult_t braidCommSplitByFabric(braidComm_t comm, braidComm_t* newcomm,
                                                const char** fabric) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(Status(ref.status()).prepend("braidCommSplitByFabric: "));
  if (!newcomm) return Fail(ref->get(), InvalidArgument("braidCommSplitByFabric: newcomm is NULL"));
  *newcomm = nullptr;
  const braidComm& c = **ref;
  const auto& infos = c.rankInfos();
  // A rank whose placement is unknown talks Ethernet (TCP), like a node without an RDMA NIC.
  auto fabric_of = [&](int r) { return infos[r].fabric < 0 ? 3 : infos[r].fabric; };
  const int mine = fabric_of(c.rank());
  std::vector<int> members;
  for (int r = 0; r < c.nranks(); ++r)
    if (fabric_of(r) == mine) members.push_back(r);
  if (fabric) *fabric = FabricName(mine);
  return MakeView(*ref, "braidCommSplitByFabric", std::move(members),
                  GroupViewId(c.commId(), 0xfab41c00u, static_cast<uint32_t>(mine)), newcomm);
}

extern "C" braidResult_t braidCommSplitRanks(braidComm_t comm, const int* ranks, int nranks,
                                             uint32_t tag, braidComm_t* newcomm) {
  auto ref = UsableComm(comm);
  if (!ref.ok()) return Fail(Status(ref.status()).prepend("braidCommSplitRanks: "));
  if (!newcomm) return Fail(ref->get(), InvalidArgument("braidCommSplitRanks: newcomm is NULL"));
  *newcomm = nullptr;
  const braidComm& c = **ref;
  if (!ranks || nranks < 1)
    return Fail(ref->get(),
                InvalidArgument(
                    "braidCommSplitRanks: " +
                    std::string(ranks ? "nranks is " + std::to_string(nranks) : "ranks is NULL") +
                    "; a view needs at least one rank"));
  std::vector<int> members(ranks, ranks + nranks);
  std::unordered_set<int> seen;
  bool listed = false;
  // The id mixes every member in order (a view of ranks {0, 1} is not one of {1, 0}) and the tag.
  uint32_t which = 2166136261u;
  for (int i = 0; i < nranks; ++i) {
    const int r = members[i];
    if (r < 0 || r >= c.nranks())
      return Fail(ref->get(),
                  InvalidArgument("braidCommSplitRanks: ranks[" + std::to_string(i) +
                                  "] = " + std::to_string(r) + " is not a rank of " + c.where() +
                                  " (0 .. " + std::to_string(c.nranks() - 1) + ")"));
    if (!seen.insert(r).second)
      return Fail(ref->get(), InvalidArgument("braidCommSplitRanks: rank " + std::to_string(r) +
                                              " is listed twice"));
    listed = listed || r == c.rank();
    which = GroupViewId(which, static_cast<uint32_t>(r), 0);
  }
  if (!listed)
    return Fail(ref->get(), InvalidUsage("braidCommSplitRanks: " + c.where() +
                                         " is not in the list of " + std::to_string(nranks) +
                                         " ranks; only the listed ranks make the view"));
  which = GroupViewId(which, tag, static_cast<uint32_t>(nranks));
  return MakeView(*ref, "braidCommSplitRanks", std::move(members),
                  GroupViewId(c.commId(), 0x5e1ec700u, which), newcomm);
}
