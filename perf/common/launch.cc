#include "common/launch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef BRAID_PERF_WITH_MPI
// The C API only: Open MPI's C++ bindings are deprecated and warn.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace braid_perf {

namespace {

bool EnvSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

bool Report(const char* binary, const char* what, braidResult_t r, braidComm_t comm) {
  std::fprintf(stderr, "%s: %s failed: %s: %s\n", binary, what, braidGetErrorString(r),
               braidGetLastError(comm));
  return false;
}

// Initialises this process's `nthreads` ranks of communicator `id` (inside a group when more
// than one, so one thread can initialise them all).
bool InitRanks(const braidUniqueId& id, Launch* l, const braidConfig_t& config,
               const char* binary) {
  const int world = l->nprocs * l->nthreads;
  l->comms.assign(l->nthreads, nullptr);
  braidResult_t r = braidSuccess;
  if (l->nthreads > 1) {
    r = braidGroupStart();
    if (r != braidSuccess) return Report(binary, "braidGroupStart", r, nullptr);
  }
  for (int t = 0; t < l->nthreads && r == braidSuccess; ++t)
    r = braidCommInitRankConfig(&l->comms[t], world, id, l->proc_rank * l->nthreads + t, &config);
  if (l->nthreads > 1) {
    braidResult_t e = braidGroupEnd();
    if (r == braidSuccess) r = e;
  }
  if (r != braidSuccess) return Report(binary, "braidCommInitRankConfig", r, nullptr);
  return true;
}

}  // namespace

bool CreateCommunicators(int* argc, char*** argv, int nthreads, const braidConfig_t& config,
                         bool need_config, const char* binary, Launch* l) {
  l->nthreads = nthreads;
  braidUniqueId id;
  std::memset(&id, 0, sizeof id);

#ifdef BRAID_PERF_WITH_MPI
  // BRAID_UNIQUE_ID wins: braidrun inside an mpirun allocation still means braidrun.
  if (EnvSet("OMPI_COMM_WORLD_SIZE") && !EnvSet("BRAID_UNIQUE_ID")) {
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
      std::fprintf(stderr, "%s: MPI_Init failed\n", binary);
      return false;
    }
    l->mpi = true;
    l->launcher = "mpi";
    MPI_Comm_size(MPI_COMM_WORLD, &l->nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &l->proc_rank);
    int ok = 1;
    if (l->proc_rank == 0) {
      braidResult_t r = braidGetUniqueId(&id);
      if (r != braidSuccess) {
        Report(binary, "braidGetUniqueId", r, nullptr);
        ok = 0;
      }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) return false;
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    return InitRanks(id, l, config, binary);
  }
#else
  (void)argc;
  (void)argv;
#endif

  const bool launched = EnvSet("BRAID_WORLD_SIZE") || EnvSet("OMPI_COMM_WORLD_SIZE") ||
                        (EnvSet("SLURM_PROCID") && EnvSet("SLURM_NTASKS")) || EnvSet("WORLD_SIZE");
  if (!launched) {
    l->launcher = "single process";
    braidResult_t r = braidGetUniqueId(&id);
    if (r != braidSuccess) return Report(binary, "braidGetUniqueId", r, nullptr);
    return InitRanks(id, l, config, binary);
  }

  l->launcher = "env";
  braidComm_t env_comm = nullptr;
  braidResult_t r = braidInitFromEnv(&env_comm);
  if (r != braidSuccess) return Report(binary, "braidInitFromEnv", r, nullptr);
  braidCommCount(env_comm, &l->nprocs);
  braidCommUserRank(env_comm, &l->proc_rank);
  if (nthreads == 1 && !need_config) {
    l->comms = {env_comm};
    return true;
  }
  l->proc_comm = env_comm;
  if (l->proc_rank == 0) {
    r = braidGetUniqueId(&id);
    if (r != braidSuccess) Report(binary, "braidGetUniqueId", r, nullptr);
  }
  // A failed id on rank 0 must not leave the others waiting: broadcast a flag with the id.
  unsigned char msg[1 + sizeof id];
  msg[0] = r == braidSuccess ? 1 : 0;
  std::memcpy(msg + 1, &id, sizeof id);
  braidResult_t b = braidBroadcast(msg, msg, sizeof msg, braidUint8, 0, env_comm);
  if (b != braidSuccess) return Report(binary, "braidBroadcast of the unique id", b, env_comm);
  if (!msg[0]) return false;
  std::memcpy(&id, msg + 1, sizeof id);
  return InitRanks(id, l, config, binary);
}

void DestroyCommunicators(Launch* l) {
  for (braidComm_t c : l->comms)
    if (c) braidCommDestroy(c);
  l->comms.clear();
  if (l->proc_comm) braidCommDestroy(l->proc_comm);
  l->proc_comm = nullptr;
#ifdef BRAID_PERF_WITH_MPI
  if (l->mpi) MPI_Finalize();
#endif
}

void AbortJob(const Launch& l, int status) {
  std::fflush(stdout);
  std::fflush(stderr);
#ifdef BRAID_PERF_WITH_MPI
  if (l.mpi) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  // Aborting (not destroying) the communicators: peers see the failure at once.
  for (braidComm_t c : l.comms)
    if (c) braidCommAbort(c);
  std::_Exit(status);
}

}  // namespace braid_perf
