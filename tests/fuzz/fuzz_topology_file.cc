// Fuzzes the topology file loader (src/topology/topology_file.cc): ParseTopology on the input as
// BRAID_TOPO_FILE would give it, then the derived groups on what it accepts.
//
// Input: the file's text.
// Invariants: a refusal is an InvalidArgument whose message starts with the origin and, when it
// names a line, a line the input has; an accepted model passes Validate, dumps to text that
// parses back to an equal model and dumps to the same text again (the round trip is exact); the
// derived groups cover every slot exactly once (node-local, fabric) and links between any two
// slots are positive where the model has them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "topology/groups.h"
#include "topology/topology_file.h"

using namespace braid;
using namespace braid::topo;

namespace {

void CheckRefusal(const Status& st, std::string_view text) {
  if (st.cls() != ErrorClass::kInvalidArgument) std::abort();
  const std::string& m = st.message();
  if (m.rfind("fuzz:", 0) != 0) std::abort();
  // "fuzz:<line>: ..." must name a line that exists (lines counted as the parser counts them).
  const char* p = m.c_str() + 5;
  if (*p >= '1' && *p <= '9') {
    char* end = nullptr;
    const unsigned long line = std::strtoul(p, &end, 10);
    size_t lines = 0;
    for (size_t pos = 0; pos < text.size(); ++lines) {
      size_t nl = text.find('\n', pos);
      pos = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    if (*end != ':' || line > lines) std::abort();
  }
}

void CheckGroups(const Topology& t) {
  const std::vector<Slot> slots = Slots(t);
  std::vector<int> seen(slots.size(), 0);
  for (const auto& g : NodeLocalGroups(t))
    for (int s : g) ++seen.at(s);
  for (int n : seen)
    if (n != 1) std::abort();
  std::fill(seen.begin(), seen.end(), 0);
  for (const auto& g : FabricSlotGroups(t))
    for (int s : g) ++seen.at(s);
  for (int n : seen)
    if (n != 1) std::abort();
  for (const auto& g : SameLocalRankGroups(t))
    if (g.empty()) std::abort();
  for (const auto& g : DeviceGroupGroups(t))
    if (g.size() < 2) std::abort();
  // A bounded sample of pairs: the first few slots against each other.
  const size_t k = std::min<size_t>(slots.size(), 8);
  for (size_t i = 0; i < k; ++i) {
    for (size_t j = 0; j < k; ++j) {
      const Slot a = slots[i], b = slots[j];
      auto link = LinkBetween(t, a.node, a.device, b.node, b.device);
      if (link && !(link->bandwidth > 0 && link->latency > 0)) std::abort();
      auto nic = PairNicType(t, a.node, b.node);
      if (nic.has_value() == (a.node == b.node)) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = ParseTopology(text, "fuzz");
  if (!t.ok()) {
    CheckRefusal(t.status(), text);
    return 0;
  }
  if (!Validate(*t).ok()) std::abort();
  const std::string dump = DumpTopology(*t);
  auto back = ParseTopology(dump, "dump");
  if (!back.ok() || !(*back == *t)) std::abort();
  if (DumpTopology(*back) != dump) std::abort();
  CheckGroups(*t);
  return 0;
}
