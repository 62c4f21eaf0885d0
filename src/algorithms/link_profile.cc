#include "algorithms/link_profile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace braid {
namespace {

constexpr size_t kMaxLineBytes = 256;

struct Key {
  const char* name;
  LinkClass cls;
  bool alpha;  // else beta
};
constexpr Key kKeys[] = {
    {"intra.alpha_s", LinkClass::kIntraNode, true},
    {"intra.beta_bytes_s", LinkClass::kIntraNode, false},
    {"inter.alpha_s", LinkClass::kInterNode, true},
    {"inter.beta_bytes_s", LinkClass::kInterNode, false},
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

Status LineError(int line, const std::string& why) {
  return InvalidArgument("line " + std::to_string(line) + ": " + why);
}

// Printable ASCII only in messages: the text is untrusted.
std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 40) out += "...";
  return out + "'";
}

// std::from_chars, not strtod: independent of the locale a host program may have set.
bool ParseDouble(std::string_view s, double* out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

std::string FormatDouble(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest exact round trip
  return ec == std::errc() ? std::string(buf, ptr) : "nan";
}

}  // namespace

const char* LinkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kIntraNode:
      return "intra";
    case LinkClass::kInterNode:
      return "inter";
    default:
      return "group";
  }
}

Status CheckLinkParams(const LinkParams& p) {
  // Written so that NaN fails every comparison and is refused.
  if (!(p.alpha_s >= kMinAlphaSeconds && p.alpha_s <= kMaxAlphaSeconds))
    return InvalidArgument("alpha " + FormatDouble(p.alpha_s) + " s is outside [" +
                           FormatDouble(kMinAlphaSeconds) + ", " + FormatDouble(kMaxAlphaSeconds) +
                           "] s");
  if (!(p.beta_bytes_s >= kMinBetaBytesPerSecond && p.beta_bytes_s <= kMaxBetaBytesPerSecond))
    return InvalidArgument("beta " + FormatDouble(p.beta_bytes_s) + " bytes/s is outside [" +
                           FormatDouble(kMinBetaBytesPerSecond) + ", " +
                           FormatDouble(kMaxBetaBytesPerSecond) + "] bytes/s");
  return Status::Ok();
}

Result<LinkProfile> ParseLinkProfile(std::string_view text) {
  if (text.size() > kMaxLinkProfileBytes)
    return InvalidArgument("the profile has " + std::to_string(text.size()) +
                           " bytes, more than the " + std::to_string(kMaxLinkProfileBytes) +
                           " a profile may have");
  if (text.find('\0') != std::string_view::npos)
    return InvalidArgument("the profile holds a NUL byte (not a text file)");
  bool version_seen = false;
  bool alpha_seen[kNumCalibratedClasses] = {}, beta_seen[kNumCalibratedClasses] = {};
  LinkProfile p;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const bool terminated = nl != std::string_view::npos;
    if (!terminated) nl = text.size();
    std::string_view raw = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (raw.size() > kMaxLineBytes)
      return LineError(line_no, "longer than " + std::to_string(kMaxLineBytes) + " bytes");
    std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const size_t sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) return LineError(line_no, Quoted(line) + " has no value");
    const std::string_view key = line.substr(0, sp);
    const std::string_view value = Trim(line.substr(sp));
    if (!version_seen) {
      if (key != "version")
        return LineError(line_no, "expected 'version 1' first, found " + Quoted(line));
      if (value != "1")
        return LineError(line_no, "version " + Quoted(value) + " is not supported (only 1)");
      version_seen = true;
      continue;
    }
    const Key* k = nullptr;
    for (const Key& candidate : kKeys)
      if (key == candidate.name) k = &candidate;
    if (!k)
      return LineError(line_no, "unknown key " + Quoted(key) +
                                    " (keys: intra.alpha_s, intra.beta_bytes_s, inter.alpha_s, "
                                    "inter.beta_bytes_s)");
    const int c = static_cast<int>(k->cls);
    bool& seen = k->alpha ? alpha_seen[c] : beta_seen[c];
    if (seen) return LineError(line_no, std::string(k->name) + " appears twice");
    seen = true;
    double v = 0;
    if (!ParseDouble(value, &v))
      return LineError(line_no, std::string(k->name) + " " + Quoted(value) + " is not a number");
    (k->alpha ? p.params[c].alpha_s : p.params[c].beta_bytes_s) = v;
    // A value cut short by a truncated write still parses: refuse a last line without its
    // newline, since the writer always ends the file with one.
    if (!terminated) return LineError(line_no, "the file ends inside this line (truncated?)");
  }
  if (!version_seen) return InvalidArgument("empty profile (no 'version 1' line)");
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    const char* name = LinkClassName(static_cast<LinkClass>(c));
    if (alpha_seen[c] != beta_seen[c])
      return InvalidArgument(
          std::string(name) + " has " +
          (alpha_seen[c] ? "alpha_s but no beta_bytes_s" : "beta_bytes_s but no alpha_s") +
          " (truncated?)");
    if (!alpha_seen[c]) continue;
    Status st = CheckLinkParams(p.params[c]);
    if (!st.ok()) return st.prepend(std::string(name) + ": ");
    p.has[c] = true;
  }
  if (!p.has[0] && !p.has[1]) return InvalidArgument("the profile holds no link class");
  return p;
}

std::string FormatLinkProfile(const LinkProfile& p) {
  std::string s = "version 1\n";
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    if (!p.has[c]) continue;
    const std::string name = LinkClassName(static_cast<LinkClass>(c));
    s += name + ".alpha_s " + FormatDouble(p.params[c].alpha_s) + "\n";
    s += name + ".beta_bytes_s " + FormatDouble(p.params[c].beta_bytes_s) + "\n";
  }
  return s;
}

Result<std::optional<LinkProfile>> LoadLinkProfile(const std::string& path) {
  // O_NONBLOCK: a FIFO given by mistake must not block the init.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<LinkProfile>();
    return SystemError(ErrnoMessage("opening link profile " + path, errno));
  }
  struct stat st {};
  std::string text;
  Status status;
  if (fstat(fd, &st) != 0) {
    status = SystemError(ErrnoMessage("stat of link profile " + path, errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = InvalidArgument("link profile " + path + " is not a regular file");
  } else {
    // One byte more than allowed, so that an oversized file is seen as such.
    text.resize(kMaxLinkProfileBytes + 1);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = SystemError(ErrnoMessage("reading link profile " + path, errno));
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
  }
  close(fd);
  if (!status.ok()) return status;
  auto p = ParseLinkProfile(text);
  if (!p.ok()) return Status(p.status()).prepend("link profile " + path + ": ");
  return std::optional<LinkProfile>(*p);
}

Status SaveLinkProfile(const std::string& path, const LinkProfile& p) {
  const std::string text =
      "# braid link profile: alpha (s per message) and beta (bytes/s) per link class,\n"
      "# measured at a communicator's init (BRAID_LINK_PROFILE). Delete it to measure again.\n" +
      FormatLinkProfile(p);
  // Unique per process: two jobs writing at once each rename a complete file of their own.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError(ErrnoMessage("creating " + tmp, errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return SystemError(ErrnoMessage("writing " + tmp, err));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return SystemError(ErrnoMessage("closing " + tmp, err));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return SystemError(ErrnoMessage("renaming " + tmp + " to " + path, err));
  }
  return Status::Ok();
}

std::string DescribeLinkParams(LinkClass c, const LinkParams& p) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s %.2f us %.2f GB/s", LinkClassName(c), p.alpha_s * 1e6,
                p.beta_bytes_s / 1e9);
  return buf;
}

}  // namespace braid
