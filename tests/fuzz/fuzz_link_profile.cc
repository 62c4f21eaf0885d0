// Fuzzes ParseLinkProfile (src/algorithms/link_profile.cc): the text of BRAID_LINK_PROFILE (a
// user's file) and of a measured model that one rank sends every other over the bootstrap.
//
// Input: any bytes, taken as the profile's text.
// Invariants: a rejected profile has a message; an accepted one holds at least one class, every
// class within the believable bounds, and formats to a text that parses back to the same doubles.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "algorithms/link_profile.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto p = ParseLinkProfile(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!p.ok()) {
    if (p.status().message().empty()) std::abort();
    return 0;
  }
  if (!p->has[0] && !p->has[1]) std::abort();
  for (int c = 0; c < kNumCalibratedClasses; ++c)
    if (p->has[c] && !CheckLinkParams(p->params[c]).ok()) std::abort();
  auto again = ParseLinkProfile(FormatLinkProfile(*p));
  if (!again.ok()) std::abort();
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    if (again->has[c] != p->has[c]) std::abort();
    if (!p->has[c]) continue;
    if (again->params[c].alpha_s != p->params[c].alpha_s ||
        again->params[c].beta_bytes_s != p->params[c].beta_bytes_s)
      std::abort();
  }
  return 0;
}
