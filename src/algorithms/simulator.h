// The simulator: predicts a schedule's time on a modelled network by executing every rank's
// schedule as an event simulation (DESIGN.md 2.1). The tuner's tests, tests/sim and
// braidGroupSimulateEnd use it.
//
// The model:
// - Lanes. Each (rank, channel) posts its steps one after another; the transfers of a step are
//   posted together and the step completes when all of them have. Local ops (copy, reduce) are
//   free.
// - Matching. Channel c from rank a to rank b is one FIFO stream, as in the engine: the k-th send
//   meets the k-th receive. A transfer is ready once both are posted (rendezvous, as the
//   verifier assumes).
// - Link classes. A transfer runs on the class LinkClassBetween(layout, src, dst) (cost_model.h:
//   intra-node or inter-node today; the topology issue's levels join as more classes). A
//   message of b bytes on class c costs model.of(c).alpha_s + b / model.of(c).beta_bytes_s.
// - Ports. Every rank has one send port and one receive port per link class. A ready transfer
//   holds its sender's send port and its receiver's receive port of its class for its whole
//   cost, starting once both are free; ready transfers take the ports first come, first served
//   (ties in the order they became ready).
// So transfers on different classes overlap (an intra-node ring and an inter-node ring run side
// by side, which is what HO-Ring needs), while one rank's transfers on one class serialise,
// whatever channel they are on: a rank's channels to peers of one class share one link (the shm
// copy path, the NIC), and the engine's channels add concurrency, not bandwidth. Serialising
// rather than sharing bandwidth gives the same finish time for the last of a set of transfers
// and keeps every message at alpha + b / beta, as the closed forms in cost_model.h assume.
//
// Cost: O(messages x log(transfers in flight)) time, memory for every rank's schedule plus the
// posts in flight; a 1024-rank ring all-reduce (2 million messages) takes well under a second.
#pragma once

#include "algorithms/algorithm.h"
#include "algorithms/tuner.h"
#include "core/base/status.h"

namespace braid {

// Predicted seconds for `algo` serving `args` on `model`, the classes of the links coming from
// args.layout (no layout: every link intra-node).
Result<double> SimulateSeconds(const Algorithm& algo, const CollArgs& args, const LinkModel& model);

}  // namespace braid
