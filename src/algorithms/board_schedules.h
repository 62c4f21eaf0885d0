// The board's schedules: the small-message path on one host, as one-sided schedules (IR v3).
//
// On a communicator whose ranks all share one host, every rank has a side of a shared-memory
// board (transport/board_windows.h): posts numbered 1, 2, 3 ... alike on every rank, each with a
// flag word and the call's signature in one cache line and a payload in a window (the entry
// itself, a small slot, or one of two large buffers). A call takes the next posts (its epoch is
// the first); its schedule says what goes into which window, which counters it signals and
// which of its peers' counters it waits for, and what it reads from their windows. These are the
// forms (PlanBoardCall picks one per call, alike on every rank):
//   one-shot   every rank posts its contribution, waits for every peer's post, and reads what
//              it needs from their windows: a reduction folds all N posts in rank order (so
//              every rank gets the same bits, those of BRAID_DETERMINISTIC's order);
//   two-shot   an all-reduce on a large buffer from 3 ranks (BRAID_BOARD_TWO_SHOT): each rank
//              folds its 1/N part of every post and posts it, then copies the N parts out (about
//              2x the message read per rank instead of N x); larger than a buffer, in rounds of
//              a piece of the message each;
//   rounds     an all-gather larger than a buffer: a piece of every rank's block per round, the
//              next round posted before the last one is read;
//   by reference  from BRAID_SINGLE_COPY_BYTES: ranks expose their user buffers and read their
//              peers' in place (cross-memory copies), then post that they are done reading.
// And the agreement of a call that runs on the engine's streams instead (BoardAgreement): one
// post without payload, so that every call of the communicator, whatever runs it, takes posts
// in one numbering and is compared with every peer's before it moves a byte.
//
// Every form begins, before it writes a window, by waiting until every peer has consumed the
// post that memory last held (the reuse rule, WindowDepth) and ends by signalling that it has
// consumed every post of the call. The verifier proves all of it
// (tests/unit/board_schedules_test.cc).
#pragma once

#include <cstdint>
#include <optional>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"

namespace braid {

enum class BoardForm : uint8_t { kOneShot, kTwoShot, kGatherInRounds, kByReference };
const char* BoardFormName(BoardForm f);

struct BoardPlan {
  BoardForm form = BoardForm::kOneShot;
  WindowPlace place = WindowPlace::kEntry;  // where its data posts live
  uint32_t rounds = 1;                      // two-shot and all-gather in rounds
  uint32_t posts = 1;                       // posts the call takes
};

// Bytes of the largest post any rank makes for `a` (a broadcast's root posts its block, the
// others nothing, so every rank places the call by this, not by its own post).
uint64_t BoardLargestPost(const CollArgs& a);
// Bytes of the collective's message that two-shot and all-gather rounds cut into pieces.
uint64_t BoardMessageBytes(const CollArgs& a);
// Rounds of a message of `bytes` over buffers of `capacity` bytes.
uint32_t BoardRounds(uint64_t bytes, uint64_t capacity);

// How the board runs `a`, or nullopt when it cannot (no board, one rank, a kind or codec it does
// not serve, a payload that fits no form). Depends on `a` alone, so every rank plans alike.
std::optional<BoardPlan> PlanBoardCall(const CollArgs& a);

// "oneshot": the board's forms (whichever PlanBoardCall picks). Selection by the runtime's
// rules (core/runtime/board_selection.h) or BRAID_ALGO, never ranked by the tuner on its own.
const Algorithm& BoardAlgorithm();
// The agreement-only schedule a call on the engine takes on a communicator with a board: one
// post (this rank's signature, no payload), every peer's post awaited and compared. `nranks`
// ranks; the rank's schedule, lowered (buffer table, posts).
RankSchedule BoardAgreementSchedule(int nranks, int rank);

}  // namespace braid
