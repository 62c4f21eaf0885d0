// The UCX transport (DESIGN.md 2.3): InfiniBand and RoCE through UCX, and UCX's own TCP and
// shared-memory transports where ucx is forced (BRAID_TRANSPORTS=ucx), which is how this machine,
// with no RDMA device, runs the same code.
//
// Per communicator: one UCX worker per route it needs (ucx_fabric.h), on a UCP context shared by
// the process (ucx_context.h); the workers' addresses travel in the blob; endpoints are made from
// them when a channel is first used (UCX connects on its own, so BRAID_LAZY_CONNECT=1 costs no
// extra round trip; with 0 every peer's UCP endpoint is made at init). The streams and messages
// are ucx_endpoint.h's. UcxTransportFactory() is the entry point; this header exposes it and the
// blob format, as tcp_transport.h and shm_transport.h do.
#pragma once

#include <optional>
#include <string>

#include "core/base/status.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_fabric.h"

namespace braid {

// The UCX transport's factory (registry.cc lists it in a build with UCX: BRAID_HAVE_UCX).
TransportFactory* UcxTransportFactory();

namespace ucx {

// What a rank tells the others: "ucx1 ib=<hex address> net=<hex address>", one worker address
// per route it has; "" when it has none (then no pair uses UCX with it).
struct Blob {
  std::string addresses[kNumRoutes];  // binary UCX worker addresses; empty: no such route
  RouteMask routes() const;
};
std::string EncodeBlob(const Blob& blob);
// An InvalidArgument for anything that is not such a blob (another transport's, garbage).
Result<Blob> DecodeBlob(const std::string& text);

// What this process's UCX offers, for braid-info: its version and devices, or why it has none.
std::string DescribeUcx();

}  // namespace ucx
}  // namespace braid
