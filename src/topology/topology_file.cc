#include "topology/topology_file.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace braid::topo {
namespace {

// A unit: the value in the file times mul, divided by div, is the value in the model. Sub-units
// divide by an exact integer (3us = 3 / 1e6, correctly rounded) rather than multiply by an
// inexact 1e-6, so that the literal a reader writes and the value loaded agree bit for bit.
struct Unit {
  const char* name;
  double mul;
  double div;
};
constexpr Unit kBandwidthUnits[] = {
    {"TB/s", 1e12, 1}, {"GB/s", 1e9, 1}, {"MB/s", 1e6, 1}, {"kB/s", 1e3, 1}, {"B/s", 1, 1}};
constexpr Unit kLatencyUnits[] = {{"us", 1, 1e6}, {"ns", 1, 1e9}, {"ms", 1, 1e3}, {"s", 1, 1}};
constexpr Unit kSpeedUnits[] = {{"t", 1e12, 1}, {"g", 1e9, 1}, {"m", 1e6, 1}, {"k", 1e3, 1}};

std::string Quote(std::string_view s) {
  // Bounded by the line length limit; quoted so that an empty or odd value is visible.
  return "'" + std::string(s) + "'";
}

// A decimal number ("25", "1.5", "2e-6"; no sign, no hex, no inf/nan) at the start of `s`.
// Returns the characters it used, 0 when there is none.
size_t ParseDecimal(std::string_view s, double* out) {
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return 0;
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || !std::isfinite(v)) return 0;
  *out = v;
  return static_cast<size_t>(ptr - s.data());
}

template <size_t N>
bool ParseWithUnit(std::string_view s, const Unit (&units)[N], bool unit_required, double* out) {
  double v = 0;
  size_t used = ParseDecimal(s, &v);
  if (used == 0) return false;
  std::string_view unit = s.substr(used);
  if (unit.empty()) {
    if (unit_required) return false;
    *out = v;
    return true;
  }
  for (const Unit& u : units) {
    if (unit == u.name) {
      *out = v * u.mul / u.div;
      return std::isfinite(*out);
    }
  }
  return false;
}

// The shortest text of `v` in the first unit (in the given order) that reads back exactly.
template <size_t N>
std::string FormatWithUnit(double v, const Unit (&units)[N]) {
  for (const Unit& u : units) {
    const double scaled = v * u.div / u.mul;
    char buf[64];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, scaled);
    if (ec != std::errc()) continue;
    std::string text(buf, ptr);
    double back = 0;
    std::from_chars(buf, ptr, back);
    // Only plain decimals with a unit that leaves a readable number (1 .. 99999).
    if (back * u.mul / u.div == v && text.find('e') == std::string::npos && scaled >= 1 &&
        scaled < 1e5)
      return text + u.name;
  }
  // Exact in the base unit (the last one for bandwidths, "s" for latencies), always.
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, ptr) + units[N - 1].name;
}

bool GoodName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == ':'))
      return false;
  return true;
}

bool GoodPci(std::string_view s) {
  // dddd:bb:dd.f, lowercase hex (as sysfs and hwloc write it).
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
    if (!std::isxdigit(static_cast<unsigned char>(s[i])) ||
        std::isupper(static_cast<unsigned char>(s[i])))
      return false;
  return true;
}

// One parsed line: the keyword, its positional name (if any) and key=value fields.
struct Line {
  size_t number = 0;
  std::string keyword;
  std::string name;
  std::map<std::string, std::string> fields;
};

class Parser {
 public:
  explicit Parser(std::string origin) : origin_(std::move(origin)) {}

  Result<Topology> Run(std::string_view text);

 private:
  Status Error(size_t line, const std::string& problem) const {
    return InvalidArgument(origin_ + ":" + std::to_string(line) + ": " + problem);
  }
  Status Tokenize(size_t number, std::string_view raw, Line* line, bool* empty);
  Status Statement(const Line& l);
  Status CheckFields(const Line& l, std::initializer_list<const char*> allowed,
                     std::initializer_list<const char*> required);
  Status Int(const Line& l, const char* key, int lo, int hi, int* out);
  Status OptionalLink(const Line& l, std::optional<Link>* out);
  Status LinkField(const Line& l, const char* key, bool bandwidth, double* out);
  Status NeedNode(const Line& l);
  Status Resolve();

  std::string origin_;
  Topology t_;
  bool have_header_ = false;
  bool have_cluster_ = false;
  // Where each thing was defined or referenced, for errors found after the whole file is read.
  std::map<std::string, size_t> switch_line_;
  std::vector<size_t> node_line_;
  std::vector<std::vector<size_t>> device_line_;  // per node, per device
  std::set<std::string> node_names_;
};

Status Parser::Tokenize(size_t number, std::string_view raw, Line* line, bool* empty) {
  if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);  // CRLF files
  if (raw.size() > kMaxLineBytes)
    return Error(number, "line is " + std::to_string(raw.size()) + " bytes; the limit is " +
                             std::to_string(kMaxLineBytes));
  size_t hash = raw.find('#');
  if (hash != std::string_view::npos) raw = raw.substr(0, hash);
  for (char c : raw) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u >= 0x7f)
      return Error(
          number, "byte 0x" + [u] {
            char b[8];
            std::snprintf(b, sizeof b, "%02x", u);
            return std::string(b);
          }() + " is not printable ASCII (names and values are ASCII)");
  }
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < raw.size()) {
    while (i < raw.size() && (raw[i] == ' ' || raw[i] == '\t')) ++i;
    size_t start = i;
    while (i < raw.size() && raw[i] != ' ' && raw[i] != '\t') ++i;
    if (i > start) words.push_back(raw.substr(start, i - start));
  }
  *empty = words.empty();
  if (words.empty()) return Status::Ok();
  line->number = number;
  line->keyword = std::string(words[0]);
  size_t first_field = 1;
  if (words.size() > 1 && words[1].find('=') == std::string_view::npos) {
    line->name = std::string(words[1]);
    first_field = 2;
  }
  for (size_t w = first_field; w < words.size(); ++w) {
    size_t eq = words[w].find('=');
    if (eq == std::string_view::npos)
      return Error(number, "expected key=value, got " + Quote(words[w]));
    std::string key(words[w].substr(0, eq));
    if (!line->fields.emplace(key, std::string(words[w].substr(eq + 1))).second)
      return Error(number, "field " + Quote(key) + " given twice");
  }
  return Status::Ok();
}

Status Parser::CheckFields(const Line& l, std::initializer_list<const char*> allowed,
                           std::initializer_list<const char*> required) {
  for (const auto& [key, value] : l.fields) {
    bool known = false;
    std::string list;
    for (const char* a : allowed) {
      known = known || key == a;
      list += list.empty() ? a : std::string(", ") + a;
    }
    if (!known)
      return Error(l.number, "unknown field " + Quote(key) + " for '" + l.keyword + "' (" +
                                 (list.empty() ? std::string("it takes none") : "known: " + list) +
                                 ")");
    if (value.empty()) return Error(l.number, "field " + Quote(key) + " has an empty value");
  }
  for (const char* r : required)
    if (!l.fields.count(r)) return Error(l.number, "'" + l.keyword + "' needs " + r + "=");
  return Status::Ok();
}

Status Parser::Int(const Line& l, const char* key, int lo, int hi, int* out) {
  auto it = l.fields.find(key);
  if (it == l.fields.end()) return Status::Ok();
  const std::string& v = it->second;
  long long n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || ptr != v.data() + v.size() || v[0] == '-' || n < lo || n > hi)
    return Error(l.number, std::string(key) + "=" + v + ": expected an integer in " +
                               std::to_string(lo) + ".." + std::to_string(hi));
  *out = static_cast<int>(n);
  return Status::Ok();
}

Status Parser::LinkField(const Line& l, const char* key, bool bandwidth, double* out) {
  const std::string& v = l.fields.at(key);
  if (bandwidth) {
    if (!ParseWithUnit(v, kBandwidthUnits, true, out))
      return Error(l.number, "bw=" + v +
                                 ": expected a bandwidth in bytes/s with a unit, e.g. 25GB/s "
                                 "(units TB/s GB/s MB/s kB/s B/s; NIC speeds in bits go on 'nic')");
    if (*out < kMinBandwidth || *out > kMaxBandwidth)
      return Error(l.number, "bw=" + v + " is out of range (1kB/s .. 1000TB/s)");
  } else {
    if (!ParseWithUnit(v, kLatencyUnits, true, out))
      return Error(l.number, "lat=" + v +
                                 ": expected a latency with a unit, e.g. 2us "
                                 "(units s ms us ns)");
    if (*out < kMinLatency || *out > kMaxLatency)
      return Error(l.number, "lat=" + v + " is out of range (0.1ns .. 100s)");
  }
  return Status::Ok();
}

Status Parser::OptionalLink(const Line& l, std::optional<Link>* out) {
  const bool bw = l.fields.count("bw"), lat = l.fields.count("lat");
  if (!bw && !lat) return Status::Ok();
  if (bw != lat) return Error(l.number, "bw= and lat= go together: give both or neither");
  Link link;
  BRAID_RETURN_IF_ERROR(LinkField(l, "bw", true, &link.bandwidth));
  BRAID_RETURN_IF_ERROR(LinkField(l, "lat", false, &link.latency));
  *out = link;
  return Status::Ok();
}

Status Parser::NeedNode(const Line& l) {
  if (t_.nodes.empty())
    return Error(l.number, "'" + l.keyword + "' outside a node: write 'node <name>' before it");
  return Status::Ok();
}

Status Parser::Statement(const Line& l) {
  const std::string& k = l.keyword;
  if (!have_header_) {
    if (k != "braid-topology")
      return Error(l.number, "expected the header 'braid-topology " +
                                 std::to_string(kTopologyFileVersion) + "' first, got " + Quote(k));
    if (l.name != std::to_string(kTopologyFileVersion) || !l.fields.empty())
      return Error(l.number, "format version " + Quote(l.name) +
                                 " is not supported (this build "
                                 "reads version " +
                                 std::to_string(kTopologyFileVersion) + ")");
    have_header_ = true;
    return Status::Ok();
  }
  static const std::set<std::string> kKeywords = {
      "braid-topology", "cluster", "level", "switch", "node", "cpu", "nic", "group", "gpu"};
  if (!kKeywords.count(k))
    return Error(l.number, "unknown keyword " + Quote(k) +
                               " (known: cluster, level, switch, node, cpu, nic, group, gpu)");
  const bool named = k != "cpu";
  if (named && !GoodName(l.name))
    return Error(l.number, "'" + k + "' needs a name (1.." + std::to_string(kMaxNameBytes) +
                               " of A-Z a-z 0-9 _ - . :), got " + Quote(l.name));
  if (!named && !l.name.empty())
    return Error(l.number, "'cpu' takes only fields, got " + Quote(l.name));

  if (k == "braid-topology") return Error(l.number, "the header appears twice");
  if (k == "cluster") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {}, {}));
    if (have_cluster_) return Error(l.number, "'cluster' appears twice");
    have_cluster_ = true;
    t_.name = l.name;
    return Status::Ok();
  }
  if (k == "level") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {"bw", "lat"}, {"bw", "lat"}));
    int level = -1;
    for (int i = 0; i < kNumLevels; ++i)
      if (l.name == LevelName(static_cast<Level>(i))) level = i;
    if (level < 0)
      return Error(l.number, "unknown level " + Quote(l.name) +
                                 " (known: device_group, node, switch, cluster)");
    if (t_.levels[level]) return Error(l.number, "level " + Quote(l.name) + " is given twice");
    return OptionalLink(l, &t_.levels[level]);
  }
  if (k == "switch") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {"parent", "bw", "lat"}, {}));
    if (switch_line_.count(l.name))
      return Error(l.number, "switch " + Quote(l.name) + " is already defined on line " +
                                 std::to_string(switch_line_[l.name]));
    if (t_.switches.size() >= kMaxSwitches)
      return Error(l.number, "more than " + std::to_string(kMaxSwitches) + " switch domains");
    SwitchDomain s;
    s.name = l.name;
    if (l.fields.count("parent")) {
      s.parent = l.fields.at("parent");
      if (!GoodName(s.parent)) return Error(l.number, "parent=" + s.parent + " is not a name");
    }
    BRAID_RETURN_IF_ERROR(OptionalLink(l, &s.link));
    switch_line_[l.name] = l.number;
    t_.switches.push_back(std::move(s));
    return Status::Ok();
  }
  if (k == "node") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {"switch", "bw", "lat"}, {}));
    if (node_names_.count(l.name))
      return Error(l.number, "node " + Quote(l.name) + " is already defined on line " +
                                 std::to_string(node_line_[t_.find_node(l.name)]));
    if (t_.nodes.size() >= kMaxNodes)
      return Error(l.number, "more than " + std::to_string(kMaxNodes) + " nodes");
    Node n;
    n.name = l.name;
    if (l.fields.count("switch")) {
      n.switch_domain = l.fields.at("switch");
      if (!GoodName(n.switch_domain))
        return Error(l.number, "switch=" + n.switch_domain + " is not a name");
    }
    BRAID_RETURN_IF_ERROR(OptionalLink(l, &n.link));
    node_names_.insert(n.name);
    node_line_.push_back(l.number);
    device_line_.emplace_back();
    t_.nodes.push_back(std::move(n));
    return Status::Ok();
  }

  BRAID_RETURN_IF_ERROR(NeedNode(l));
  Node& n = t_.nodes.back();
  if (k == "cpu") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {"packages", "numa", "cores", "threads"},
                                      {"packages", "numa", "cores", "threads"}));
    if (n.cpu != CpuInfo{})
      return Error(l.number, "node " + Quote(n.name) + " has two 'cpu' lines");
    CpuInfo c;
    BRAID_RETURN_IF_ERROR(Int(l, "packages", 1, kMaxPackages, &c.packages));
    BRAID_RETURN_IF_ERROR(Int(l, "numa", 1, kMaxNuma + 1, &c.numa_nodes));
    BRAID_RETURN_IF_ERROR(Int(l, "cores", 1, kMaxThreads, &c.cores));
    BRAID_RETURN_IF_ERROR(Int(l, "threads", 1, kMaxThreads, &c.threads));
    if (c.threads < c.cores || c.cores < c.packages)
      return Error(l.number, "expected packages <= cores <= threads");
    n.cpu = c;
    return Status::Ok();
  }
  // nic, group and gpu share the per-node name checks.
  auto duplicate = [&](const auto& list, const char* what) -> Status {
    if (list.size() >= kMaxPerNode)
      return Error(l.number, "node " + Quote(n.name) + " has more than " +
                                 std::to_string(kMaxPerNode) + " " + what + "s");
    for (const auto& x : list)
      if (x.name == l.name)
        return Error(l.number, std::string(what) + " " + Quote(l.name) +
                                   " is defined twice in node " + Quote(n.name));
    return Status::Ok();
  };
  if (k == "nic") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {"type", "speed", "numa", "gid"}, {"type"}));
    BRAID_RETURN_IF_ERROR(duplicate(n.nics, "nic"));
    Nic nic;
    nic.name = l.name;
    const std::string& type = l.fields.at("type");
    bool known = false;
    for (NicType ty :
         {NicType::kInfiniBand, NicType::kRoCE, NicType::kSlingshot, NicType::kEthernet}) {
      if (type == NicTypeName(ty)) {
        nic.type = ty;
        known = true;
      }
    }
    if (!known)
      return Error(l.number, "type=" + type + ": expected ib, roce, slingshot or ethernet");
    if (l.fields.count("speed")) {
      const std::string& v = l.fields.at("speed");
      double bps = 0;
      std::string_view sv = v;
      if (sv.size() > 3 && sv.substr(sv.size() - 3) == "b/s") sv.remove_suffix(3);
      // Speeds are bits/s; accept the suffix in either case ("200g", "200G", "200Gb/s").
      std::string lower(sv);
      if (!lower.empty()) lower.back() = static_cast<char>(std::tolower(lower.back()));
      if (!ParseWithUnit(lower, kSpeedUnits, false, &bps) || bps != std::floor(bps))
        return Error(l.number, "speed=" + v +
                                   ": expected bits/s as a whole number with an "
                                   "optional k/m/g/t suffix, e.g. 200g");
      if (bps < static_cast<double>(kMinNicSpeed) || bps > static_cast<double>(kMaxNicSpeed))
        return Error(l.number, "speed=" + v + " is out of range (1m .. 10t bits/s)");
      nic.speed_bps = static_cast<uint64_t>(bps);
    }
    BRAID_RETURN_IF_ERROR(Int(l, "numa", 0, kMaxNuma, &nic.numa));
    // The RoCE v2 GID index (what verbs finds on a real node): RoCE only.
    if (l.fields.count("gid") && nic.type != NicType::kRoCE)
      return Error(l.number, "gid= is the RoCE v2 GID index of a roce NIC, not of type=" + type);
    BRAID_RETURN_IF_ERROR(Int(l, "gid", 0, kMaxGidIndex, &nic.gid_index));
    n.nics.push_back(std::move(nic));
    return Status::Ok();
  }
  if (k == "group") {
    BRAID_RETURN_IF_ERROR(CheckFields(l, {"bw", "lat"}, {}));
    BRAID_RETURN_IF_ERROR(duplicate(n.groups, "group"));
    DeviceGroup g;
    g.name = l.name;
    BRAID_RETURN_IF_ERROR(OptionalLink(l, &g.link));
    n.groups.push_back(std::move(g));
    return Status::Ok();
  }
  // gpu
  BRAID_RETURN_IF_ERROR(CheckFields(l, {"vendor", "pci", "numa", "group"}, {"vendor"}));
  BRAID_RETURN_IF_ERROR(duplicate(n.devices, "gpu"));
  Device d;
  d.name = l.name;
  const std::string& vendor = l.fields.at("vendor");
  bool known = false;
  for (Vendor v : {Vendor::kUnknown, Vendor::kNvidia, Vendor::kAmd, Vendor::kIntel}) {
    if (vendor == VendorName(v)) {
      d.vendor = v;
      known = true;
    }
  }
  if (!known)
    return Error(l.number, "vendor=" + vendor + ": expected nvidia, amd, intel or unknown");
  if (l.fields.count("pci")) {
    d.pci = l.fields.at("pci");
    if (!GoodPci(d.pci))
      return Error(l.number, "pci=" + d.pci + ": expected a PCI bus id like 0000:07:00.0");
  }
  BRAID_RETURN_IF_ERROR(Int(l, "numa", 0, kMaxNuma, &d.numa));
  if (l.fields.count("group")) {
    d.group = l.fields.at("group");
    if (!GoodName(d.group)) return Error(l.number, "group=" + d.group + " is not a name");
  }
  n.devices.push_back(std::move(d));
  device_line_.back().push_back(l.number);
  return Status::Ok();
}

// References may point forward (a switch's parent defined later), so they are checked once the
// whole file is read, each with the line that made it.
Status Parser::Resolve() {
  for (const SwitchDomain& s : t_.switches)
    if (!s.parent.empty() && !switch_line_.count(s.parent))
      return Error(switch_line_.at(s.name),
                   "switch " + Quote(s.name) + ": parent " + Quote(s.parent) + " is not defined");
  if (std::string cycle = SwitchCycle(t_); !cycle.empty())
    return Error(switch_line_.at(cycle.substr(0, cycle.find(' '))),
                 "switch domains form a cycle: " + cycle);
  for (size_t i = 0; i < t_.nodes.size(); ++i) {
    const Node& n = t_.nodes[i];
    if (!n.switch_domain.empty() && !switch_line_.count(n.switch_domain))
      return Error(node_line_[i], "node " + Quote(n.name) + ": switch " + Quote(n.switch_domain) +
                                      " is not defined");
    for (size_t d = 0; d < n.devices.size(); ++d) {
      const std::string& g = n.devices[d].group;
      if (g.empty()) continue;
      bool found = false;
      for (const DeviceGroup& x : n.groups) found = found || x.name == g;
      if (!found)
        return Error(device_line_[i][d], "gpu " + Quote(n.devices[d].name) + ": group " + Quote(g) +
                                             " is not defined in node " + Quote(n.name));
    }
  }
  return Status::Ok();
}

Result<Topology> Parser::Run(std::string_view text) {
  if (text.size() > kMaxFileBytes)
    return InvalidArgument(origin_ + ": the text is " + std::to_string(text.size()) +
                           " bytes; a topology file is at most " + std::to_string(kMaxFileBytes));
  size_t number = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    Line line;
    bool empty = true;
    BRAID_RETURN_IF_ERROR(Tokenize(number, text.substr(pos, end - pos), &line, &empty));
    pos = end + 1;
    if (!empty) BRAID_RETURN_IF_ERROR(Statement(line));
  }
  if (!have_header_)
    return InvalidArgument(origin_ + ": no header: a topology file starts with 'braid-topology " +
                           std::to_string(kTopologyFileVersion) + "'");
  BRAID_RETURN_IF_ERROR(Resolve());
  // Everything Validate checks was checked above with a line number; this is the backstop.
  Status st = Validate(t_);
  if (!st.ok()) return InvalidArgument(origin_ + ": " + st.message());
  return std::move(t_);
}

std::string LinkFields(const std::optional<Link>& l) {
  if (!l) return {};
  return " bw=" + FormatWithUnit(l->bandwidth, kBandwidthUnits) +
         " lat=" + FormatWithUnit(l->latency, kLatencyUnits);
}

std::string FormatSpeed(uint64_t bps) {
  for (const Unit& u : kSpeedUnits) {
    const auto m = static_cast<uint64_t>(u.mul);
    if (bps % m == 0) return std::to_string(bps / m) + u.name;
  }
  return std::to_string(bps);
}

}  // namespace

Result<Topology> ParseTopology(std::string_view text, const std::string& origin) {
  return Parser(origin).Run(text);
}

Result<Topology> LoadTopologyFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return InvalidArgument(ErrnoMessage("opening topology file '" + path + "'", errno));
  std::string text(kMaxFileBytes + 1, '\0');
  const size_t got = std::fread(text.data(), 1, text.size(), f);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return InvalidArgument("reading topology file '" + path + "' failed");
  if (got > kMaxFileBytes)
    return InvalidArgument(path + ": larger than " + std::to_string(kMaxFileBytes) +
                           " bytes; a topology file is at most that");
  text.resize(got);
  return ParseTopology(text, path);
}

std::string DumpTopology(const Topology& t) {
  std::string out = "# braid topology file (docs/topology.md)\nbraid-topology " +
                    std::to_string(kTopologyFileVersion) + "\ncluster " + t.name + "\n";
  for (int i = 0; i < kNumLevels; ++i)
    if (t.levels[i])
      out +=
          std::string("level ") + LevelName(static_cast<Level>(i)) + LinkFields(t.levels[i]) + "\n";
  for (const SwitchDomain& s : t.switches)
    out += "switch " + s.name + (s.parent.empty() ? "" : " parent=" + s.parent) +
           LinkFields(s.link) + "\n";
  for (const Node& n : t.nodes) {
    out += "node " + n.name + (n.switch_domain.empty() ? "" : " switch=" + n.switch_domain) +
           LinkFields(n.link) + "\n";
    if (n.cpu != CpuInfo{})
      out += "  cpu packages=" + std::to_string(n.cpu.packages) +
             " numa=" + std::to_string(n.cpu.numa_nodes) + " cores=" + std::to_string(n.cpu.cores) +
             " threads=" + std::to_string(n.cpu.threads) + "\n";
    for (const Nic& nic : n.nics)
      out += "  nic " + nic.name + " type=" + NicTypeName(nic.type) +
             (nic.speed_bps ? " speed=" + FormatSpeed(nic.speed_bps) : "") +
             (nic.numa >= 0 ? " numa=" + std::to_string(nic.numa) : "") +
             (nic.gid_index >= 0 ? " gid=" + std::to_string(nic.gid_index) : "") + "\n";
    for (const DeviceGroup& g : n.groups) out += "  group " + g.name + LinkFields(g.link) + "\n";
    for (const Device& d : n.devices)
      out += "  gpu " + d.name + " vendor=" + VendorName(d.vendor) +
             (d.pci.empty() ? "" : " pci=" + d.pci) +
             (d.numa >= 0 ? " numa=" + std::to_string(d.numa) : "") +
             (d.group.empty() ? "" : " group=" + d.group) + "\n";
  }
  return out;
}

}  // namespace braid::topo
