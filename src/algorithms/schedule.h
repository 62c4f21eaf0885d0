// The schedule IR: what one rank does for one collective, as data.
//
// An algorithm is a pure function (CollArgs, rank) -> RankSchedule. The engine executes it over
// transports, the simulator predicts its time, the verifier proves it correct, all from the
// same data (DESIGN.md 2.1).
//
// Execution model (what the engine guarantees and what builders may rely on):
// - A rank's channels run concurrently; the steps of one channel run one after another.
// - All ops of a step are posted together and the step completes when all of them have; ops of
//   one step that use the same (peer, direction) are performed in the order listed.
// - Channel c of rank a and channel c of rank b are joined by one FIFO stream in each direction:
//   the k-th send from a to b on channel c is received by the k-th receive (kRecv or
//   kRecvReduce) of b from a on channel c, and both must have the same element count.
// - Slices are in elements of CollArgs::dtype. A channel index must be < CollArgs::nchannels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/datatype.h"

namespace braid {

enum class CollKind : uint8_t {
  kAllReduce = 0,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,  // a group of point-to-point operations (built by the engine, not by an algorithm)
  kBarrier,
};
inline constexpr int kNumCollKinds = 8;
const char* CollKindName(CollKind k);  // "allreduce", "reducescatter", ... (tuner grammar names)

// Buffers a schedule refers to. kSendBuf / kRecvBuf are the user's; kScratchBuf is engine-owned
// memory of RankSchedule::scratch_count elements. Slots >= kFirstUserBuf are extra user buffers
// (grouped point-to-point operations).
enum BufferSlot : uint16_t { kSendBuf = 0, kRecvBuf = 1, kScratchBuf = 2, kFirstUserBuf = 3 };

struct Slice {
  uint16_t buffer = kSendBuf;
  uint64_t offset = 0;  // elements
  uint64_t count = 0;   // elements
};

enum class StepOpKind : uint8_t {
  kSend,        // send `src` to `peer`
  kRecv,        // receive from `peer` into `dst`
  kRecvReduce,  // dst = reduce(src, incoming from `peer`); src and dst may be the same slice
  kCopy,        // dst = src (local; src and dst do not overlap unless identical)
  kReduce,      // dst = reduce(src, dst) (local)
};
const char* StepOpKindName(StepOpKind k);

struct StepOp {
  StepOpKind kind;
  int32_t peer = -1;  // kSend / kRecv / kRecvReduce
  Slice src;          // kSend, kRecvReduce (local operand), kCopy, kReduce
  Slice dst;          // kRecv, kRecvReduce, kCopy, kReduce
};

struct Step {
  std::vector<StepOp> ops;
};

struct Channel {
  std::vector<Step> steps;
};

struct RankSchedule {
  std::vector<Channel> channels;
  uint64_t scratch_count = 0;  // elements of scratch this rank needs
};

// How ranks sit on nodes, for hierarchical algorithms (unused by the flat ones).
struct GroupLayout {
  int nnodes = 1;
  std::vector<int> node_of;     // node index per rank
  std::vector<int> local_rank;  // index inside its node per rank
};

// What an algorithm is asked to build.
struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // Element count, by collective (as in the C API):
  //   allreduce, broadcast, reduce: the whole buffer; reducescatter: recvcount (per rank);
  //   allgather: sendcount (per rank); alltoall: per peer; barrier: 0.
  uint64_t count = 0;
  int root = 0;  // broadcast, reduce
  int nranks = 1;
  // In place per the C API's conventions (braid.h): the builder must then read and write only
  // through the aliases that exist (e.g. for all-gather, the rank's own block of kRecvBuf is
  // its input and kSendBuf must not be referenced).
  bool in_place = false;
  int nchannels = 1;                  // maximum channels the engine can run (streams per peer)
  uint64_t chunk_bytes = 512 * 1024;  // pipelining granularity
  const GroupLayout* layout = nullptr;
};

}  // namespace braid
