#include <algorithm>
#include <sstream>

#include "transport/transport.h"
#ifdef BRAID_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace braid {

const std::vector<TransportFactory*>& TransportFactories() {
  static const std::vector<TransportFactory*> all = [] {
    std::vector<TransportFactory*> v{ShmTransportFactory(), TcpTransportFactory()};
#ifdef BRAID_HAVE_UCX
    v.push_back(UcxTransportFactory());
#endif
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
#ifndef BRAID_HAVE_UCX
      if (name == "ucx")
        return InvalidArgument(
            "BRAID_TRANSPORTS: this build has no UCX transport (install libucx-dev and rebuild; "
            "known: " +
            known + ")");
#endif
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
