// UCP contexts, shared per process, and the devices UCX finds.
//
// A UCP context holds UCX's configuration (which transports and devices it may use), its
// memory registrations and the transports' global resources. braid needs one per distinct
// configuration (a fabric route restricts UCX_NET_DEVICES, the net route excludes shared memory,
// ucx_fabric.h), not one per communicator: contexts are shared by every communicator (and
// worker) of the process that asks for the same configuration, and released when the last one
// goes, so a process that stops using braid holds no UCX thread, descriptor or mapping.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/memory_type.h"
#include "core/base/status.h"
#include "transport/ucx/ucx_fabric.h"
#include "transport/ucx/ucx_library.h"

namespace braid::ucx {

class Context {
 public:
  // The process's context for `config` (on top of the UCX_* environment), made on first use.
  static Result<std::shared_ptr<Context>> Get(const Config& config);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Library& lib() const { return *lib_; }
  ucp_context_h get() const { return ctx_; }
  // Memory this context's transports can move: host, and CUDA / ROCm where UCX was built with
  // them and finds the devices (its memory types).
  MemoryTypeMask memoryTypes() const { return memory_types_; }
  // "NET_DEVICES=mlx5_0:1 RNDV_THRESH=65536 ..." (for messages and braid-info).
  const std::string& describe() const { return key_; }

 private:
  Context() = default;
  const Library* lib_ = nullptr;
  ucp_context_h ctx_ = nullptr;
  MemoryTypeMask memory_types_ = 0;
  std::string key_;
};

// The devices UCX's transports find on this machine (every memory domain's transport resources),
// listed once per process. An error when UCX cannot be loaded.
Result<std::vector<Device>> FoundDevices();

}  // namespace braid::ucx
