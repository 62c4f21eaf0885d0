// The message interface (Endpoint::postSend / postRecv / test) carried over a byte stream.
//
// Transports whose endpoints are byte streams (shm rings, TCP sockets) implement messages with
// this adapter; RDMA transports implement them natively (a posted ibv_send_wr, a UCX tagged
// send) and never emulate a stream. Each message travels as a 16-byte frame header (magic,
// length), the payload, and zero padding to a multiple of 8 bytes (the shm ring's peek() relies
// on 8-byte alignment for speed, see ShmEndpoint). Messages match in FIFO order: the k-th send
// is received by the k-th receive posted on the peer's endpoint.
//
// Failures: a frame whose magic is wrong (garbage, or stream bytes where a message was due), a
// message larger than the receive posted for it, or a stream error fails every pending and every
// later message of the endpoint with the same status; the stream is out of step and cannot be
// trusted again. Messages that completed before the failure still report their completion.
// Bad arguments (an unknown id) are InvalidArgument and change nothing.
//
// Single-threaded: one thread posts and tests the messages of an endpoint, and does not use the
// endpoint as a byte stream while messages are pending.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>

#include "core/base/status.h"

namespace braid {

class Endpoint;

class StreamMessages {
 public:
  static constexpr uint32_t kFrameMagic = 0x534d5242;  // "BRMS"
  struct Frame {
    uint32_t magic = kFrameMagic;
    uint32_t reserved = 0;
    uint64_t bytes = 0;
  };
  static_assert(sizeof(Frame) == 16, "part of the protocol; a multiple of 8");

  explicit StreamMessages(Endpoint& stream) : stream_(stream) {}

  // `data` stays valid (and, for a receive, unread by the caller) until the message completes.
  Result<uint64_t> postSend(const std::byte* data, size_t len);
  Result<uint64_t> postRecv(std::byte* data, size_t capacity);
  // Moves whatever can move now; then the byte count of message `id` when it has completed
  // (reported once), nullopt while it is pending.
  Result<std::optional<size_t>> test(uint64_t id);
  // What pending messages wait for, for Endpoint::arm().
  void wants(bool* send, bool* recv) const {
    *send = !sends_.empty();
    *recv = !recvs_.empty();
  }

 private:
  struct Pending {
    uint64_t id;
    std::byte* data;
    size_t len;       // send: payload bytes; receive: capacity until the frame arrives
    size_t done = 0;  // bytes of frame + payload + padding moved so far
    Frame frame;      // send: what goes out; receive: what came in
  };
  // Progresses sends, then receives; stops at the first stream error (which it returns).
  Status progress();
  Status progressSend(Pending& s, bool* finished);
  Status progressRecv(Pending& r, bool* finished);
  // Makes `st` the sticky failure and forgets every pending message.
  Status fail(Status st);

  Endpoint& stream_;
  std::deque<Pending> sends_;
  std::deque<Pending> recvs_;
  std::unordered_map<uint64_t, size_t> completed_;  // id -> bytes, until reported by test()
  uint64_t next_id_ = 1;
  std::optional<Status> failed_;
};

}  // namespace braid
