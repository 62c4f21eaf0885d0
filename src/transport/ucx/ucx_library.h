// The UCX libraries (libucp, libuct, libucs), loaded when a communicator first needs them.
//
// braid is compiled against UCX's headers but does not link UCX: linking would load libucs into
// every process that links braid, and libucs installs its own SIGSEGV/SIGBUS/SIGILL/SIGFPE
// handlers (UCX_HANDLE_ERRORS=bt) when it loads, replacing the application's and the
// sanitizers'. Loaded on first use instead, only by processes that run the UCX transport, and the
// signal dispositions the process had before are put back (unless the user set
// UCX_HANDLE_ERRORS, asking for UCX's). A binary built with UCX also runs where UCX is not
// installed: the transport is then unavailable, with a message saying why.
#pragma once

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "core/base/status.h"

namespace braid::ucx {

// Every UCX function braid calls (ucp_init is an inline wrapper of ucp_init_version).
#define BRAID_UCX_FUNCTIONS(X)  \
  X(ucp_config_read)            \
  X(ucp_config_modify)          \
  X(ucp_config_release)         \
  X(ucp_init_version)           \
  X(ucp_cleanup)                \
  X(ucp_context_query)          \
  X(ucp_worker_create)          \
  X(ucp_worker_destroy)         \
  X(ucp_worker_get_address)     \
  X(ucp_worker_release_address) \
  X(ucp_worker_get_efd)         \
  X(ucp_worker_arm)             \
  X(ucp_worker_progress)        \
  X(ucp_ep_create)              \
  X(ucp_ep_close_nbx)           \
  X(ucp_ep_flush_nbx)           \
  X(ucp_tag_send_nbx)           \
  X(ucp_tag_recv_nbx)           \
  X(ucp_tag_probe_nb)           \
  X(ucp_tag_msg_recv_nbx)       \
  X(ucp_request_check_status)   \
  X(ucp_tag_recv_request_test)  \
  X(ucp_request_cancel)         \
  X(ucp_request_free)           \
  X(ucp_mem_map)                \
  X(ucp_mem_unmap)              \
  X(ucp_get_version_string)     \
  X(ucs_status_string)          \
  X(uct_query_components)       \
  X(uct_release_component_list) \
  X(uct_component_query)        \
  X(uct_md_config_read)         \
  X(uct_config_release)         \
  X(uct_md_open)                \
  X(uct_md_close)               \
  X(uct_md_query_tl_resources)  \
  X(uct_release_tl_resource_list)

struct Library {
#define BRAID_UCX_MEMBER(name) decltype(&::name) name = nullptr;
  BRAID_UCX_FUNCTIONS(BRAID_UCX_MEMBER)
#undef BRAID_UCX_MEMBER
  const char* version = "";  // ucp_get_version_string()
};

// The loaded libraries (once per process; thread-safe), or why they could not be loaded.
Result<const Library*> Load();

// "Endpoint timeout" for a status (the text of ucs_status_string; a number before UCX loaded).
std::string StatusText(ucs_status_t status);

}  // namespace braid::ucx
