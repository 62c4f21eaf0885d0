#include "device/ipc_probe.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace braid::device {

namespace {

// 2 MiB: CUDA maps IPC allocations at that granularity anyway, and a smaller cuMemAlloc may share
// a 2 MiB page with the program's own allocations (which would then be mapped by the peers).
constexpr size_t kProbeBytes = size_t{2} << 20;

std::string Hex(const IpcHandle& h) {
  std::string s(IpcHandle::kBytes * 2, '0');
  for (size_t i = 0; i < IpcHandle::kBytes; ++i) std::snprintf(&s[2 * i], 3, "%02x", h.bytes[i]);
  return s;
}

bool FromHex(const std::string& s, IpcHandle* h) {
  if (s.size() != IpcHandle::kBytes * 2) return false;
  for (size_t i = 0; i < IpcHandle::kBytes; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    h->bytes[i] = static_cast<unsigned char>(v);
  }
  return true;
}

}  // namespace

IpcProbe IpcProbe::Make(DeviceRuntime* runtime, void* context) {
  IpcProbe p;
  if (!runtime || !runtime->peerReduceAvailable() || runtime->deviceMemoryHostAccessible())
    return p;
  if (!runtime->useContext(context).ok()) return p;
  auto a = runtime->allocDevice(kProbeBytes);
  if (!a.ok()) return p;
  auto h = runtime->exportAllocation(*a);
  if (!h.ok()) {
    (void)runtime->freeDevice(*a);
    return p;
  }
  p.runtime_ = runtime;
  p.context_ = context;
  p.allocation_ = *a;
  auto info = runtime->classify(*a);
  p.text_ = Hex(*h) + "@" + std::to_string(info.ok() ? info->device : -1);
  return p;
}

IpcProbe::~IpcProbe() {
  reset();
}

IpcProbe::IpcProbe(IpcProbe&& o) noexcept {
  *this = std::move(o);
}

IpcProbe& IpcProbe::operator=(IpcProbe&& o) noexcept {
  if (this != &o) {
    reset();
    runtime_ = std::exchange(o.runtime_, nullptr);
    context_ = std::exchange(o.context_, nullptr);
    allocation_ = std::exchange(o.allocation_, nullptr);
    text_ = std::exchange(o.text_, std::string());
  }
  return *this;
}

Status IpcProbe::tryOpen(const std::string& peer_text) const {
  IpcHandle h;
  if (!runtime_) return InvalidUsage("no device IPC probe on this rank");
  if (!FromHex(peer_text.substr(0, peer_text.find('@')), &h))
    return InvalidArgument("a malformed device IPC probe");
  BRAID_RETURN_IF_ERROR(runtime_->useContext(context_));
  BRAID_ASSIGN_OR_RETURN(void* base, runtime_->openPeerAllocation(h));
  return runtime_->closePeerAllocation(base);
}

int IpcProbe::DeviceOf(const std::string& text) {
  const size_t at = text.find('@');
  if (at == std::string::npos) return -1;
  return std::atoi(text.c_str() + at + 1);
}

void IpcProbe::reset() {
  if (allocation_ && runtime_) {
    if (runtime_->useContext(context_).ok()) (void)runtime_->freeDevice(allocation_);
  }
  allocation_ = nullptr;
  runtime_ = nullptr;
  text_.clear();
}

}  // namespace braid::device
