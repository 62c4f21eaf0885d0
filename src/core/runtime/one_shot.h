// The small-message path on one host (issue 11; docs/performance.md "Small messages").
//
// A blocking collective whose per-rank payload is small runs on the communicator's shared-memory
// board (transport/local_board.h) on the caller's thread, not as a schedule on the engine: each
// rank copies its contribution into its own side of the board and posts it; every rank then
// waits for every peer's post of the same call, compares the signatures (a call that differs
// between ranks fails on every rank with both calls named, and the communicator stays usable)
// and reads what it needs straight from the peers' memory. A group of such calls posts up to 16
// of them before it reads the first (RunOneShotCalls), so it waits for its peers about once.
// Reductions fold the contributions in rank order (x0 op x1 op ... op xN-1), so every rank gets the
// same bits, the same as BRAID_DETERMINISTIC's order. A large all-reduce from 3 ranks runs
// two-shot (BRAID_BOARD_TWO_SHOT): each rank folds its 1/N part from every post and posts that as
// the call's second post, then copies the N parts out (the same bits, about 2 x the message read
// per rank instead of N x); one larger than the board's buffers runs in rounds, a piece of the
// message per round, and so does an all-gather larger than the board (a piece of every block per
// round). From BRAID_SINGLE_COPY_BYTES (off by default) an all-reduce, all-gather,
// reduce-scatter or broadcast runs by reference: ranks post their buffers' addresses, read
// their peers' buffers in place with one kernel copy (transport/cross_memory.h), and post that
// they are done reading before they return. No message, no progress thread, no syscall while the
// peers keep up (by reference: one read per piece of a peer's buffer):
// waiting spins (pause, or sched_yield when the host has more ranks than cores) for
// BRAID_SPIN_US, then sleeps on the peer's post with a futex.
//
// It is not a schedule because it is not made of messages: steps are loads of peer memory,
// which the IR's send/recv steps do not describe; tests/multirank/one_shot_test.cc checks it bit
// for bit instead of the verifier.
#pragma once

#include <span>

#include "core/base/status.h"
#include "core/runtime/comm.h"
#include "core/runtime/operation.h"

namespace braid {

// Whether the blocking call `d` (outside a group) runs on `comm`'s board: the communicator has
// one, the collective is one it serves (all-reduce, reduce, broadcast, all-gather,
// reduce-scatter, all-to-all, barrier; not quantized), its payload fits the board
// (BRAID_ONESHOT_BYTES), it is a two-shot all-reduce or an all-gather (which run in rounds) or it
// runs by reference (braidComm::singleCopyBytes), and BRAID_ALGO, where a rule covers the call,
// names "oneshot" (without a rule: OneShotDefaultLimit, or any size in rounds while the host's
// ranks outnumber its cores).
bool OneShotTakes(const braidComm& comm, const OpDesc& d);

// The largest post of a `kind` call the board takes by default (no BRAID_ALGO rule):
// OneShotCoreBytes(kind) (or the board's capacity if smaller) while every rank of the host has a
// core, the capacity when ranks outnumber the host's CPUs (`host_cpus`: the union of the ranks'
// masks, alike on every rank).
uint64_t OneShotCoreBytes(CollKind kind);
uint64_t OneShotDefaultLimit(uint64_t capacity, int nranks, int host_cpus, CollKind kind);

// Runs `d` on the board, on this thread, and returns when this rank's part is done.
Status RunOneShot(braidComm& comm, const OpDesc& d);
// Runs the blocking calls `calls` (each taken by OneShotTakes) on the board in order, and sets
// results[i] to call i's result. Small ones are posted up to LocalBoard::kEntries ahead of the
// first one read, so a group of them costs about one wait for the peers, not one per call; ranks
// need not group them alike (a rank that does not group meets one that does).
void RunOneShotCalls(braidComm& comm, std::span<const OpDesc* const> calls, Status* results);

}  // namespace braid
