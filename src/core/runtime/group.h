// Groups (braidGroupStart/End/SimulateEnd): per-thread recording of calls, then their fused
// launch, or their estimate by the cost model without running them.
#pragma once

#include <memory>

#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/runtime/comm.h"
#include "core/runtime/operation.h"
#include "core/net/unique_id.h"

namespace braid {

bool InGroup();
// Records a collective for launch at braidGroupEnd.
void GroupAddCollective(const CommRef& comm, std::shared_ptr<Operation> op, bool blocking);
// Records a blocking collective (no request): its Operation is made only if the group runs on
// the engine (a group of small calls on the board needs none).
void GroupAddBlockingCollective(CommRef comm, OpDesc desc);
// Records a point-to-point call; `request` (may be null) receives the fused operation later.
void GroupAddP2P(const CommRef& comm, const P2PCall& call, braidRequest* request);
// Records a communicator init to run (concurrently with the group's other inits) at GroupEnd.
void GroupAddInit(const CommRef& comm, const UniqueIdData& id, int rank, int nranks,
                  const CommOptions& opts);

}  // namespace braid
