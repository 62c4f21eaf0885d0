// NCCL's device API (nccl_device.h: device communicators, teams, LSA/GIN barriers, LL
// all-to-all) is out of braid's scope. The host entry points exist so that programs linked
// against it load; the ones returning a status return ncclInvalidUsage with a message, and the
// team queries answer for braid's model: no rank shares load/store memory with another, so the
// LSA team is the rank alone and the rail team is the whole communicator.
#include <string>

#include "nccl/shim.h"

using namespace braid::nccl;

namespace {

// Layout of nccl_device/core.h's struct ncclTeam (returned by value).
struct Team {
  int nRanks, rank, stride;
};

ncclResult_t Unsupported(const char* func) {
  return Fail(ncclInvalidUsage, std::string(func) +
                                    ": the NCCL device API is not supported by braid; use the "
                                    "host collectives");
}

Team WorldTeam(ncclComm_t comm) {
  int rank = -1, nranks = -1;
  if (comm) CommShape(comm, &rank, &nranks);
  if (nranks < 0) return Team{0, 0, 1};
  return Team{nranks, rank, 1};
}

}  // namespace

NCCL_API_EXPORT ncclResult_t pncclDevCommCreate(ncclComm_t, const void*, void*) {
  return Unsupported("ncclDevCommCreate");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclDevCommCreate, (ncclComm_t, const void*, void*))

NCCL_API_EXPORT ncclResult_t pncclDevCommDestroy(ncclComm_t, const void*) {
  return Unsupported("ncclDevCommDestroy");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclDevCommDestroy, (ncclComm_t, const void*))

NCCL_API_EXPORT ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t, Team, int, void*, void*) {
  return Unsupported("ncclGinBarrierCreateRequirement");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGinBarrierCreateRequirement,
                (ncclComm_t, Team, int, void*, void*))

NCCL_API_EXPORT ncclResult_t pncclLsaBarrierCreateRequirement(Team, int, void*, void*) {
  return Unsupported("ncclLsaBarrierCreateRequirement");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclLsaBarrierCreateRequirement, (Team, int, void*, void*))

NCCL_API_EXPORT ncclResult_t pncclLLA2ACreateRequirement(int, int, void*, void*) {
  return Unsupported("ncclLLA2ACreateRequirement");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclLLA2ACreateRequirement, (int, int, void*, void*))

// No LL all-to-all buffers exist, so no slots fit.
NCCL_API_EXPORT int pncclLLA2ACalcSlots(int, int) {
  (void)Unsupported("ncclLLA2ACalcSlots");
  return 0;
}
NCCL_WEAK_ALIAS(int, ncclLLA2ACalcSlots, (int, int))

NCCL_API_EXPORT Team pncclTeamWorld(ncclComm_t comm) {
  return WorldTeam(comm);
}
NCCL_WEAK_ALIAS(Team, ncclTeamWorld, (ncclComm_t comm))

NCCL_API_EXPORT Team pncclTeamLsa(ncclComm_t) {
  return Team{1, 0, 1};
}
NCCL_WEAK_ALIAS(Team, ncclTeamLsa, (ncclComm_t))

NCCL_API_EXPORT Team pncclTeamRail(ncclComm_t comm) {
  return WorldTeam(comm);
}
NCCL_WEAK_ALIAS(Team, ncclTeamRail, (ncclComm_t comm))

// A team is an arithmetic progression of world ranks through the caller's own.
NCCL_API_EXPORT int pncclTeamRankToWorld(ncclComm_t comm, Team team, int rank) {
  return WorldTeam(comm).rank + (rank - team.rank) * team.stride;
}
NCCL_WEAK_ALIAS(int, ncclTeamRankToWorld, (ncclComm_t comm, Team team, int rank))

NCCL_API_EXPORT int pncclTeamRankToLsa(ncclComm_t, Team team, int rank) {
  return (rank - team.rank) * team.stride;  // the caller is rank 0 of its one-rank LSA team
}
NCCL_WEAK_ALIAS(int, ncclTeamRankToLsa, (ncclComm_t, Team team, int rank))
