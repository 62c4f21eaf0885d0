// The topology this process runs on: the file BRAID_TOPO_FILE names when it is set (an emulated
// or described machine), else what discovery finds. NCCL_TOPO_FILE is not read: it names NCCL's
// XML (<system><cpu><pci>...), a different format with no NIC fabric types or levels; when it is
// set without BRAID_TOPO_FILE, a note says so instead of silently ignoring it.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "topology/topology.h"

namespace braid::topo {

struct LocalTopology {
  Topology topology;
  std::string source;              // "file <path>" or "discovered (<method>)"
  std::vector<std::string> notes;  // discovery's notes, and the NCCL_TOPO_FILE one
};

// A BRAID_TOPO_FILE that does not load is an error (naming the file and line), not a silent
// fallback to discovery: the user asked for that description.
Result<LocalTopology> LoadLocalTopology();

}  // namespace braid::topo
