// The shared-memory transport (DESIGN.md 2.3): ranks on one host exchange bytes through SPSC
// rings in POSIX shared memory. Each rank creates one segment holding its inbound rings (one per
// local peer and channel), publishes its name in the blob, maps every local peer's segment at
// connect, and unlinks its own name in finishConnect() so that nothing is left in /dev/shm after
// init, however a rank dies later. ShmTransportFactory() (transport.h) is the entry point; this
// header exposes the blob format for tests and tools.
#pragma once

#include <cstdint>
#include <string>

namespace braid::shm {

// What a rank tells the others about its shm side. Two ranks may use shm only when they share
// a node identity, the same /dev/shm (device), pid namespace (pids and pidfds mean the same) and
// user (segments are mode 0600), and both created a segment.
struct ShmBlob {
  bool valid = false;
  std::string segment;  // shm_open name; empty when this rank has no local peer
  uint64_t ring_bytes = 0;
  int pid = 0;
  std::string host_id;
  std::string doorbell;
  uint64_t shm_dev = 0;
  uint64_t pidns = 0;
  uint64_t uid = 0;
};

std::string EncodeBlob(const ShmBlob& blob);
// Never fails: a malformed blob decodes as !valid.
ShmBlob DecodeBlob(const std::string& text);

}  // namespace braid::shm
