// Fuzzes braid's configuration parsing: the BRAID_* table and its NCCL_* aliases as
// LoadConfigFromEnv reads them (src/core/base/config.cc), and the value grammars behind them:
// sizes (ParseByteSize), interface selection (BRAID_SOCKET_IFNAME / NCCL_SOCKET_IFNAME:
// InterfaceMatchesSpec, ChooseInterface), "host:port" (BRAID_COMM_ID / NCCL_COMM_ID:
// ParseHostPort) and transport lists (BRAID_TRANSPORTS: SelectTransports).
//
// Input: an environment, "NAME=value" lines. Every variable of the table (and its alias) named in
// the input is set for the run, every other one is unset. Each value of a known variable also
// goes through its own value parser directly; the first few lines that name no known variable
// go through all of them.
// Invariants: a config that loads has every field within its documented range and the string
// variables as given (BRAID_* over NCCL_*); a refused one names the variable; ParseByteSize
// agrees with an independent reference and round-trips; a chosen interface matches the spec and
// is up; a parsed address prints and parses back to itself.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/base/config.h"
#include "core/net/socket.h"
#include "core/net/unique_id.h"
#include "transport/transport.h"

using namespace braid;

namespace {

constexpr size_t kMaxValue = 1024;
// Lines without a known name that go through every value parser (interface selection is not
// cheap; more lines would only slow the fuzzer down).
constexpr size_t kMaxFreeValues = 4;

// Whether `name` (a BRAID_* variable or its alias) holds a size ("bytes" in the table).
bool IsSizeVariable(const std::string& name) {
  for (const ConfigVar& v : ConfigTable())
    if (std::string(v.type) == "bytes" && (name == v.name || (v.alias && name == v.alias)))
      return true;
  return false;
}

// putenv() with buffers owned here: setenv() keeps every value it ever set (glibc never frees
// them), which would grow without bound over millions of runs.
class Environment {
 public:
  Environment() {
    for (const ConfigVar& v : ConfigTable()) {
      add(v.name);
      if (v.alias) add(v.alias);
    }
  }
  bool known(const std::string& name) const { return slots_.count(name) != 0; }
  void apply(const std::map<std::string, std::string>& values) {
    for (auto& [name, buf] : slots_) {
      auto it = values.find(name);
      if (it == values.end()) {
        unsetenv(name.c_str());
        continue;
      }
      std::string entry = name + "=" + it->second;
      std::memcpy(buf.data(), entry.c_str(), entry.size() + 1);
      putenv(buf.data());
    }
  }

 private:
  void add(const std::string& name) { slots_[name].resize(name.size() + 2 + kMaxValue); }
  std::map<std::string, std::vector<char>> slots_;
};

// ParseByteSize's documented grammar, written independently: digits, then K, M or G (either
// case, 1024-based) or nothing; nullopt-like false when it does not fit in 64 bits.
bool ReferenceSize(const std::string& s, uint64_t* out) {
  size_t i = 0;
  uint64_t v = 0;
  bool overflow = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    unsigned d = static_cast<unsigned>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) overflow = true;
    v = v * 10 + d;
  }
  if (i == 0 || overflow) return false;
  uint64_t mult = 1;
  if (i + 1 == s.size()) {
    char c = s[i];
    if (c == 'K' || c == 'k')
      mult = 1ull << 10;
    else if (c == 'M' || c == 'm')
      mult = 1ull << 20;
    else if (c == 'G' || c == 'g')
      mult = 1ull << 30;
    else
      return false;
  } else if (i != s.size()) {
    return false;
  }
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

void CheckByteSize(const std::string& value) {
  auto r = ParseByteSize(value);
  uint64_t want = 0;
  const bool ok = ReferenceSize(value, &want);
  if (r.ok() != ok) std::abort();
  if (!ok) return;
  if (*r != want) std::abort();
  auto again = ParseByteSize(std::to_string(*r));
  if (!again.ok() || *again != *r) std::abort();
}

// A host like the machines braid meets: loopback, a routable NIC, a down one, container
// bridges, a veth, IPv6 (global and link-local), IPv4 link-local, and one without an address.
const std::vector<InterfaceCandidate>& Candidates() {
  static const std::vector<InterfaceCandidate> c = [] {
    std::vector<InterfaceCandidate> v;
    auto add = [&](const char* name, const char* ip, bool up, bool loopback) {
      InterfaceCandidate x;
      x.ifname = name;
      x.up = up;
      x.loopback = loopback;
      if (!ip) {
        x.addr.ss_family = AF_UNSPEC;
      } else if (std::strchr(ip, ':')) {
        auto& in6 = reinterpret_cast<sockaddr_in6&>(x.addr);
        in6.sin6_family = AF_INET6;
        in6.sin6_port = htons(1234);
        inet_pton(AF_INET6, ip, &in6.sin6_addr);
      } else {
        auto& in = reinterpret_cast<sockaddr_in&>(x.addr);
        in.sin_family = AF_INET;
        in.sin_port = htons(1234);
        inet_pton(AF_INET, ip, &in.sin_addr);
      }
      v.push_back(x);
    };
    add("lo", "127.0.0.1", true, true);
    add("lo", "::1", true, true);
    add("eth0", "10.0.0.5", true, false);
    add("eth0", "fe80::1", true, false);
    add("eth1", "10.1.0.5", false, false);
    add("docker0", "172.17.0.1", true, false);
    add("veth12ab", "172.17.0.9", true, false);
    add("ib0", "fd00::5", true, false);
    add("enp1s0", "169.254.3.4", true, false);
    add("wlan0", nullptr, true, false);
    return v;
  }();
  return c;
}

void CheckIfname(const std::string& spec) {
  for (const InterfaceCandidate& c : Candidates()) (void)InterfaceMatchesSpec(spec, c.ifname);
  auto r = ChooseInterface(Candidates(), spec);
  if (!r.ok()) {
    if (spec.empty() || r.status().message().empty()) std::abort();  // "" always picks one
    return;
  }
  if (AddressPort(r->addr) != 0) std::abort();  // listeners pick their own port
  if (spec.empty()) return;
  if (!InterfaceMatchesSpec(spec, r->ifname)) std::abort();
  bool up = false;
  for (const InterfaceCandidate& c : Candidates()) up = up || (c.ifname == r->ifname && c.up);
  if (!up) std::abort();
}

// Only numeric hosts (and localhost) reach getaddrinfo: a name would be a DNS query per run.
bool NumericHost(const std::string& hostport) {
  std::string host = hostport;
  if (!host.empty() && host[0] == '[') {
    size_t close = host.find(']');
    if (close == std::string::npos) return true;  // a syntax error, no lookup
    host = host.substr(1, close - 1);
  } else {
    size_t colon = host.rfind(':');
    if (colon == std::string::npos) return true;
    host = host.substr(0, colon);
  }
  if (host.empty() || host == "localhost") return true;
  if (host.find_first_not_of("0123456789abcdefABCDEFxX.:") != std::string::npos) return false;
  in_addr a4;
  in6_addr a6;
  return inet_aton(host.c_str(), &a4) != 0 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

bool SameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family || AddressPort(a) != AddressPort(b)) return false;
  if (a.ss_family == AF_INET)
    return std::memcmp(&reinterpret_cast<const sockaddr_in&>(a).sin_addr,
                       &reinterpret_cast<const sockaddr_in&>(b).sin_addr, 4) == 0;
  if (a.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, 16) == 0;
  return false;
}

void CheckHostPort(const std::string& value) {
  if (!NumericHost(value)) return;
  auto r = ParseHostPort(value);
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return;
  }
  const std::string printed = FormatAddress(*r);
  auto again = ParseHostPort(printed);
  if (!again.ok() || !SameAddress(*r, *again)) std::abort();
}

void CheckTransports(const std::string& value) {
  auto r = SelectTransports(value);
  if (!r.ok()) {
    if (r.status().message().find("BRAID_TRANSPORTS") == std::string::npos) std::abort();
    return;
  }
  if (r->empty()) std::abort();
  for (size_t i = 1; i < r->size(); ++i)
    if ((*r)[i - 1]->priority() < (*r)[i]->priority()) std::abort();  // highest priority first
}

// The value `name` has for LoadConfigFromEnv: BRAID_* first, then its alias (unset or empty
// counts as absent, as in ConfigEnv).
const std::string* Lookup(const std::map<std::string, std::string>& env, const char* name) {
  for (const ConfigVar& v : ConfigTable()) {
    if (std::strcmp(v.name, name) != 0) continue;
    auto it = env.find(v.name);
    if (it != env.end() && !it->second.empty()) return &it->second;
    if (v.alias) {
      it = env.find(v.alias);
      if (it != env.end() && !it->second.empty()) return &it->second;
    }
  }
  return nullptr;
}

void CheckString(const std::map<std::string, std::string>& env, const char* name,
                 const std::string& got) {
  const std::string* v = Lookup(env, name);
  if (got != (v ? *v : std::string())) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Environment* environment = new Environment;
  if (size > 16 * kMaxValue) return 0;

  // "NAME=value" lines; a value ends at the line's end (environment values cannot hold NUL,
  // so it ends there too).
  std::map<std::string, std::string> env;
  std::vector<std::string> free_values;
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    line = line.substr(0, line.find('\0'));
    size_t eq = line.find('=');
    std::string value = eq == std::string::npos ? line : line.substr(eq + 1);
    if (value.size() > kMaxValue) continue;
    if (eq != std::string::npos && environment->known(line.substr(0, eq)))
      env[line.substr(0, eq)] = value;
    else if (free_values.size() < kMaxFreeValues)
      free_values.push_back(value);
  }
  environment->apply(env);

  auto config = LoadConfigFromEnv();
  if (!config.ok()) {
    // A refused value names its variable.
    if (config.status().message().find("BRAID_") == std::string::npos) std::abort();
  } else {
    const Config& c = *config;
    if (c.timeout_ms < 1000 || c.timeout_ms > int64_t{7} * 24 * 3600 * 1000) std::abort();
    if (c.nchannels < 1 || c.nchannels > 16) std::abort();
    if (c.chunk_bytes < (4u << 10) || c.chunk_bytes > (64u << 20)) std::abort();
    if (c.shm_ring_bytes < (64u << 10) || c.shm_ring_bytes > (256u << 20)) std::abort();
    if (c.spin_us < 0 || c.spin_us > 10000) std::abort();
    CheckString(env, "BRAID_TRANSPORTS", c.transports);
    CheckString(env, "BRAID_ALGO", c.algo);
    CheckString(env, "BRAID_SOCKET_IFNAME", c.socket_ifname);
    CheckString(env, "BRAID_DEBUG", c.debug);
    CheckString(env, "BRAID_COMM_ID", c.comm_id);
    CheckString(env, "BRAID_SECRET", c.secret);
    CheckString(env, "BRAID_LINK_PROFILE", c.link_profile);
    auto braid_algo = env.find("BRAID_ALGO");
    const bool from_nccl =
        !c.algo.empty() && (braid_algo == env.end() || braid_algo->second.empty());
    if (c.algo_from_nccl != from_nccl) std::abort();
    if (const std::string* bytes = Lookup(env, "BRAID_CHUNK_BYTES")) {
      auto want = ParseByteSize(*bytes);
      if (!want.ok() || *want != c.chunk_bytes) std::abort();
    }
  }

  for (const auto& [name, value] : env) {
    if (IsSizeVariable(name)) CheckByteSize(value);
    if (name.find("SOCKET_IFNAME") != std::string::npos) CheckIfname(value);
    if (name.find("COMM_ID") != std::string::npos) CheckHostPort(value);
    if (name == "BRAID_TRANSPORTS") CheckTransports(value);
  }
  for (const std::string& v : free_values) {
    CheckByteSize(v);
    CheckIfname(v);
    CheckHostPort(v);
    CheckTransports(v);
  }
  return 0;
}
