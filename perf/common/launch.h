// How a perf binary finds its peers and creates its communicators.
//
// - braidrun, torchrun, Slurm (and mpirun in a build without MPI): braidInitFromEnv() gives a
//   process-level communicator.
// - mpirun in a build with MPI (OMPI_COMM_WORLD_SIZE set, no BRAID_UNIQUE_ID): MPI_Init, world
//   rank 0 calls braidGetUniqueId, MPI_Bcast, braidCommInitRankConfig (what nccl-tests does).
// - no launcher at all: one process.
// The ranks the test runs on are `nthreads` per process (world = nprocs * nthreads). When that is
// more than one per process, or when options need a braidConfig_t (-A, -T), world rank 0 creates
// a fresh id, the process communicator (or MPI) broadcasts it, and every process initialises its
// ranks inside one braidGroupStart/End.
#pragma once

#include <string>
#include <vector>

#include "braid/braid.h"

namespace braid_perf {

struct Launch {
  int nprocs = 1;
  int proc_rank = 0;
  int nthreads = 1;
  std::string launcher;             // "braidrun/env", "mpi", "single process"
  std::vector<braidComm_t> comms;   // one per thread; world rank = proc_rank * nthreads + t
  braidComm_t proc_comm = nullptr;  // the env communicator when it is not comms[0]
  bool mpi = false;
};

// Returns false after printing why (to stderr) when the communicators cannot be created.
// `config` is used for the test communicators; `need_config` says whether it differs from the
// defaults (then the env communicator cannot serve as a test communicator).
bool CreateCommunicators(int* argc, char*** argv, int nthreads, const braidConfig_t& config,
                         bool need_config, const char* binary, Launch* out);

// Destroys the communicators and finalises MPI.
void DestroyCommunicators(Launch* launch);

// Ends the whole job after a fatal error on one rank (MPI_Abort under MPI, else exit) so peers
// do not wait for it until their timeouts.
[[noreturn]] void AbortJob(const Launch& launch, int status);

}  // namespace braid_perf
