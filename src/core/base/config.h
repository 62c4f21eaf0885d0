// Configuration: one table of BRAID_* variables (name, type, default, doc), parsed and validated
// in one place (DESIGN.md 4). NCCL_* names users already know are accepted as aliases; the
// BRAID_* name wins when both are set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace braid {

// The smallest piece BRAID_STAGING_CHUNK_BYTES accepts (other than 0).
inline constexpr uint64_t kMinStagingChunkBytes = 64 << 10;

struct Config {
  int64_t timeout_ms = 300000;             // BRAID_TIMEOUT (seconds in the environment)
  std::string transports;                  // BRAID_TRANSPORTS
  std::string algo;                        // BRAID_ALGO / NCCL_ALGO
  bool algo_from_nccl = false;             // `algo` came from NCCL_ALGO (NCCL's own grammar)
  std::string socket_ifname;               // BRAID_SOCKET_IFNAME / NCCL_SOCKET_IFNAME
  std::string debug;                       // BRAID_DEBUG / NCCL_DEBUG
  std::string debug_file;                  // BRAID_DEBUG_FILE / NCCL_DEBUG_FILE
  int nchannels = 2;                       // BRAID_NCHANNELS
  uint64_t chunk_bytes = 512 * 1024;       // BRAID_CHUNK_BYTES
  uint64_t shm_ring_bytes = 1 << 20;       // BRAID_SHM_RING_BYTES / NCCL_BUFFSIZE (upper bound)
  uint64_t oneshot_bytes = 256 << 10;      // BRAID_ONESHOT_BYTES (0: no small-message board)
  int board_two_shot = -1;                 // BRAID_BOARD_TWO_SHOT: -1 auto, 0 never, 1 always
  uint64_t single_copy_bytes = 0;          // BRAID_SINGLE_COPY_BYTES (0: never)
  std::string host_id;                     // BRAID_HOSTID
  std::string topo_file;                   // BRAID_TOPO_FILE
  std::string comm_id;                     // BRAID_COMM_ID / NCCL_COMM_ID
  std::string secret;                      // BRAID_SECRET
  int64_t spin_us = 50;                    // BRAID_SPIN_US
  bool inline_blocking = true;             // BRAID_INLINE
  bool verify_calls = true;                // BRAID_VERIFY_CALLS
  int64_t max_inflight = 16;               // BRAID_MAX_INFLIGHT
  bool deterministic = false;              // BRAID_DETERMINISTIC
  std::string dump_signal;                 // BRAID_DUMP_SIGNAL
  bool link_calibration = true;            // BRAID_LINK_CALIBRATION
  std::string link_profile;                // BRAID_LINK_PROFILE
  bool split_share = true;                 // BRAID_SPLIT_SHARE
  uint64_t staging_max_bytes = 1 << 30;    // BRAID_STAGING_MAX_BYTES (0: no cap)
  uint64_t staging_chunk_bytes = 4 << 20;  // BRAID_STAGING_CHUNK_BYTES (0: whole calls)
  bool lazy_connect = true;                // BRAID_LAZY_CONNECT / NCCL_RUNTIME_CONNECT
  bool device_ipc = true;                  // BRAID_DEVICE_IPC
};

struct ConfigVar {
  const char* name;
  const char* alias;  // NCCL_* name or nullptr
  const char* type;   // "seconds", "int", "bytes", "string"
  const char* default_value;
  const char* doc;
};

// The table, in documentation order.
const std::vector<ConfigVar>& ConfigTable();

// Reads the environment. Bad values (not a number, out of range, bad size suffix) are an
// InvalidArgument naming the variable, its value and what is accepted.
Result<Config> LoadConfigFromEnv();

// The value a variable has in the environment now (BRAID_* first, then the alias), or nullptr.
const char* ConfigEnv(const ConfigVar& var);

// BRAID_DUMP_SIGNAL: SIGUSR1, SIGUSR2 or SIGQUIT for "USR1", "USR2", "QUIT" (with or without
// "SIG"); 0 for anything else.
int DumpSignalNumber(const std::string& name);

// Parses "64K", "1M", "2G", "123" (1024-based suffixes). InvalidArgument on anything else.
Result<uint64_t> ParseByteSize(const std::string& s);

}  // namespace braid
