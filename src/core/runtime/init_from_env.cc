// braidInitFromEnv: rank, size and rendezvous from whichever launcher started the process
// (braidrun, Open MPI's mpirun, Slurm's srun, torchrun). See braid.h for the rules.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/net/bootstrap.h"
#include "core/net/socket.h"

using namespace braid;

namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

struct Launch {
  std::string launcher;
  int rank = -1, size = -1;
  bool all_local = false;  // every rank on this host (enables the file rendezvous)
  std::string job_key;     // unique per job, for the file rendezvous
  std::string comm_id;     // host:port rendezvous, if known
};

Result<int> EnvInt(const char* name) {
  const char* v = Env(name);
  if (!v) return InvalidUsage(std::string(name) + " is not set");
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end || x < 0 || x > (1 << 24))
    return InvalidArgument(std::string(name) + "='" + v + "' is not a valid rank or size");
  return static_cast<int>(x);
}

Result<Launch> DetectLaunch() {
  Launch l;
  auto read = [&](const char* rank, const char* size) -> Status {
    BRAID_ASSIGN_OR_RETURN(l.rank, EnvInt(rank));
    BRAID_ASSIGN_OR_RETURN(l.size, EnvInt(size));
    if (l.size < 1 || l.rank >= l.size)
      return InvalidArgument(std::string(rank) + "=" + std::to_string(l.rank) + " is not below " +
                             size + "=" + std::to_string(l.size));
    return Status::Ok();
  };
  if (Env("BRAID_RANK")) {
    l.launcher = "braidrun";
    BRAID_RETURN_IF_ERROR(read("BRAID_RANK", "BRAID_WORLD_SIZE"));
  } else if (Env("OMPI_COMM_WORLD_RANK")) {
    l.launcher = "mpirun";
    BRAID_RETURN_IF_ERROR(read("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
    const char* ls = Env("OMPI_COMM_WORLD_LOCAL_SIZE");
    l.all_local = ls && std::atoi(ls) == l.size;
    const char* ns = Env("PMIX_NAMESPACE");
    if (!ns) ns = Env("OMPI_MCA_ess_base_jobid");
    if (ns) l.job_key = std::string("ompi-") + ns;
  } else if (Env("SLURM_PROCID")) {
    l.launcher = "srun";
    BRAID_RETURN_IF_ERROR(read("SLURM_PROCID", "SLURM_NTASKS"));
    const char* nodes = Env("SLURM_NNODES");
    l.all_local = nodes && std::atoi(nodes) == 1;
    const char* job = Env("SLURM_JOB_ID");
    const char* step = Env("SLURM_STEP_ID");
    if (job) l.job_key = std::string("slurm-") + job + "." + (step ? step : "0");
  } else if (Env("RANK") && Env("WORLD_SIZE")) {
    l.launcher = "torchrun";
    BRAID_RETURN_IF_ERROR(read("RANK", "WORLD_SIZE"));
    if (Env("MASTER_ADDR") && Env("MASTER_PORT")) {
      int port = std::atoi(Env("MASTER_PORT"));
      // torchrun's own store owns MASTER_PORT; braid's rendezvous takes the next port.
      l.comm_id = std::string(Env("MASTER_ADDR")) + ":" + std::to_string(port + 1);
    }
  } else {
    return InvalidUsage(
        "braidInitFromEnv: no launcher environment found (BRAID_RANK, OMPI_COMM_WORLD_RANK, "
        "SLURM_PROCID or "
        "RANK/WORLD_SIZE): start the program with braidrun, mpirun, srun or torchrun");
  }
  return l;
}

Result<braidUniqueId> IdFromHex(const char* hex) {
  braidUniqueId id;
  if (std::strlen(hex) != 2 * sizeof(id.internal))
    return InvalidArgument("BRAID_UNIQUE_ID must be " + std::to_string(2 * sizeof(id.internal)) +
                           " hex digits");
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    unsigned v;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1)
      return InvalidArgument("BRAID_UNIQUE_ID is not hexadecimal");
    id.internal[i] = static_cast<char>(v);
  }
  return id;
}

// A rendezvous by address without BRAID_SECRET is authenticated with a key anyone can derive from
// the address: whoever reaches the port can join as a rank or break init. Said once per process,
// on stderr whatever the log level, because the fix is the user's to make.
void WarnUnprotectedRendezvous(const std::string& comm_id) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "braid: WARNING: the rendezvous at %s is not protected by a secret: anyone who can "
               "reach that port can join this job as a rank or break its init. Set BRAID_SECRET to "
               "the same random value on every rank (e.g. export BRAID_SECRET=$(openssl rand -hex "
               "32) before the launcher starts), or launch with braidrun, which sets one.\n",
               comm_id.c_str());
  std::fflush(stderr);
}

// Rank 0 publishes its id in a file only this user can read; the others wait for it.
Result<braidUniqueId> FileRendezvous(const Launch& l, int64_t timeout_ms, std::string* path_out) {
  std::string path = "/tmp/braid-" + l.job_key + ".id";
  for (auto& c : path)
    if (c != '/' && !isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
      c = '_';
  *path_out = path;
  braidUniqueId id;
  if (l.rank == 0) {
    if (braidGetUniqueId(&id) != braidSuccess) return SystemError(ThreadLastError());
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return SystemError(ErrnoMessage("braidInitFromEnv: creating " + tmp, errno));
    bool ok = write(fd, &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id));
    close(fd);
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
      unlink(tmp.c_str());
      return SystemError(ErrnoMessage("braidInitFromEnv: publishing " + path, errno));
    }
    return id;
  }
  Deadline deadline = Deadline::After(timeout_ms);
  while (!deadline.expired()) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t n = read(fd, &id, sizeof(id));
      close(fd);
      if (n == static_cast<ssize_t>(sizeof(id))) return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return TimeoutError("braidInitFromEnv: rank 0 did not publish " + path + " within " +
                      std::to_string(timeout_ms / 1000) + " s");
}

}  // namespace

extern "C" braidResult_t braidInitFromEnv(braidComm_t* comm) {
  if (!comm) return Fail(InvalidArgument("braidInitFromEnv: comm is NULL"));
  *comm = nullptr;
  auto cfg = LoadConfigFromEnv();
  if (!cfg.ok()) return Fail(cfg.status());
  auto launch = DetectLaunch();
  if (!launch.ok()) return Fail(launch.status());
  Launch& l = *launch;
  if (!cfg->comm_id.empty()) l.comm_id = cfg->comm_id;  // BRAID_COMM_ID overrides torchrun's

  if (const char* hex = Env("BRAID_UNIQUE_ID")) {
    auto id = IdFromHex(hex);
    if (!id.ok()) return Fail(id.status());
    return braidCommInitRank(comm, l.size, *id, l.rank);
  }

  if (!l.comm_id.empty()) {
    // A known rendezvous address: rank 0 serves it, everyone derives the same id.
    // BRAID_SECRET (braidrun exports a fresh one; with mpirun, srun or torchrun the user sets
    // it) authenticates every rank; the address-derived key only keeps out accidents.
    std::vector<uint8_t> secret;
    if (!cfg->secret.empty()) {
      secret.assign(cfg->secret.begin(), cfg->secret.end());
    } else {
      WarnUnprotectedRendezvous(l.comm_id);
      std::string weak = "braid-address-derived:" + l.comm_id;
      secret.assign(weak.begin(), weak.end());
    }
    auto addr = ParseHostPort(l.comm_id);
    if (!addr.ok()) return Fail(Status(addr.status()).prepend("braidInitFromEnv: BRAID_COMM_ID: "));
    UniqueIdData data;
    data.root = *addr;
    data.secret = DeriveSecret(secret);
    if (l.rank == 0) {
      RendezvousOptions o;
      o.ifname = cfg->socket_ifname;
      o.timeout_ms = cfg->timeout_ms;
      o.listen_address = l.comm_id;
      o.fixed_secret = secret;
      auto started = StartRendezvous(o);
      if (!started.ok())
        return Fail(Status(started.status())
                        .prepend("braidInitFromEnv: rendezvous at " + l.comm_id + ": "));
      data = *started;
    }
    braidUniqueId id;
    EncodeUniqueId(data, &id);
    return braidCommInitRank(comm, l.size, id, l.rank);
  }

  if (l.all_local && !l.job_key.empty()) {
    std::string path;
    auto id = FileRendezvous(l, cfg->timeout_ms, &path);
    if (!id.ok()) return Fail(id.status());
    braidResult_t rc = braidCommInitRank(comm, l.size, *id, l.rank);
    if (l.rank == 0) unlink(path.c_str());  // every rank has joined (or init failed): done with it
    return rc;
  }
  return Fail(InvalidUsage(
      "braidInitFromEnv: started by " + l.launcher +
      " across several hosts without a rendezvous address: set BRAID_COMM_ID=host:port "
      "(reachable from every rank) and BRAID_SECRET on all ranks"));
}
