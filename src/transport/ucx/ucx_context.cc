#include "transport/ucx/ucx_context.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/base/log.h"

namespace braid::ucx {
namespace {

std::string KeyOf(const Config& config) {
  std::string key;
  for (const auto& [name, value] : config) key += (key.empty() ? "" : " ") + name + "=" + value;
  return key;
}

std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, std::weak_ptr<Context>>& Cache() {
  static auto* cache = new std::map<std::string, std::weak_ptr<Context>>();  // never destroyed:
  return *cache;  // contexts may be released during static destruction
}

}  // namespace

Result<std::shared_ptr<Context>> Context::Get(const Config& config) {
  BRAID_ASSIGN_OR_RETURN(const Library* lib, Load());
  const std::string key = KeyOf(config);
  std::lock_guard<std::mutex> lock(CacheMutex());
  if (auto live = Cache()[key].lock()) return live;

  ucp_config_t* cfg = nullptr;
  ucs_status_t st = lib->ucp_config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) return SystemError("ucx: reading UCX's configuration: " + StatusText(st));
  for (const auto& [name, value] : config) {
    // A UCX_* variable the user set wins over braid's choice (docs/transports.md).
    if (std::getenv(("UCX_" + name).c_str())) continue;
    st = lib->ucp_config_modify(cfg, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      lib->ucp_config_release(cfg);
      return InternalError("ucx: setting UCX_" + name + "=" + value + ": " + StatusText(st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  // Communicators of one process drive their own workers from their own threads.
  params.mt_workers_shared = 1;
  ucp_context_h ctx = nullptr;
  st = lib->ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, &ctx);
  lib->ucp_config_release(cfg);
  if (st != UCS_OK)
    return SystemError("ucx: ucp_init (" + (key.empty() ? std::string("defaults") : key) +
                       "): " + StatusText(st));
  std::shared_ptr<Context> c(new Context());
  c->lib_ = lib;
  c->ctx_ = ctx;
  c->key_ = key;
  c->memory_types_ = MemoryTypeBit(MemoryType::kHost);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (lib->ucp_context_query(ctx, &attr) == UCS_OK) {
    if (attr.memory_types & (uint64_t{1} << UCS_MEMORY_TYPE_CUDA))
      c->memory_types_ |= MemoryTypeBit(MemoryType::kCuda);
    if (attr.memory_types & (uint64_t{1} << UCS_MEMORY_TYPE_ROCM))
      c->memory_types_ |= MemoryTypeBit(MemoryType::kHip);
  }
  BRAID_TRACE("ucx: UCX %s context (%s)", lib->version, key.c_str());
  Cache()[key] = c;
  return c;
}

Context::~Context() {
  if (ctx_) lib_->ucp_cleanup(ctx_);
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto it = Cache().find(key_);
  if (it != Cache().end() && it->second.expired()) Cache().erase(it);
}

namespace {

Result<std::vector<Device>> ListDevices() {
  BRAID_ASSIGN_OR_RETURN(const Library* lib, Load());
  std::vector<Device> out;
  uct_component_h* components = nullptr;
  unsigned ncomponents = 0;
  ucs_status_t st = lib->uct_query_components(&components, &ncomponents);
  if (st != UCS_OK) return SystemError("ucx: uct_query_components: " + StatusText(st));
  for (unsigned c = 0; c < ncomponents; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (lib->uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (mds.empty() || lib->uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const auto& md_desc : mds) {
      uct_md_config_t* md_config = nullptr;
      if (lib->uct_md_config_read(components[c], nullptr, nullptr, &md_config) != UCS_OK) continue;
      uct_md_h md = nullptr;
      st = lib->uct_md_open(components[c], md_desc.md_name, md_config, &md);
      lib->uct_config_release(md_config);
      if (st != UCS_OK) continue;  // a device that cannot be opened is not one UCX can use
      uct_tl_resource_desc_t* tls = nullptr;
      unsigned ntls = 0;
      if (lib->uct_md_query_tl_resources(md, &tls, &ntls) == UCS_OK) {
        for (unsigned t = 0; t < ntls; ++t)
          out.push_back({tls[t].tl_name, tls[t].dev_name, tls[t].dev_type == UCT_DEVICE_TYPE_NET});
        lib->uct_release_tl_resource_list(tls);
      }
      lib->uct_md_close(md);
    }
  }
  lib->uct_release_component_list(components);
  return out;
}

}  // namespace

Result<std::vector<Device>> FoundDevices() {
  static std::once_flag once;
  static Result<std::vector<Device>> found = InternalError("ucx: devices not listed");
  std::call_once(once, [] { found = ListDevices(); });
  return found;
}

}  // namespace braid::ucx
