#include "transport/ucx/ucx_transport.h"

#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "core/base/log.h"
#include "core/net/socket.h"
#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_endpoint.h"
#include "transport/ucx/ucx_worker.h"

namespace braid {
namespace ucx {
namespace {

constexpr const char* kBlobPrefix = "ucx1";
// A UCX worker address is a few hundred bytes (one entry per transport and device); anything
// far larger in a peer's blob is not one.
constexpr size_t kMaxAddressBytes = 64 << 10;

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A fabric whose NICs UCX does not find: said once per process and fabric (every communicator
// of the process would say the same).
void SayFallbackOnce(Route route, int rank, const std::string& why) {
  static std::mutex mu;
  static std::set<int> said;
  std::lock_guard<std::mutex> lock(mu);
  if (!said.insert(static_cast<int>(route)).second) return;
  BRAID_WARN("ucx: rank %d: %s pairs use tcp: %s", rank, RouteName(route), why.c_str());
}

class Instance final : public TransportInstance {
 public:
  explicit Instance(const TransportContext& ctx) : ctx_(ctx) {}

  Status init(bool forced) {
    const RouteMask want = WantedRoutes(ctx_, forced);
    const std::string where = "ucx: rank " + std::to_string(ctx_.rank);
    for (int i = 0; i < kNumRoutes; ++i) {
      const Route route = static_cast<Route>(i);
      if (!(want & RouteBit(route))) continue;
      Config config = CommonConfig(route, Endpoint::kInPlaceBytes);
      if (route == Route::kInfiniBand || route == Route::kRoCE) {
        auto found = FoundDevices();
        if (!found.ok()) {
          SayFallbackOnce(route, ctx_.rank, found.status().message());
          continue;
        }
        FabricPlan plan = PlanFabric(route, ctx_.local_nics, *found);
        if (plan.devices.empty()) {
          SayFallbackOnce(route, ctx_.rank, plan.why_not);
          continue;
        }
        for (auto& kv : RouteConfig(route, &plan)) config.push_back(kv);
      } else if (route == Route::kNetwork) {
        // BRAID_SOCKET_IFNAME's interface, as braid's own sockets pick it (a prefix, exclusions);
        // else every interface UCX finds but loopback.
        std::string ifname;
        if (!ctx_.socket_ifname.empty())
          if (auto itf = SelectInterface(ctx_.socket_ifname); itf.ok()) ifname = itf->ifname;
        std::vector<Device> none;
        auto found = ifname.empty() ? FoundDevices() : Result<std::vector<Device>>(none);
        if (!found.ok()) return found.status();
        for (auto& kv : RouteConfig(route, nullptr, *found, ifname)) config.push_back(kv);
      } else {
        for (auto& kv : RouteConfig(route, nullptr)) config.push_back(kv);
      }
      auto context = Context::Get(config);
      if (!context.ok()) {
        if (forced) return context.status();
        SayFallbackOnce(route, ctx_.rank, context.status().message());
        continue;
      }
      BRAID_ASSIGN_OR_RETURN(workers_[i],
                             Worker::Create(std::move(*context), route, where, ctx_.doorbell_name));
      blob_.addresses[i] = workers_[i]->address();
    }
    for (auto& w : workers_) {
      if (!w) continue;
      std::vector<Worker*> others;
      for (auto& o : workers_)
        if (o && o != w) others.push_back(o.get());
      w->setSiblings(std::move(others));
    }
    return Status::Ok();
  }

  ~Instance() override {
    for (auto& w : workers_) w.reset();
  }

  const char* name() const override { return "ucx"; }

  std::string localBlob() const override {
    return blob_.routes() ? EncodeBlob(blob_) : std::string();
  }

  bool canConnect(int peer, const std::vector<std::string>& blobs) const override {
    return routeTo(peer, blobs).has_value();
  }

  Status connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                 Deadline deadline,
                 std::vector<std::vector<std::unique_ptr<braid::Endpoint>>>* out) override {
    (void)deadline;  // nothing here waits: UCX connects in the background
    const std::string who = "ucx: rank " + std::to_string(ctx_.rank) + ": ";
    out->clear();
    out->resize(peers.size());
    for (size_t i = 0; i < peers.size(); ++i) {
      const int p = peers[i];
      auto route = routeTo(p, blobs);
      if (!route)
        return InvalidArgument(who + "connect(): rank " + std::to_string(p) +
                               " is not a UCX peer (canConnect was false)");
      auto theirs = DecodeBlob(blobs[static_cast<size_t>(p)]);
      Worker* w = workers_[static_cast<int>(*route)].get();
      PeerInfo info;
      info.rank = p;
      const RankInfo& r = ctx_.ranks[static_cast<size_t>(p)];
      info.pid = r.pid;
      info.host = r.hostname;
      info.same_host = r.host_id == ctx_.ranks[static_cast<size_t>(ctx_.rank)].host_id;
      info.address = theirs->addresses[static_cast<int>(*route)];
      info.causes = ctx_.causes;
      auto link = std::make_shared<PeerLink>(w, std::move(info), ctx_.nchannels);
      if (!ctx_.lazy_connect) {
        std::lock_guard<std::mutex> lock(w->mu());
        for (int c = 0; c < ctx_.nchannels; ++c) {
          auto ep = link->ep(c);
          if (!ep.ok()) return ep.status();
        }
      }
      for (int c = 0; c < ctx_.nchannels; ++c) {
        auto ep = std::make_unique<Endpoint>(w, link, ctx_.rank, c);
        ep->setTransport(this);
        (*out)[i].push_back(std::move(ep));
      }
    }
    return Status::Ok();
  }

  MemoryTypeMask memoryTypes() const override {
    MemoryTypeMask m = ~MemoryTypeMask{0};
    bool any = false;
    for (const auto& w : workers_)
      if (w) {
        m &= w->context().memoryTypes();
        any = true;
      }
    return any ? m : MemoryTypeBit(MemoryType::kHost);
  }

  Result<std::unique_ptr<MemoryRegistration>> registerMemory(void* base, size_t bytes,
                                                             MemoryType type) override {
    // The type and argument checks of every transport.
    BRAID_RETURN_IF_ERROR(TransportInstance::registerMemory(base, bytes, type).status());
    auto reg = std::make_unique<Registration>(this, base, bytes, type);
    if (bytes == 0) return std::unique_ptr<MemoryRegistration>(std::move(reg));
    std::vector<std::shared_ptr<Context>> contexts;
    for (const auto& w : workers_) {
      if (!w) continue;
      const Context* c = &w->context();
      bool seen = false;
      for (const auto& m : reg->mappings) seen = seen || m.context.get() == c;
      if (seen) continue;
      ucp_mem_map_params_t params{};
      params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                          UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
      params.address = base;
      params.length = bytes;
      params.memory_type = type == MemoryType::kCuda  ? UCS_MEMORY_TYPE_CUDA
                           : type == MemoryType::kHip ? UCS_MEMORY_TYPE_ROCM
                                                      : UCS_MEMORY_TYPE_HOST;
      ucp_mem_h memh = nullptr;
      const ucs_status_t st = c->lib().ucp_mem_map(c->get(), &params, &memh);
      if (st != UCS_OK)
        return SystemError("ucx: registering " + std::to_string(bytes) +
                           " bytes (ucp_mem_map): " + StatusText(st));
      reg->mappings.push_back({w->contextRef(), memh});
    }
    return std::unique_ptr<MemoryRegistration>(std::move(reg));
  }

 private:
  std::optional<Route> routeTo(int peer, const std::vector<std::string>& blobs) const {
    const size_t me = static_cast<size_t>(ctx_.rank);
    if (peer < 0 || static_cast<size_t>(peer) >= blobs.size() || me >= blobs.size() ||
        static_cast<size_t>(peer) >= ctx_.ranks.size() || me >= ctx_.ranks.size())
      return std::nullopt;
    auto mine = DecodeBlob(blobs[me]);
    auto theirs = DecodeBlob(blobs[static_cast<size_t>(peer)]);
    if (!mine.ok() || !theirs.ok()) return std::nullopt;
    auto route = ChooseRoute(ctx_.ranks[me], mine->routes(), ctx_.ranks[static_cast<size_t>(peer)],
                             theirs->routes());
    if (route && !workers_[static_cast<int>(*route)]) return std::nullopt;
    return route;
  }

  TransportContext ctx_;
  std::unique_ptr<Worker> workers_[kNumRoutes];
  Blob blob_;
};

class Factory final : public TransportFactory {
 public:
  const char* name() const override { return "ucx"; }
  // Between shm (200), which serves a node's pairs unless ucx is forced, and tcp (100), which
  // every pair UCX does not serve falls back to.
  int priority() const override { return 150; }

  Result<std::unique_ptr<TransportInstance>> create(const TransportContext& ctx) override {
    if (ctx.nranks > kMaxRanks || ctx.nchannels < 1 || ctx.nchannels > kMaxChannels ||
        ctx.rank < 0 || ctx.rank >= ctx.nranks)
      return InvalidArgument("ucx: bad context (rank " + std::to_string(ctx.rank) + " of " +
                             std::to_string(ctx.nranks) + ", " + std::to_string(ctx.nchannels) +
                             " channels; UCX tags hold at most " + std::to_string(kMaxRanks) +
                             " ranks and " + std::to_string(kMaxChannels) + " channels)");
    auto inst = std::make_unique<Instance>(ctx);
    BRAID_RETURN_IF_ERROR(inst->init(NamedIn(ctx.transports)));
    return std::unique_ptr<TransportInstance>(std::move(inst));
  }
};

}  // namespace

RouteMask Blob::routes() const {
  RouteMask m = 0;
  for (int i = 0; i < kNumRoutes; ++i)
    if (!addresses[i].empty()) m |= RouteBit(static_cast<Route>(i));
  return m;
}

std::string EncodeBlob(const Blob& blob) {
  std::string out = kBlobPrefix;
  for (int i = 0; i < kNumRoutes; ++i)
    if (!blob.addresses[i].empty())
      out += std::string(" ") + RouteName(static_cast<Route>(i)) + "=" + Hex(blob.addresses[i]);
  return out;
}

Result<Blob> DecodeBlob(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word != kBlobPrefix) return InvalidArgument("not a ucx transport address");
  Blob blob;
  while (in >> word) {
    const size_t eq = word.find('=');
    auto route = RouteByName(word.substr(0, eq));
    if (eq == std::string::npos || !route)
      return InvalidArgument("ucx address: unknown route in '" + word.substr(0, 32) + "'");
    const std::string hex = word.substr(eq + 1);
    if (hex.empty() || hex.size() % 2 || hex.size() / 2 > kMaxAddressBytes)
      return InvalidArgument("ucx address: bad length for route " + word.substr(0, eq));
    std::string bytes(hex.size() / 2, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) {
      const int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) return InvalidArgument("ucx address: not hexadecimal");
      bytes[i] = static_cast<char>(hi * 16 + lo);
    }
    if (!blob.addresses[static_cast<int>(*route)].empty())
      return InvalidArgument("ucx address: route " + word.substr(0, eq) + " twice");
    blob.addresses[static_cast<int>(*route)] = std::move(bytes);
  }
  return blob;
}

std::string DescribeUcx() {
  auto lib = Load();
  if (!lib.ok()) return "not available: " + lib.status().message();
  std::string s = std::string("UCX ") + (*lib)->version;
  auto found = FoundDevices();
  if (!found.ok()) return s + "; devices unknown: " + found.status().message();
  s += ", devices:";
  for (const Device& d : *found) s += " " + d.transport + "/" + d.name;
  return s;
}

}  // namespace ucx

TransportFactory* UcxTransportFactory() {
  static ucx::Factory factory;
  return &factory;
}

}  // namespace braid
