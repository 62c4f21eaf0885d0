// Cross-memory attach: reading a peer process's memory with one kernel copy (process_vm_readv).
//
// The board (local_board.h) carries a call's data through shared memory: the owner copies it
// in, each reader copies (or folds) it out, two passes over memory per byte moved. For large
// calls a reader can instead copy straight out of the owner's own buffer, one pass, which is
// what Open MPI's single-copy shared-memory path does (algorithms/board_schedules.h "by
// reference"). The kernel allows it where the reader may ptrace the owner: same user, the owner
// dumpable, and no Yama or LSM rule against it; containers and hardened hosts often forbid it. So
// every rank probes every peer of its host at init (a word with a random value at an address the
// peer published) and the ranks use it only if every probe read the right value: a probe that
// is refused, or reads another process's memory (ranks in separate pid namespaces), turns it
// off for the communicator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

// This process's probe word: where it lives and the random value it holds (made on first use,
// never changes).
struct CrossMemoryProbe {
  uint64_t address = 0;
  uint64_t value = 0;
};
CrossMemoryProbe LocalCrossMemoryProbe();

// Whether this process can read process `pid`'s memory: it reads `probe.address` there and
// compares the value. False on any error (no permission, no such process, a different value).
bool CanReadPeerMemory(int pid, const CrossMemoryProbe& probe);

// Copies `len` bytes at `remote` in process `pid` to `dst` (in pieces, whole). Returns 0, or the
// errno of the read that failed: ESRCH when the process is gone, EFAULT when either range is not
// mapped, EPERM when the kernel refuses, EIO for a read that stopped short without an errno.
int ReadPeerMemory(int pid, uint64_t remote, void* dst, size_t len);

}  // namespace braid
