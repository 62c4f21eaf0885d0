// What the multi-rank tests of the NCCL shim share (device_stream_test, peer_windows_test,
// window_collectives_test: the shim's objects linked into the test, so that its device runtime is
// the test's): a job whose ranks each join an NCCL communicator themselves, on the device
// BRAID_DEVICE names.
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "device/cpu/emulated_device.h"
#include "multirank/harness.h"
#include "nccl.h"

namespace braid_test::shim {

// `nranks` ranks with BRAID_DEVICE=`device` (and `env`), each calling ncclCommInitRank itself.
inline JobOptions Job(int nranks, const char* device, int timeout_s = 60,
                      const std::vector<std::pair<std::string, std::string>>& env = {}) {
  JobOptions o;
  o.nranks = nranks;
  o.timeout_s = timeout_s;
  o.init = false;
  o.env = {{"BRAID_DEVICE", device}};
  for (const auto& e : env) o.env.push_back(e);
  return o;
}

// Joins the job's communicator through the NCCL API (the job's braid id as the NCCL id).
inline int JoinNccl(const braidUniqueId& id, int rank, int nranks, ncclComm_t* comm) {
  ncclUniqueId nid;
  static_assert(sizeof(nid) == sizeof(id));
  std::memcpy(&nid, &id, sizeof(nid));
  CHECK_OR_FAIL_WITH(ncclGetLastError(nullptr),
                     ncclCommInitRank(comm, nranks, nid, rank) == ncclSuccess, "init");
  return 0;
}

// JoinNccl, and the shim's emulated device into *dev.
inline int InitNccl(const braidUniqueId& id, int rank, int nranks, ncclComm_t* comm,
                    braid::device::EmulatedDevice** dev) {
  if (JoinNccl(id, rank, nranks, comm) != 0) return 1;
  *dev = dynamic_cast<braid::device::EmulatedDevice*>(braid::device::ActiveDeviceRuntime());
  CHECK_OR_FAIL_WITH(ncclGetLastError(nullptr), *dev != nullptr,
                     "BRAID_DEVICE=emulated did not select the emulated device");
  return 0;
}

}  // namespace braid_test::shim
