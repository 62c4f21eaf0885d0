// The link profile: the cost model's alpha-beta parameters per link class as a small text file
// (BRAID_LINK_PROFILE), so that a job can start from a previous job's calibration instead of
// measuring (spec/algorithms.md section 4). The same text carries a measured model from the rank
// that measured it to every other rank over the bootstrap, so one parser guards both the user's
// file and the wire.
//
// Format (one `key value` per line; blank lines and lines starting with '#' are ignored):
//
//   version 1
//   intra.alpha_s 2.5e-06          seconds per message, LinkClass::kIntraNode
//   intra.beta_bytes_s 8.1e+09     bytes per second
//   inter.alpha_s 2.5e-05          LinkClass::kInterNode (optional, like intra)
//   inter.beta_bytes_s 1.2e+09
//
// A class is present with both of its keys or with neither. The file is user input: its size,
// its lines and its values are bounded, and anything else is refused with a message naming the
// line, never a crash.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "algorithms/tuner.h"
#include "core/base/status.h"

namespace braid {

// Largest profile accepted (a valid one is about 150 bytes).
inline constexpr size_t kMaxLinkProfileBytes = 4096;

// Bounds of a believable link: a measured or loaded value outside them is refused. Wide on
// purpose (1 ns .. 1 s per message, 100 KB/s .. 10 TB/s): they catch garbage, not slow links.
inline constexpr double kMinAlphaSeconds = 1e-9;
inline constexpr double kMaxAlphaSeconds = 1.0;
inline constexpr double kMinBetaBytesPerSecond = 1e5;
inline constexpr double kMaxBetaBytesPerSecond = 1e13;

// The parameters of the classes a profile holds (`has[c]` says whether class c is present).
struct LinkProfile {
  bool has[kNumCalibratedClasses] = {};
  LinkParams params[kNumCalibratedClasses];

  void set(LinkClass c, const LinkParams& p) {
    has[static_cast<int>(c)] = true;
    params[static_cast<int>(c)] = p;
  }
  bool holds(LinkClass c) const { return has[static_cast<int>(c)]; }
  const LinkParams& of(LinkClass c) const { return params[static_cast<int>(c)]; }
};

// "intra" / "inter" / "group".
const char* LinkClassName(LinkClass c);

// OK when both values are finite and inside the bounds above; else an InvalidArgument saying
// which value is wrong.
Status CheckLinkParams(const LinkParams& p);

// Parses the format above. InvalidArgument naming the line for anything else (unknown key,
// duplicate, a class with one key only, a value that is not a number or is out of bounds,
// oversized text or lines, a missing or unknown version, no class at all).
Result<LinkProfile> ParseLinkProfile(std::string_view text);

// The text of `p` (its present classes), exact: parsing it gives back the same doubles.
std::string FormatLinkProfile(const LinkProfile& p);

// Reads and parses the file at `path`: nullopt when it does not exist, an error when it cannot
// be read or does not parse (the message names the file).
Result<std::optional<LinkProfile>> LoadLinkProfile(const std::string& path);

// Writes `p` to `path` atomically: a temporary file beside it, then rename, so a reader (another
// job starting now) sees the old file or the new one, never half of one.
Status SaveLinkProfile(const std::string& path, const LinkProfile& p);

// "intra 2.50 us 8.10 GB/s" (for logs and describe()).
std::string DescribeLinkParams(LinkClass c, const LinkParams& p);

}  // namespace braid
