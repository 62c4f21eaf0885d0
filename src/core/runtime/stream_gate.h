// Order of operations on shared streams: many operations are in flight on one communicator, and
// their messages share the transports' streams without tags.
//
// A stream is one direction of one lane to one peer: (peer, lane, send|recv). When an operation
// becomes active it claims, on every stream its schedules use, as many transfers as it will make
// there; claims queue up per stream in activation order. An operation may move bytes on a stream
// only while it heads that stream's queue, and leaves the queue when its last transfer there is
// done (or when it ends early). Every rank activates operations in the order they were issued,
// and collectives are issued in the same order on every rank, so the k-th message a peer sends
// on a stream is the one this rank's k-th receive there expects: no tags, no buffering of early
// messages, memory bounded by the transports' own buffers. No deadlock: the oldest active
// operation heads the queue of every stream it uses, so it can always progress.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace braid {

class StreamGate {
 public:
  void reset(int nranks, int nlanes) {
    nlanes_ = nlanes;
    queues_.assign(static_cast<size_t>(nranks) * nlanes * 2, {});
  }

  uint32_t stream(int peer, int lane, bool recv) const {
    return (static_cast<uint32_t>(peer) * nlanes_ + lane) * 2 + (recv ? 1 : 0);
  }

  // `claims`: (stream, transfers) pairs of operation `op`, which must be newer than every
  // operation already holding claims.
  void claim(uint64_t op, const std::vector<std::pair<uint32_t, uint32_t>>& claims) {
    for (const auto& [s, n] : claims) queues_[s].push_back({op, n});
  }

  bool owns(uint64_t op, uint32_t s) const { return !queues_[s].empty() && queues_[s][0].op == op; }

  // One transfer of `op` (the head of the stream's queue) is complete.
  void release(uint64_t op, uint32_t s) {
    auto& q = queues_[s];
    if (q.empty() || q[0].op != op) return;
    if (--q[0].remaining == 0) q.erase(q.begin());
  }

  // `op` ended (done, failed or conflicted before moving data): drop whatever it still holds.
  void releaseAll(uint64_t op, const std::vector<std::pair<uint32_t, uint32_t>>& claims) {
    for (const auto& [s, n] : claims) {
      auto& q = queues_[s];
      for (size_t i = 0; i < q.size(); ++i)
        if (q[i].op == op) {
          q.erase(q.begin() + static_cast<ptrdiff_t>(i));
          break;
        }
    }
  }

 private:
  struct Claim {
    uint64_t op;
    uint32_t remaining;
  };
  int nlanes_ = 1;
  // Per stream, in activation order. Short (at most the in-flight window), so a vector.
  std::vector<std::vector<Claim>> queues_;
};

}  // namespace braid
