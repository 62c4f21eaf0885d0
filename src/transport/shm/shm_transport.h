// The shared-memory transport (DESIGN.md 2.3): ranks on one host exchange bytes through SPSC
// rings in shared memory. Each rank creates one segment holding its inbound rings (one per local
// peer and channel, sized by shm_sizing.h), an unnamed file in /dev/shm that peers open through
// the creator's /proc/<pid>/fd entry (its locator, published in the blob) while they connect.
// Nothing ever has a name in /dev/shm, so no kill at any point leaves anything there (spec/
// reliability.md check 11). finishConnect() closes the descriptor behind the locator.
// ShmTransportFactory() (transport.h) is the entry point; this header exposes the blob format and
// a test hook.
#pragma once

#include <cstdint>
#include <string>

namespace braid::shm {

// What a rank tells the others about its shm side. Two ranks may use shm only when they share
// a node identity, the same /dev/shm (device), pid namespace (pids and pidfds mean the same) and
// user (segments are mode 0600), and both created a segment.
struct ShmBlob {
  bool valid = false;
  std::string segment;  // locator, /proc/<pid>/fd/<fd>; empty when this rank has no local peer
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

// Points of a rank's init at which a test may act (tests/fault/shm_leftovers_test.cc kills the
// rank there): its segment exists but nobody knows it; the blobs are exchanged and peers may be
// mapping it; every peer of this rank is mapped (finishConnect has not run); finishConnect ran.
enum class InitPoint { kSegmentCreated, kConnecting, kConnected, kFinished };
using InitHook = void (*)(InitPoint point, const std::string& comm_tag);
// Test hook, called in the rank's process at each point (nullptr removes it).
void SetInitHookForTesting(InitHook hook);

}  // namespace braid::shm
