// Sends and receives on the device (issue 39's intra-node GPU path for point-to-point calls):
// the receiver copies the sender's device buffer into its own with one kernel on its stream,
// instead of both staging every byte through pinned host memory. Pull: only the receiver maps
// (the sender's allocation, by CUDA IPC, cached per communicator on the receiver alone: no other
// rank needs to know), and only the receiver's stream carries device work.
//
// A job is the point-to-point calls a rank makes at once: one call outside a group, or a group's
// sends and receives on one communicator and one stream (they must run together, as NCCL fuses
// them). The ranks of a pair agree on a view of the communicator of its own
// (braidCommSplitRanks with every rank and a reserved tag), so that its handshakes can never be
// matched by a staged peer's data (a rank that staged against a rank on this path fails both, as
// "a message of another communicator", within milliseconds; never wrong data):
//   agree   in one braid group, each send tells its receiver where its buffer is (its allocation's
//           IPC handle and offset, count, type), or that its bytes follow: a send whose
//           allocation cannot be shared (managed or cuMem memory, a refused export) was copied on
//           its stream, before `ready`, into host-mapped memory, and goes over the view in a
//           second braid group into the receiver's host-mapped bounce; each receiver checks that
//           the counts and types match and maps the sender's allocation if it is new;
//   work    each receive's copy kernel (a pairwise PeerReduce whose pointers are bound late: the
//           mapped allocation, or the bounce);
//   finish  in one braid group, each receiver tells its sender that the copy ended (or why it
//           could not run); a sender's stream is released (`done`) only then, since its buffer is
//           read until that moment.
// Every receiver sends exactly one answer per receive, success or failure, and every sender waits
// for it, so the view's messages stay paired whatever happens. A failure on either side fails the
// call on both with its reason.
//
// Deciding alike: each rank decides alone, from what both sides know the same way (one node, the
// communicator's IPC probe at init) and its own buffers being device (or managed) memory, which is
// what makes a call stream-ordered at all (IsDeviceBuffer). Whether a send can be shared is the
// pair's business, settled in its record, so ranks whose allocations differ in kind still agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nccl/shim.h"

namespace braid::nccl {

struct P2pCall {
  bool send = false;
  void* buff = nullptr;  // the send buffer (read) or the receive buffer (written)
  size_t count = 0;
  ncclDataType_t type = ncclInt8;
  int peer = 0;
};

// Takes `calls` (this rank's sends and receives of one job, in issue order) on the device path
// when every buffer allows it: true with *result (submitted, or the error), false when they stage.
bool P2pOnDevice(ncclComm_t comm, cudaStream_t stream, const std::vector<P2pCall>& calls,
                 ncclResult_t* result);
// At destroy or abort, once the stream agent stopped: releases the communicator's handshake view
// and its receivers' mappings (kept open when `keep_mappings`: device work may still run).
void DropP2pDevice(ncclComm_t comm, bool keep_mappings);
// Jobs that took this path in this process (tests), and those of them with a send that went as
// bytes (kBytes in p2p_device.cc).
uint64_t P2pDeviceJobs();
uint64_t P2pBouncedJobs();
// The bytes of a send's handshake message (tests: a staged receive of that size must refuse it).
size_t P2pHandshakeBytesForTesting();

}  // namespace braid::nccl
