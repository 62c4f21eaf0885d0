// Which calls run on the board (algorithms/board_schedules.h) rather than on the engine's
// streams: the runtime's rules, measured against the engine (docs/performance.md "Small
// messages"), on top of what the board can serve at all (PlanBoardCall).
//
// A call of a communicator whose ranks all share one host (shm to every peer: braidComm::board())
// runs on the board when it fits (the board's size, BRAID_ONESHOT_BYTES; or in rounds, a two-shot
// all-reduce or an all-gather) and either a BRAID_ALGO rule covering it names "oneshot", or no
// rule covers it and its post is within BoardDefaultLimit (any size in rounds while the host's
// ranks outnumber its cores). Blocking or not, grouped or not: every rank decides alike from the
// call and the communicator's agreed settings, so the form of a call is never a reason for ranks
// to run it differently.
#pragma once

#include <cstdint>

#include "algorithms/schedule.h"
#include "core/runtime/operation.h"

struct braidComm;

namespace braid {

// The board a communicator of one host has by default (BRAID_ONESHOT_BYTES, the shm transport's
// slots and entries), for estimates made without one (braidEstimateCollective).
CollArgs::Board DefaultBoardArgs();

// Fills args->board from `comm`'s board (capacity 0 when it has none).
void FillBoardArgs(const braidComm& comm, CollArgs* args);

// Whether call `d` (its request `args`, from CollArgsFor) runs on `comm`'s board.
bool BoardTakes(const braidComm& comm, const OpDesc& d, const CollArgs& args);

// The largest post of a `kind` call the board takes by default (no BRAID_ALGO rule):
// BoardCoreBytes(kind) (or the board's capacity if smaller) while every rank of the host has a
// core, the capacity when ranks outnumber the host's CPUs (`host_cpus`: the union of the ranks'
// masks, alike on every rank).
uint64_t BoardCoreBytes(CollKind kind);
uint64_t BoardDefaultLimit(uint64_t capacity, int nranks, int host_cpus, CollKind kind);

}  // namespace braid
