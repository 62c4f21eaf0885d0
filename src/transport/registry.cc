#include <algorithm>
#include <sstream>

#include "transport/transport.h"

namespace braid {

const std::vector<TransportFactory*>& TransportFactories() {
  static const std::vector<TransportFactory*> all = [] {
    std::vector<TransportFactory*> v{ShmTransportFactory(), TcpTransportFactory()};
    std::stable_sort(v.begin(), v.end(),
                     [](auto* a, auto* b) { return a->priority() > b->priority(); });
    return v;
  }();
  return all;
}

Result<std::vector<TransportFactory*>> SelectTransports(const std::string& list) {
  if (list.empty()) return TransportFactories();
  std::vector<TransportFactory*> chosen;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    TransportFactory* found = nullptr;
    for (auto* f : TransportFactories())
      if (name == f->name()) found = f;
    if (!found) {
      std::string known;
      for (auto* f : TransportFactories())
        known += std::string(known.empty() ? "" : ", ") + f->name();
      return InvalidArgument("BRAID_TRANSPORTS: unknown transport '" + name + "' (known: " + known +
                             ")");
    }
    chosen.push_back(found);
  }
  if (chosen.empty())
    return InvalidArgument("BRAID_TRANSPORTS: empty transport list '" + list + "'");
  std::stable_sort(chosen.begin(), chosen.end(),
                   [](auto* a, auto* b) { return a->priority() > b->priority(); });
  return chosen;
}

}  // namespace braid
