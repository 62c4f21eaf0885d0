// ncclConfig_t and NCCL_* environment variables, translated into braid's configuration.
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "nccl/shim.h"

namespace braid::nccl {

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// The value of NCCL_COMM_BLOCKING (NCCL's default for config.blocking), or UNDEF.
int EnvBlocking() {
  const char* v = std::getenv("NCCL_COMM_BLOCKING");
  if (!v || !*v) return NCCL_CONFIG_UNDEF_INT;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || (x != 0 && x != 1)) return NCCL_CONFIG_UNDEF_INT;
  return static_cast<int>(x);
}

ncclResult_t Invalid(const char* func, const char* field, int value) {
  return Fail(ncclInvalidArgument,
              std::string(func) + ": invalid config " + field + " value " + std::to_string(value));
}

bool UndefOrBool(int v) {
  return v == NCCL_CONFIG_UNDEF_INT || v == 0 || v == 1;
}

}  // namespace

ncclResult_t TranslateConfig(const ncclConfig_t* config, const char* func, braidConfig_t* out) {
  const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  ncclConfig_t c = defaults;
  if (config) {
    // Read only what the caller's struct has: an older header's struct is smaller, a newer
    // one larger; a size too small to hold the header fields cannot carry the magic.
    size_t size = 0;
    std::memcpy(&size, config, sizeof(size));
    if (size < offsetof(ncclConfig_t, blocking))
      return Fail(ncclInvalidArgument, std::string(func) + ": ncclConfig_t size " +
                                           std::to_string(size) +
                                           " is too small; initialise it with "
                                           "NCCL_CONFIG_INITIALIZER");
    std::memcpy(&c, config, size < sizeof(c) ? size : sizeof(c));
    if (c.magic != kConfigMagic)
      return Fail(ncclInvalidArgument,
                  std::string(func) +
                      ": ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER "
                      "(bad magic)");
    // Fields the caller's NCCL version did not have keep their defaults.
    if (c.version < NCCL_VERSION(2, 14, 0)) c.blocking = defaults.blocking;
    if (c.version < NCCL_VERSION(2, 17, 0)) {
      c.cgaClusterSize = defaults.cgaClusterSize;
      c.minCTAs = defaults.minCTAs;
      c.maxCTAs = defaults.maxCTAs;
      c.netName = defaults.netName;
    }
    if (c.version < NCCL_VERSION(2, 25, 0)) c.trafficClass = defaults.trafficClass;
    if (c.version < NCCL_VERSION(2, 27, 0)) {
      c.collnetEnable = defaults.collnetEnable;
      c.CTAPolicy = defaults.CTAPolicy;
      c.shrinkShare = defaults.shrinkShare;
      c.nvlsCTAs = defaults.nvlsCTAs;
    }
    if (c.version < NCCL_VERSION(2, 28, 0)) {
      c.nChannelsPerNetPeer = defaults.nChannelsPerNetPeer;
      c.nvlinkCentricSched = defaults.nvlinkCentricSched;
    }
  }

  // The values NCCL rejects are rejected too, so a program behaves the same on both libraries;
  // braid itself only uses `blocking`.
  const int undef = NCCL_CONFIG_UNDEF_INT;
  if (!UndefOrBool(c.blocking)) return Invalid(func, "blocking", c.blocking);
  if (c.cgaClusterSize != undef && c.cgaClusterSize < 0)
    return Invalid(func, "cgaClusterSize", c.cgaClusterSize);
  if (c.minCTAs != undef && c.minCTAs <= 0) return Invalid(func, "minCTAs", c.minCTAs);
  if (c.maxCTAs != undef && c.maxCTAs <= 0) return Invalid(func, "maxCTAs", c.maxCTAs);
  if (c.minCTAs != undef && c.maxCTAs != undef && c.minCTAs > c.maxCTAs)
    return Invalid(func, "minCTAs (greater than maxCTAs)", c.minCTAs);
  if (!UndefOrBool(c.splitShare)) return Invalid(func, "splitShare", c.splitShare);
  if (!UndefOrBool(c.collnetEnable)) return Invalid(func, "collnetEnable", c.collnetEnable);
  if (c.CTAPolicy != undef &&
      (c.CTAPolicy & ~(NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO)) != 0)
    return Invalid(func, "CTAPolicy", c.CTAPolicy);
  if (!UndefOrBool(c.shrinkShare)) return Invalid(func, "shrinkShare", c.shrinkShare);
  if (c.nvlsCTAs != undef && c.nvlsCTAs <= 0) return Invalid(func, "nvlsCTAs", c.nvlsCTAs);
  if (c.nChannelsPerNetPeer != undef && c.nChannelsPerNetPeer <= 0)
    return Invalid(func, "nChannelsPerNetPeer", c.nChannelsPerNetPeer);
  if (!UndefOrBool(c.nvlinkCentricSched))
    return Invalid(func, "nvlinkCentricSched", c.nvlinkCentricSched);

  int blocking = c.blocking;
  if (blocking == undef) blocking = EnvBlocking();
  if (blocking == undef) blocking = 1;

  braidConfig_t b = BRAID_CONFIG_INITIALIZER;
  b.blocking = blocking;
  // Undefined: braid's default (BRAID_SPLIT_SHARE, or NCCL_COMM_SPLIT_SHARE_RESOURCES).
  if (c.splitShare != undef) b.splitShare = c.splitShare;
  *out = b;
  return ncclSuccess;
}

namespace {

// NCCL_* names braid's configuration table (src/core/base/config.cc) does not alias itself. The
// BRAID_* name wins when both are set.
struct EnvAlias {
  const char* nccl;
  const char* braid;
};
constexpr EnvAlias kEnvAliases[] = {
    {"NCCL_TOPO_FILE", "BRAID_TOPO_FILE"},
    {"NCCL_IB_HCA", "BRAID_IB_HCA"},
    {"NCCL_DEBUG_SUBSYS", "BRAID_DEBUG_SUBSYS"},
};

bool IsSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// NCCL opens NSOCKS_PERTHREAD x SOCKET_NTHREADS sockets per peer to spread a connection over
// several streams; braid's equivalent is its channel count (1..16).
void MapSocketParallelism() {
  if (IsSet("BRAID_NCHANNELS")) return;
  const char* s = std::getenv("NCCL_NSOCKS_PERTHREAD");
  const char* t = std::getenv("NCCL_SOCKET_NTHREADS");
  if (!(s && *s) && !(t && *t)) return;
  long nsocks = (s && *s) ? std::strtol(s, nullptr, 10) : 1;
  long nthreads = (t && *t) ? std::strtol(t, nullptr, 10) : 1;
  if (nsocks < 1 || nthreads < 1) return;  // NCCL ignores such values too
  long channels = nsocks * nthreads;
  if (channels > 16) channels = 16;
  setenv("BRAID_NCHANNELS", std::to_string(channels).c_str(), 0);
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> SplitOn(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

// NCCL_ALGO in NCCL's grammar ("Ring", "Tree,Ring", "^NVLS,CollNetDirect",
// "allreduce:tree;allgather:^ring") as a BRAID_ALGO spec. braid's tuner reads bare names and
// "coll:names" itself, but fails on exclusions and on algorithms only NCCL has, which clusters
// commonly set (NCCL_ALGO=^NVLS): exclusions are dropped (braid never picks NCCL-only
// algorithms and has no exclusion) and so are NCCL-only names. Other names pass through, so a
// typo still fails the init with braid's list of algorithms.
std::string TranslateNcclAlgo(const std::string& value) {
  static const char* const kNcclOnly[] = {"nvls",          "nvlstree",     "collnet",
                                          "collnetdirect", "collnetchain", "pat"};
  std::string out;
  for (const std::string& raw_entry : SplitOn(value, ';')) {
    std::string entry = Trim(raw_entry), prefix;
    size_t colon = entry.find(':');
    if (colon != std::string::npos) {
      prefix = Lower(Trim(entry.substr(0, colon))) + ":";
      entry = Trim(entry.substr(colon + 1));
    }
    if (entry.empty() || entry[0] == '^') continue;
    std::string names;
    for (const std::string& raw_name : SplitOn(entry, ',')) {
      std::string name = Lower(Trim(raw_name));
      bool nccl_only = false;
      for (const char* n : kNcclOnly) nccl_only = nccl_only || name == n;
      if (name.empty() || nccl_only) continue;
      if (!names.empty()) names += ',';
      names += name;
    }
    if (names.empty()) continue;
    if (!out.empty()) out += ';';
    out += prefix;
    out += names;
  }
  return out;
}

}  // namespace

void ApplyNcclEnvironment() {
  // setenv is only safe while no other thread reads the environment; doing it once, at the
  // first communicator call, matches when NCCL itself reads these variables.
  static std::once_flag once;
  std::call_once(once, [] {
    for (const EnvAlias& a : kEnvAliases)
      if (!IsSet(a.braid) && IsSet(a.nccl)) setenv(a.braid, std::getenv(a.nccl), 0);
    MapSocketParallelism();
    if (!IsSet("BRAID_ALGO") && IsSet("NCCL_ALGO")) {
      // An empty translation must still hide NCCL_ALGO from braid's own alias: ";" is a spec
      // with no rules.
      std::string spec = TranslateNcclAlgo(std::getenv("NCCL_ALGO"));
      setenv("BRAID_ALGO", spec.empty() ? ";" : spec.c_str(), 0);
    }
    // NCCL_PROTO (LL, LL128, Simple) is accepted and ignored: braid has one protocol per
    // transport.
  });
}

}  // namespace braid::nccl
