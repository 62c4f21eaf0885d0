// Building blocks shared by the schedule builders: even partitioning of element ranges, channel
// and chunk sizing, and appending sliced transfers to a step.
//
// Matching rule the helpers rely on: a sender and its receiver cut a transfer of `len` elements
// into slices with the same function of (len, chunk), so the k-th send and the k-th receive of a
// stream always have equal counts, whatever offsets and buffers each side uses.
#pragma once

#include <cstdint>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

struct ElemRange {
  uint64_t off = 0;
  uint64_t len = 0;
};

// Part `i` of `total` elements cut into `parts` contiguous pieces whose sizes differ by at most
// one (the first `total % parts` pieces are the longer ones).
ElemRange EvenPart(uint64_t total, uint64_t parts, uint64_t i);

// (a mod n) for possibly negative a.
inline int Mod(int64_t a, int n) {
  return static_cast<int>(((a % n) + n) % n);
}

// Largest message in elements: chunk_bytes / type size, at least 1.
uint64_t ChunkElems(const CollArgs& args);

// Channels worth using: no more than args.nchannels, no more than `elems` (each channel gets at
// least one element of the range it splits), and one per chunk of `bytes` (a message smaller
// than a chunk is not worth spreading over several streams).
int ChannelsFor(const CollArgs& args, uint64_t elems, uint64_t bytes);

// Common argument checks for Algorithm::build: rank, nranks, root, channels, and supports().
Status CheckBuildArgs(const Algorithm& algo, const CollArgs& args, int rank);

// Number of slices a transfer of `len` elements is cut into (0 for len 0).
inline uint64_t SliceCount(uint64_t len, uint64_t chunk) {
  return (len + chunk - 1) / chunk;
}

inline Slice MakeSlice(uint16_t buffer, uint64_t offset, uint64_t count) {
  return Slice{buffer, offset, count};
}

// Appends the sliced transfers of `len` elements. Nothing is appended for len 0 (zero-count
// messages still cost a header).
void AppendSends(Step& step, int peer, uint16_t buf, uint64_t off, uint64_t len, uint64_t chunk);
void AppendRecvs(Step& step, int peer, uint16_t buf, uint64_t off, uint64_t len, uint64_t chunk);
// dst = reduce(src, incoming), slice by slice.
void AppendRecvReduces(Step& step, int peer, uint16_t src_buf, uint64_t src_off, uint16_t dst_buf,
                       uint64_t dst_off, uint64_t len, uint64_t chunk);
// One local copy (no slicing: copies do not travel).
void AppendCopy(Step& step, uint16_t src_buf, uint64_t src_off, uint16_t dst_buf, uint64_t dst_off,
                uint64_t len);

// Appends `step` to `channel` unless it has no ops (an empty step is a no-op for every consumer).
void AddStep(Channel& channel, Step&& step);

// A schedule that copies `count` elements of kSendBuf to kRecvBuf (N = 1, out of place), or an
// empty one when in place or count is 0.
RankSchedule LocalCopySchedule(uint64_t count, bool in_place);

}  // namespace braid
