#include "topology/local_topology.h"

#include <cstdlib>

#include "core/base/config.h"
#include "topology/discover.h"
#include "topology/topology_file.h"

namespace braid::topo {

Result<LocalTopology> LoadLocalTopology() {
  LocalTopology out;
  const char* path = nullptr;
  for (const ConfigVar& v : ConfigTable())
    if (std::string(v.name) == "BRAID_TOPO_FILE") path = ConfigEnv(v);
  const char* nccl = std::getenv("NCCL_TOPO_FILE");
  if (path && *path) {
    auto t = LoadTopologyFile(path);
    if (!t.ok()) return Status(t.status()).prepend("BRAID_TOPO_FILE: ");
    out.topology = std::move(*t);
    out.source = std::string("file ") + path;
    return out;
  }
  if (nccl && *nccl)
    out.notes.push_back(std::string("NCCL_TOPO_FILE=") + nccl +
                        " is not read: it is NCCL's XML format; describe the machine in braid's "
                        "format (docs/topology.md) and set BRAID_TOPO_FILE");
  BRAID_ASSIGN_OR_RETURN(Discovery d, Discover());
  out.topology = std::move(d.topology);
  out.source = "discovered (" + d.method + ")";
  out.notes.insert(out.notes.end(), d.notes.begin(), d.notes.end());
  return out;
}

}  // namespace braid::topo
