#include "core/base/config.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>

namespace braid {

const std::vector<ConfigVar>& ConfigTable() {
  static const std::vector<ConfigVar> table = {
      {"BRAID_TIMEOUT", nullptr, "seconds", "300",
       "an operation (or init) that makes no progress this long fails with a timeout"},
      {"BRAID_TRANSPORTS", nullptr, "string", "",
       "transports to use, e.g. 'tcp' or 'shm,tcp' (default: all, best per peer pair)"},
      {"BRAID_ALGO", "NCCL_ALGO", "string", "",
       "tuner override, e.g. 'allreduce:ring@0-64K,rd@64K-inf;allgather:ring'"},
      {"BRAID_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "string", "",
       "interface for sockets (tcp listens and connects from it): 'eth0', prefix 'eth', "
       "exclude '^docker', exact '=eth0'"},
      {"BRAID_DEBUG", "NCCL_DEBUG", "string", "", "log level: WARN, INFO or TRACE (default quiet)"},
      {"BRAID_DEBUG_FILE", "NCCL_DEBUG_FILE", "string", "",
       "log to this file instead of stderr; %r = rank, %p = pid"},
      {"BRAID_NCHANNELS", nullptr, "int", "2", "concurrent channels (streams per peer), 1..16"},
      {"BRAID_CHUNK_BYTES", nullptr, "bytes", "512K", "pipelining chunk size, 4K..64M"},
      {"BRAID_SHM_RING_BYTES", "NCCL_BUFFSIZE", "bytes", "1M",
       "largest shared-memory ring per peer, channel and direction, 64K..256M (an upper bound: "
       "with many local ranks rings shrink, docs/scale.md)"},
      {"BRAID_ONESHOT_BYTES", nullptr, "bytes", "256K",
       "small-message board on one host (docs/performance.md): its size per post; blocking calls "
       "whose per-rank payload fits (up to 16K-32K while every local rank has a core) run on it on "
       "the caller's thread; 0 turns it off, at most 4M"},
      {"BRAID_BOARD_TWO_SHOT", nullptr, "string", "auto",
       "all-reduce on the board: 'auto' two-shot from 3 ranks and 32K (each rank folds 1/N of "
       "the message from every post and posts that part, then copies the N parts out), else "
       "one-shot (every rank folds all of it); '1' two-shot beyond 4K, '0' one-shot always"},
      {"BRAID_SINGLE_COPY_BYTES", nullptr, "bytes", "0",
       "from this per-rank payload, blocking all-reduce, all-gather, reduce-scatter and "
       "broadcast on one host run on the board by reference: each rank reads its peers' buffers "
       "in place with one kernel copy (cross-memory attach, process_vm_readv) instead of through "
       "shared-memory copies; only where every rank may read every peer (probed at init). 0 "
       "(default): never (it measured no faster on the development host, docs/performance.md). "
       "Rank 0's setting wins"},
      {"BRAID_HOSTID", nullptr, "string", "",
       "node identity override (emulated clusters); default hostname+boot id+netns"},
      {"BRAID_TOPO_FILE", nullptr, "string", "",
       "topology file to use instead of discovery (docs/topology.md; NCCL_TOPO_FILE's XML is "
       "not read)"},
      {"BRAID_COMM_ID", "NCCL_COMM_ID", "string", "",
       "host:port where rank 0 serves the rendezvous for braidInitFromEnv"},
      {"BRAID_SECRET", nullptr, "string", "",
       "secret that authenticates braidInitFromEnv's rendezvous by address (BRAID_COMM_ID, "
       "torchrun's MASTER_ADDR), the same on every rank; braidrun exports a fresh one per job; "
       "without it anyone who reaches the port can join, and each process warns once"},
      {"BRAID_SPIN_US", nullptr, "int", "50",
       "microseconds to spin/yield before sleeping, 0..10000"},
      {"BRAID_INLINE", nullptr, "int", "1",
       "1: a blocking call (and braidWait) drives the progress loop on the caller's thread, "
       "taking it over from the progress thread while operations are in flight; 0: always on "
       "the progress thread"},
      {"BRAID_VERIFY_CALLS", nullptr, "int", "1",
       "1: before moving data, the ranks of a collective agree that all made the same call "
       "(log2(N) header-only rounds), so a mismatch fails on every rank and the communicator "
       "stays usable; 0: only receivers check the sender's header (a mismatch can then return "
       "success on ranks that receive nothing)"},
      {"BRAID_MAX_INFLIGHT", nullptr, "int", "16",
       "operations a communicator runs at once, 1..1024 (more wait in its queue); 1 runs them "
       "one after another"},
      {"BRAID_DETERMINISTIC", nullptr, "int", "0",
       "1: every reduction folds the ranks' contributions in rank order ('ordered' algorithm), so "
       "its bits depend only on the inputs and the rank count, not on algorithm, transport or "
       "channels; costs (N-1) x the message per rank and N x count of scratch"},
      {"BRAID_DUMP_SIGNAL", nullptr, "string", "",
       "USR1, USR2 or QUIT: on that signal, write every communicator's state (operations in "
       "flight, their progress, the ranks they wait on) to the log; default: no handler"},
      {"BRAID_SPLIT_SHARE", "NCCL_COMM_SPLIT_SHARE_RESOURCES", "int", "1",
       "1: braidCommSplit makes views that run on the parent's connections (no rendezvous, no "
       "new socket, segment or thread; the parent and its views must then be called in the same "
       "order on every rank, and a failure of one stops all); 0: each split is a new, "
       "independent communicator. braidConfig_t.splitShare overrides it per split"},
      {"BRAID_LAZY_CONNECT", "NCCL_RUNTIME_CONNECT", "int", "1",
       "1: a TCP connection between two ranks is made when an operation first needs it, so a "
       "rank holds connections only to the peers its schedules talk to (a ring: 2 of N - 1); "
       "0: every pair connects at init. shm maps every peer at init either way. Rank 0's "
       "setting wins"},
      {"BRAID_DEVICE_IPC", nullptr, "int", "1",
       "1: a stream-ordered all-reduce, all-gather, reduce-scatter, broadcast or reduce on "
       "device buffers of a communicator whose ranks share one node runs on the device, each "
       "rank reading and writing its peers' buffers through CUDA IPC mappings made per call and "
       "cached (docs/gpu.md), when every rank could map its peers' device memory at init; 0: "
       "such calls stage through pinned host memory. 0 on any rank turns it off on every rank"},
      {"BRAID_LINK_CALIBRATION", nullptr, "int", "1",
       "1: at init, a few ping-pongs between one pair of ranks per link class (intra-node, "
       "inter-node) measure the latency and bandwidth the tuner's cost model uses (a few ms); 0: "
       "the constant defaults (intra 2 us 8 GB/s, inter 25 us 1.2 GB/s). Rank 0's setting wins"},
      {"BRAID_STAGING_CHUNK_BYTES", nullptr, "bytes", "4M",
       "the piece size of a staged stream-ordered all-reduce, reduce or broadcast on device "
       "buffers (docs/gpu.md): a larger call runs as pieces of this size, each copied in, "
       "reduced and copied out on its own, so the copies of one piece overlap the collective of "
       "the next; 0: whole calls (one copy in, the collective, one copy out); else at least "
       "64K. The NCCL shim cuts such calls on every path (host buffers and groups too), so "
       "that every rank runs the same pieces. Rank 0's setting wins"},
      {"BRAID_STAGING_MAX_BYTES", nullptr, "bytes", "1G",
       "pinned host memory a communicator's stream-ordered calls in flight may hold for staging "
       "device buffers where device memory is not the host's (docs/gpu.md); a call that would "
       "pass it waits in ncclAllReduce & co. for the oldest call in flight to have its results "
       "copied back (as NCCL blocks when its queue is full; at most 1 s, then it allocates past "
       "the cap with a warning); one larger than the whole cap takes a buffer past it; 0: no "
       "cap"},
      {"BRAID_LINK_PROFILE", nullptr, "string", "",
       "file caching the measured link model: read at init instead of measuring when it exists "
       "and parses, else measured and written (by rank 0, atomically); delete it to measure "
       "again"},
  };
  return table;
}

int DumpSignalNumber(const std::string& name) {
  if (name == "USR1" || name == "SIGUSR1") return SIGUSR1;
  if (name == "USR2" || name == "SIGUSR2") return SIGUSR2;
  if (name == "QUIT" || name == "SIGQUIT") return SIGQUIT;
  return 0;
}

const char* ConfigEnv(const ConfigVar& var) {
  const char* v = std::getenv(var.name);
  if (v && *v) return v;
  if (var.alias) {
    v = std::getenv(var.alias);
    if (v && *v) return v;
  }
  return nullptr;
}

Result<uint64_t> ParseByteSize(const std::string& s) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return InvalidArgument("'" + s + "' is not a size");
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno == ERANGE) return InvalidArgument("'" + s + "' is too large");
  std::string suffix(end);
  uint64_t mult = 1;
  if (suffix == "")
    mult = 1;
  else if (suffix == "K" || suffix == "k")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g")
    mult = 1ull << 30;
  else
    return InvalidArgument("'" + s + "' has an unknown size suffix (use K, M or G)");
  if (v > UINT64_MAX / mult) return InvalidArgument("'" + s + "' is too large");
  return static_cast<uint64_t>(v * mult);
}

namespace {

const ConfigVar& Var(const char* name) {
  for (const auto& v : ConfigTable())
    if (std::string(v.name) == name) return v;
  static ConfigVar none{"", nullptr, "", "", ""};
  return none;
}

Status BadValue(const ConfigVar& var, const char* value, const std::string& why) {
  return InvalidArgument(std::string(var.name) + "='" + value + "': " + why);
}

Status ReadInt(const char* name, int64_t lo, int64_t hi, int64_t* out) {
  const ConfigVar& var = Var(name);
  const char* v = ConfigEnv(var);
  if (!v) return Status::Ok();
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0') return BadValue(var, v, "not an integer");
  if (x < lo || x > hi)
    return BadValue(var, v,
                    "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = x;
  return Status::Ok();
}

Status ReadBytes(const char* name, uint64_t lo, uint64_t hi, uint64_t* out) {
  const ConfigVar& var = Var(name);
  const char* v = ConfigEnv(var);
  if (!v) return Status::Ok();
  auto r = ParseByteSize(v);
  if (!r.ok()) return BadValue(var, v, r.status().message());
  if (*r < lo || *r > hi)
    return BadValue(var, v,
                    "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "] bytes");
  *out = *r;
  return Status::Ok();
}

void ReadString(const char* name, std::string* out) {
  const char* v = ConfigEnv(Var(name));
  if (v) *out = v;
}

}  // namespace

Result<Config> LoadConfigFromEnv() {
  Config c;
  int64_t timeout_s = c.timeout_ms / 1000;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_TIMEOUT", 1, 7 * 24 * 3600, &timeout_s));
  c.timeout_ms = timeout_s * 1000;
  ReadString("BRAID_TRANSPORTS", &c.transports);
  ReadString("BRAID_ALGO", &c.algo);
  // Came from NCCL_ALGO when BRAID_ALGO is unset or empty (ConfigEnv treats both alike).
  const char* braid_algo = std::getenv("BRAID_ALGO");
  c.algo_from_nccl = !c.algo.empty() && (!braid_algo || !*braid_algo);
  ReadString("BRAID_SOCKET_IFNAME", &c.socket_ifname);
  ReadString("BRAID_DEBUG", &c.debug);
  ReadString("BRAID_DEBUG_FILE", &c.debug_file);
  int64_t nch = c.nchannels;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_NCHANNELS", 1, 16, &nch));
  c.nchannels = static_cast<int>(nch);
  BRAID_RETURN_IF_ERROR(ReadBytes("BRAID_CHUNK_BYTES", 4 << 10, 64 << 20, &c.chunk_bytes));
  BRAID_RETURN_IF_ERROR(ReadBytes("BRAID_SHM_RING_BYTES", 64 << 10, 256 << 20, &c.shm_ring_bytes));
  BRAID_RETURN_IF_ERROR(ReadBytes("BRAID_ONESHOT_BYTES", 0, 4 << 20, &c.oneshot_bytes));
  std::string two_shot = "auto";
  ReadString("BRAID_BOARD_TWO_SHOT", &two_shot);
  if (two_shot == "auto")
    c.board_two_shot = -1;
  else if (two_shot == "0" || two_shot == "1")
    c.board_two_shot = two_shot == "1";
  else
    return BadValue(Var("BRAID_BOARD_TWO_SHOT"), two_shot.c_str(), "expected auto, 0 or 1");
  BRAID_RETURN_IF_ERROR(
      ReadBytes("BRAID_SINGLE_COPY_BYTES", 0, uint64_t{1} << 50, &c.single_copy_bytes));
  BRAID_RETURN_IF_ERROR(
      ReadBytes("BRAID_STAGING_MAX_BYTES", 0, uint64_t{1} << 50, &c.staging_max_bytes));
  BRAID_RETURN_IF_ERROR(
      ReadBytes("BRAID_STAGING_CHUNK_BYTES", 0, uint64_t{1} << 50, &c.staging_chunk_bytes));
  // Each piece is a collective with flags of its own: a tiny piece would make a large call
  // millions of them.
  if (c.staging_chunk_bytes > 0 && c.staging_chunk_bytes < kMinStagingChunkBytes)
    return BadValue(Var("BRAID_STAGING_CHUNK_BYTES"), std::getenv("BRAID_STAGING_CHUNK_BYTES"),
                    "expected 0 or at least 64K");
  ReadString("BRAID_HOSTID", &c.host_id);
  ReadString("BRAID_TOPO_FILE", &c.topo_file);
  ReadString("BRAID_COMM_ID", &c.comm_id);
  ReadString("BRAID_SECRET", &c.secret);
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_SPIN_US", 0, 10000, &c.spin_us));
  int64_t inline_blocking = 1;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_INLINE", 0, 1, &inline_blocking));
  c.inline_blocking = inline_blocking != 0;
  int64_t verify_calls = 1;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_VERIFY_CALLS", 0, 1, &verify_calls));
  c.verify_calls = verify_calls != 0;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_MAX_INFLIGHT", 1, 1024, &c.max_inflight));
  int64_t deterministic = 0;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_DETERMINISTIC", 0, 1, &deterministic));
  c.deterministic = deterministic != 0;
  ReadString("BRAID_DUMP_SIGNAL", &c.dump_signal);
  int64_t link_calibration = 1;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_LINK_CALIBRATION", 0, 1, &link_calibration));
  c.link_calibration = link_calibration != 0;
  ReadString("BRAID_LINK_PROFILE", &c.link_profile);
  int64_t split_share = 1;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_SPLIT_SHARE", 0, 1, &split_share));
  c.split_share = split_share != 0;
  int64_t device_ipc = 1;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_DEVICE_IPC", 0, 1, &device_ipc));
  c.device_ipc = device_ipc != 0;
  int64_t lazy_connect = 1;
  BRAID_RETURN_IF_ERROR(ReadInt("BRAID_LAZY_CONNECT", 0, 1, &lazy_connect));
  c.lazy_connect = lazy_connect != 0;
  if (!c.dump_signal.empty() && DumpSignalNumber(c.dump_signal) == 0)
    return InvalidArgument("BRAID_DUMP_SIGNAL='" + c.dump_signal +
                           "' is not a signal braid can use: USR1, USR2 or QUIT");
  return c;
}

}  // namespace braid
