#include "core/runtime/comm.h"

#include <arpa/inet.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "algorithms/link_profile.h"
#include "build_info.h"
#include "core/net/bootstrap.h"
#include "core/runtime/comm_registry.h"
#include "core/runtime/engine.h"
#include "core/runtime/placement.h"
#include "core/runtime/wire_header.h"
#include "device/device_runtime.h"
#include "transport/cross_memory.h"
#include "core/base/cpus.h"
#include "core/base/log.h"

namespace braid {

Status ValidateCommOptions(CommOptions& o);

Result<CommOptions> MakeCommOptions(const braidConfig_t* config) {
  CommOptions o;
  BRAID_ASSIGN_OR_RETURN(o.config, LoadConfigFromEnv());
  if (!config) {
    BRAID_RETURN_IF_ERROR(ValidateCommOptions(o));
    return o;
  }
  // Fields only grow at the end: read those the caller's struct has.
  auto has = [&](size_t end) { return config->size >= end; };
  if (config->size < offsetof(braidConfig_t, blocking) + sizeof(int))
    return InvalidArgument("braidConfig_t.size is " + std::to_string(config->size) +
                           ": initialise the struct with BRAID_CONFIG_INITIALIZER");
  if (config->blocking != 0 && config->blocking != 1)
    return InvalidArgument("braidConfig_t.blocking must be 0 or 1, not " +
                           std::to_string(config->blocking));
  o.blocking = config->blocking != 0;
  if (has(offsetof(braidConfig_t, timeout_ms) + sizeof(int64_t))) {
    if (config->timeout_ms < 0)
      return InvalidArgument("braidConfig_t.timeout_ms must be >= 0 (0 = BRAID_TIMEOUT), not " +
                             std::to_string(config->timeout_ms));
    if (config->timeout_ms > 0) o.config.timeout_ms = config->timeout_ms;
  }
  if (has(offsetof(braidConfig_t, transports) + sizeof(char*)) && config->transports)
    o.config.transports = config->transports;
  if (has(offsetof(braidConfig_t, algorithms) + sizeof(char*)) && config->algorithms) {
    o.config.algo = config->algorithms;
    o.config.algo_from_nccl = false;
  }
  if (has(offsetof(braidConfig_t, splitShare) + sizeof(int))) {
    if (config->splitShare < -1 || config->splitShare > 1)
      return InvalidArgument(
          "braidConfig_t.splitShare must be -1 (BRAID_SPLIT_SHARE), 0 or 1, not " +
          std::to_string(config->splitShare));
    if (config->splitShare >= 0) o.config.split_share = config->splitShare == 1;
  }
  BRAID_RETURN_IF_ERROR(ValidateCommOptions(o));
  return o;
}

Status ValidateCommOptions(CommOptions& o) {
  // Checked before the rendezvous so a typo fails at once instead of consuming the unique id.
  auto transports = SelectTransports(o.config.transports);
  if (!transports.ok()) return transports.status();
  if (!o.config.algo.empty()) {
    auto rules = ParseTunerOverride(o.config.algo);
    if (!rules.ok()) {
      // Clusters set NCCL_ALGO for NVIDIA's library ("^NVLS", "CollnetDirect"): braid must not
      // refuse to start over a setting that was never meant for it. BRAID_ALGO stays strict.
      if (!o.config.algo_from_nccl) return Status(rules.status()).prepend("BRAID_ALGO: ");
      BRAID_WARN("ignoring NCCL_ALGO='%s' (%s); set BRAID_ALGO to choose braid's algorithms",
                 o.config.algo.c_str(), rules.status().message().c_str());
      o.config.algo.clear();
      o.config.algo_from_nccl = false;
    }
  }
  return Status::Ok();
}

namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// Node identity: BRAID_HOSTID, else hostname + boot id + network namespace. Two ranks with the
// same id share /dev/shm and loopback; containers on one host with their own network namespaces
// get different ids and so never use shared memory with each other by mistake.
std::string HostId(const Config& cfg, const std::string& hostname) {
  if (!cfg.host_id.empty()) return cfg.host_id;
  struct stat st {};
  std::string netns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "?";
  return hostname + "/" + ReadFirstLine("/proc/sys/kernel/random/boot_id") + "/" + netns;
}

// Length-prefixed fields, so values may hold any byte.
void PutField(std::string* out, const std::string& v) {
  uint32_t n = static_cast<uint32_t>(v.size());
  out->append(reinterpret_cast<const char*>(&n), sizeof(n));
  out->append(v);
}

Result<std::vector<std::string>> SplitFields(const std::string& in, int peer) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < in.size()) {
    uint32_t n;
    if (in.size() - pos < sizeof(n))
      return RemoteError("malformed init message from rank " + std::to_string(peer));
    std::memcpy(&n, in.data() + pos, sizeof(n));
    pos += sizeof(n);
    if (n > in.size() - pos)
      return RemoteError("malformed init message from rank " + std::to_string(peer));
    out.emplace_back(in.substr(pos, n));
    pos += n;
  }
  return out;
}

}  // namespace

}  // namespace braid

using namespace braid;

braidComm::braidComm() = default;

braidComm::~braidComm() {
  // Nobody can use this communicator any more: a pending init stops instead of running out its
  // deadline.
  abortInit();
  if (init_thread_.joinable()) init_thread_.join();
  if (root_) {
    // The root's engine may still hold operations of this view (after an abort they complete
    // within a sweep); they point at this object, so it must outlive them.
    abortOperations(AbortedError("split communicator destroyed on " + where()));
    while (!waitOwnOps(Deadline::After(opts_.config.timeout_ms)))
      BRAID_WARN("%s: waiting for operations of a destroyed split communicator to end",
                 where().c_str());
    root_.reset();  // may release the root (and join its engine) on this thread
    return;
  }
  {
    // The control listener still serves until the members go: it stops reading the engine.
    std::lock_guard<std::mutex> lock(listener_engine_mu_);
    listener_may_read_engine_ = false;
  }
  engine_.reset();     // joins the progress thread before the endpoints it uses go away
  endpoints_.clear();  // before the transports that made them
  board_ = nullptr;
  transports_.clear();
}

Status braidComm::init(const UniqueIdData& id, int rank, int nranks, const CommOptions& opts) {
  opts_ = opts;
  rank_ = rank;
  nranks_ = nranks;
  secret_.assign(id.secret.begin(), id.secret.end());
  if (id.root.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&id.root);
    loopback_root_ = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  SetLogRank(rank);
  // Abortable: braidCommAbort / braidCommDestroy of a pending init end every wait below within
  // kAbortCheckMs instead of the BRAID_TIMEOUT the deadline allows.
  Deadline deadline = Deadline::After(opts_.config.timeout_ms).abortableBy(&init_aborted_);
  // Once the init was aborted, whatever wait ended did so because of it (a wait that is not
  // abortable reports a timeout or the peer's reaction).
  auto failed = [this](Status st) {
    if (!init_aborted_.load(std::memory_order_acquire) || st.cls() == ErrorClass::kAborted)
      return st;
    return AbortedError(st.message() +
                        " (the init was aborted by braidCommAbort or braidCommDestroy)");
  };
  auto bs = Bootstrap::Connect(id, rank, nranks, deadline);
  if (!bs.ok())
    return failed(
        Status(bs.status())
            .prepend("rank " + std::to_string(rank) + "/" + std::to_string(nranks) + ": init: "));
  // The service's nonce names this communicator (ids built from the environment carry none).
  tag_ = HexOf((*bs)->commNonce().data(), 8);
  Status st = exchangeRankInfo(**bs, deadline);
  if (st.ok()) st = connectTransports(**bs, deadline);
  if (st.ok()) st = calibrateLinks(**bs, deadline);
  if (!st.ok()) return failed(st.prepend(where() + ": init: "));

  auto tuner = Tuner::Create(opts_.config.algo, nranks_, links_.model, &layout_);
  if (!tuner.ok()) return Status(tuner.status()).prepend(where() + ": BRAID_ALGO: ");
  tuner_ = std::make_unique<Tuner>(std::move(*tuner));
  numbers_.p2p_send.assign(nranks_, 0);
  numbers_.p2p_recv.assign(nranks_, 0);
  engine_ = std::make_unique<Engine>(this);
  InstallLeaveAtExit();
  if (rank_ == 0) {
    BRAID_INFO("%s", describe().c_str());
    BRAID_INFO("%s", fabricSummary().c_str());
  }
  return Status::Ok();
}

Status braidComm::exchangeRankInfo(Bootstrap& bs, Deadline deadline) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const Config& c = opts_.config;
  // The control listener binds where the rendezvous root lives: loopback for a loopback root,
  // else the selected interface (never the wildcard).
  InterfaceAddress ifa = LoopbackInterface();
  if (!loopback_root_) {
    auto sel = SelectInterface(c.socket_ifname);
    if (!sel.ok()) return sel.status();
    ifa = *sel;
  }
  SetAddressPort(&ifa.addr, 0);
  // Served from now until destroy (strangers on it go within a second); braidCommShrink's
  // survivors take the leader's connection from it.
  const std::string control_name =
      "rank " + std::to_string(rank_) + "/" + std::to_string(nranks_) + " control listener";
  // Failure notices and liveness probes are answered on the listener's thread (a stopped or
  // busy engine must not delay them); other purposes (a shrink) wait for next().
  auto serve = [this](const HandshakeHello& h, int fd) {
    return ServeFailureControl(
        h, fd, nranks_, &causes_,
        [this]() -> uint64_t {
          // (kReady is stored after the engine exists)
          std::lock_guard<std::mutex> lock(listener_engine_mu_);
          return listener_may_read_engine_ && state() == State::kReady && engine()
                     ? engine()->collsIssued()
                     : kIssuedCallsUnknown;
        },
        [this](int asker) {
          std::lock_guard<std::mutex> lock(listener_engine_mu_);
          return listener_may_read_engine_ && state() == State::kReady && engine() &&
                 engine()->p2pBlockedOn(asker);
        });
  };
  BRAID_ASSIGN_OR_RETURN(control_, HandshakeListener::Start(ifa.addr, secret_, nullptr,
                                                            control_name, std::move(serve)));
  sockaddr_storage control_addr = control_->address();
  for (int i = 0; i < 2; ++i) notice_reserve_.push_back(OpenSpareFd());
  // Where this rank sits on the topology (BRAID_TOPO_FILE or discovery): its node's NICs.
  // A rank that cannot place itself still takes part in the exchange, with its error, so that
  // every rank fails alike instead of waiting for it.
  auto placement = LocalPlacement(c.host_id, host);
  std::string mine;
  PutField(&mine, BRAID_VERSION_STRING);
  PutField(&mine, std::to_string(getpid()));
  PutField(&mine, host);
  PutField(&mine, HostId(c, host));
  PutField(&mine, std::to_string(c.nchannels));
  PutField(&mine, std::to_string(c.chunk_bytes));
  PutField(&mine, c.algo);
  PutField(&mine, std::string(reinterpret_cast<const char*>(&control_addr), sizeof(control_addr)));
  PutField(&mine, placement.ok() ? std::to_string(placement->nic_types) + "," +
                                       std::to_string(placement->fabric)
                                 : "error:" + placement.status().message());
  // The node's device groups, so every rank can bind every rank to a device once it knows the
  // local ranks (after this exchange).
  std::string groups;
  if (placement.ok())
    for (const auto& g : placement->device_groups) PutField(&groups, g);
  PutField(&mine, groups);
  PutField(&mine, std::to_string(c.oneshot_bytes));
  PutField(&mine, AffinityMaskHex());
  PutField(&mine, c.lazy_connect ? "1" : "0");
  // The device-group link of this rank's node (rank 0's is the cost model's, so that every rank's
  // tuner ranks the 3-level algorithms alike).
  char group_link[64] = "";
  if (placement.ok() && placement->group_bandwidth > 0)
    std::snprintf(group_link, sizeof(group_link), "%.17g,%.17g", placement->group_latency_s,
                  placement->group_bandwidth);
  PutField(&mine, group_link);
  PutField(&mine, std::to_string(c.board_two_shot));
  // Where a peer of this host may read this process's memory to learn whether it can at all
  // (braidComm::connectTransports), and the size from which the board reads by reference.
  const CrossMemoryProbe probe = LocalCrossMemoryProbe();
  char probe_text[40];
  std::snprintf(probe_text, sizeof(probe_text), "%llx,%llx",
                static_cast<unsigned long long>(probe.address),
                static_cast<unsigned long long>(probe.value));
  PutField(&mine, probe_text);
  PutField(&mine, std::to_string(c.single_copy_bytes));
  // The interface of this rank's TCP traffic (the tcp transport's choice), so that every rank
  // counts the NICs each node's ranks use alike.
  std::string nic = loopback_root_ ? "" : ifa.ifname;
  if (loopback_root_)
    if (auto sel = SelectInterface(c.socket_ifname); sel.ok()) nic = sel->ifname;
  PutField(&mine, nic);
  // The piece size of the NCCL shim's large element-wise calls: every rank must cut alike.
  PutField(&mine, std::to_string(c.staging_chunk_bytes));
  // A device allocation the other processes of this node try to map (device/ipc_probe.h).
  if (c.device_ipc)
    ipc_probe_ = device::IpcProbe::Make(device::ActiveDeviceRuntime(), opts_.device_context);
  PutField(&mine, ipc_probe_.text());
  BRAID_ASSIGN_OR_RETURN(auto all, bs.allGather(mine, deadline));
  infos_.resize(nranks_);
  std::vector<std::vector<std::string>> fields(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    BRAID_ASSIGN_OR_RETURN(fields[r], SplitFields(all[r], r));
    if (fields[r].size() < 10 || fields[r][7].size() != sizeof(sockaddr_storage))
      return RemoteError("malformed init message from rank " + std::to_string(r));
    if (fields[r][0] != BRAID_VERSION_STRING)
      return InvalidUsage("rank " + std::to_string(r) + " (host " + fields[r][2] + ") runs braid " +
                          fields[r][0] +
                          " but this rank runs braid " BRAID_VERSION_STRING
                          ": all ranks must use the same library version");
    infos_[r].rank = r;
    infos_[r].pid = std::atoi(fields[r][1].c_str());
    infos_[r].hostname = fields[r][2];
    infos_[r].host_id = fields[r][3];
    if (fields[r][8].rfind("error:", 0) == 0)
      return InvalidArgument(r == rank_ ? fields[r][8].substr(6)
                                        : "rank " + std::to_string(r) + " (host " + fields[r][2] +
                                              "): " + fields[r][8].substr(6));
    unsigned types = 0;
    int fabric = -1;
    if (std::sscanf(fields[r][8].c_str(), "%u,%d", &types, &fabric) != 2 || types > 0xff ||
        fabric < -1 || fabric > 3)
      return RemoteError("malformed placement in the init message from rank " + std::to_string(r));
    infos_[r].nic_types = static_cast<uint8_t>(types);
    infos_[r].fabric = static_cast<int8_t>(fabric);
    if (fields[r].size() > 17) infos_[r].nic = fields[r][17];
    if (fields[r].size() > 19) infos_[r].device_ipc_probe = fields[r][19];
    // A missing or unreadable probe leaves 0: that peer is not read by reference.
    unsigned long long address = 0, value = 0;
    if (fields[r].size() > 15 &&
        std::sscanf(fields[r][15].c_str(), "%llx,%llx", &address, &value) == 2) {
      infos_[r].memory_probe_address = address;
      infos_[r].memory_probe_value = value;
    }
  }
  control_addrs_.resize(nranks_);
  for (int r = 0; r < nranks_; ++r)
    std::memcpy(&control_addrs_[r], fields[r][7].data(), sizeof(sockaddr_storage));
  // Parameters that shape schedules must agree; rank 0's win (a differing environment on some
  // ranks is common and harmless once it is reconciled).
  // Bounded as the configuration table bounds them (a corrupt or hostile field must not make
  // this rank open thousands of streams or use absurd chunks).
  nchannels_ =
      static_cast<int>(std::clamp(std::strtol(fields[0][4].c_str(), nullptr, 10), 1L, 16L));
  uint64_t chunk = std::strtoull(fields[0][5].c_str(), nullptr, 10);
  if (chunk < (4u << 10) || chunk > (64u << 20)) chunk = 0;  // out of range: use our own
  if (nchannels_ != c.nchannels || chunk != c.chunk_bytes || fields[0][6] != c.algo)
    BRAID_WARN(
        "rank %d: BRAID_NCHANNELS/BRAID_CHUNK_BYTES/BRAID_ALGO differ from rank 0's; using rank "
        "0's",
        rank_);
  opts_.config.nchannels = nchannels_;
  opts_.config.chunk_bytes = chunk ? chunk : c.chunk_bytes;
  opts_.config.algo = fields[0][6];
  // The small-message board's size (rank 0's), and the CPUs the ranks may run on (the union of
  // their affinity masks, which sets the board's threshold, board_selection.h): every rank must
  // take the same calls to the board, so every rank derives both from the same fields.
  auto number = [&](size_t i, uint64_t max, uint64_t* out) {
    char* end = nullptr;
    if (fields[0].size() <= i || fields[0][i].empty()) return false;
    *out = std::strtoull(fields[0][i].c_str(), &end, 10);
    return *end == '\0' && *out <= max;
  };
  uint64_t oneshot = 0;
  if (!number(10, 4u << 20, &oneshot))
    return RemoteError("malformed BRAID_ONESHOT_BYTES in the init message from rank 0");
  std::vector<std::string> masks;
  for (int r = 0; r < nranks_; ++r) masks.push_back(fields[r].size() > 11 ? fields[r][11] : "");
  const int cpus = CpusInUnion(masks);
  if (cpus < 0) return RemoteError("malformed CPU mask in an init message");
  if (oneshot != c.oneshot_bytes)
    BRAID_WARN("rank %d: BRAID_ONESHOT_BYTES differs from rank 0's; using rank 0's", rank_);
  opts_.config.oneshot_bytes = oneshot;
  host_cpus_ = cpus;
  // Both ends of a pair must agree on when they connect (an eager rank waits at init for a lazy
  // peer that does not come): rank 0's choice.
  uint64_t lazy = 0;
  if (!number(12, 1, &lazy))
    return RemoteError("malformed BRAID_LAZY_CONNECT in the init message from rank 0");
  if ((lazy != 0) != c.lazy_connect)
    BRAID_WARN("rank %d: BRAID_LAZY_CONNECT differs from rank 0's; using rank 0's", rank_);
  opts_.config.lazy_connect = lazy != 0;
  group_link_.reset();
  if (fields[0].size() > 13 && !fields[0][13].empty()) {
    LinkParams g;
    if (std::sscanf(fields[0][13].c_str(), "%lf,%lf", &g.alpha_s, &g.beta_bytes_s) != 2 ||
        !CheckLinkParams(g).ok())
      return RemoteError("malformed device-group link in the init message from rank 0");
    group_link_ = g;
  }
  // How the board runs a large all-reduce (one post or two per call): rank 0's, like its size.
  if (fields[0].size() > 14) {
    const std::string& v = fields[0][14];
    if (v != "-1" && v != "0" && v != "1")
      return RemoteError("malformed BRAID_BOARD_TWO_SHOT in the init message from rank 0");
    const int two_shot = std::stoi(v);
    if (two_shot != c.board_two_shot)
      BRAID_WARN("rank %d: BRAID_BOARD_TWO_SHOT differs from rank 0's; using rank 0's", rank_);
    opts_.config.board_two_shot = two_shot;
  }
  // From which size the board reads peers' buffers in place: rank 0's, like the board's size.
  uint64_t single_copy = 0;
  if (!number(16, uint64_t{1} << 50, &single_copy))
    return RemoteError("malformed BRAID_SINGLE_COPY_BYTES in the init message from rank 0");
  if (single_copy != c.single_copy_bytes)
    BRAID_WARN("rank %d: BRAID_SINGLE_COPY_BYTES differs from rank 0's; using rank 0's", rank_);
  opts_.config.single_copy_bytes = single_copy;
  // The NCCL shim's piece size (nccl/stream_path.h): rank 0's, so that every rank cuts a call
  // into the same collectives.
  uint64_t staging_chunk = 0;
  if (!number(18, uint64_t{1} << 50, &staging_chunk))
    return RemoteError("malformed BRAID_STAGING_CHUNK_BYTES in the init message from rank 0");
  if (staging_chunk != c.staging_chunk_bytes)
    BRAID_WARN("rank %d: BRAID_STAGING_CHUNK_BYTES differs from rank 0's; using rank 0's", rank_);
  opts_.config.staging_chunk_bytes = staging_chunk;

  buildLayout();
  // Bind each rank to a device of its node: local rank k takes device k mod the node's count.
  for (int r = 0; r < nranks_; ++r) {
    BRAID_ASSIGN_OR_RETURN(auto groups, SplitFields(fields[r][9], r));
    if (!groups.empty())
      infos_[r].device_group = groups[static_cast<size_t>(layout_.local_rank[r]) % groups.size()];
  }
  buildDeviceGroupLayout();
  return Status::Ok();
}

void braidComm::buildLayout() {
  buildNodeLayout();
  buildDeviceGroupLayout();
  const int node = layout_.node_of[rank_];
  const auto here = std::count(layout_.node_of.begin(), layout_.node_of.end(), node);
  threads_outnumber_cpus_ = 2 * here > host_cpus_;
  ranks_outnumber_cpus_ = here > host_cpus_;
}

void braidComm::buildNodeLayout() {
  // Nodes in order of first appearance.
  std::vector<std::string> nodes;
  layout_.node_of.assign(nranks_, 0);
  layout_.local_rank.assign(nranks_, 0);
  std::vector<int> count;
  for (int r = 0; r < nranks_; ++r) {
    auto it = std::find(nodes.begin(), nodes.end(), infos_[r].host_id);
    int n = static_cast<int>(it - nodes.begin());
    if (it == nodes.end()) {
      nodes.push_back(infos_[r].host_id);
      count.push_back(0);
    }
    layout_.node_of[r] = n;
    layout_.local_rank[r] = count[n]++;
  }
  layout_.nnodes = static_cast<int>(nodes.size());
}

void braidComm::buildDeviceGroupLayout() {
  layout_.dgroup_of.clear();
  bool any = false;
  for (const auto& info : infos_) any = any || !info.device_group.empty();
  if (!any) return;
  // Groups numbered per node in order of first appearance; a rank bound to no device is a group
  // of its own (its name cannot repeat: it is empty only there).
  std::vector<std::vector<std::string>> seen(static_cast<size_t>(layout_.nnodes));
  layout_.dgroup_of.assign(nranks_, 0);
  for (int r = 0; r < nranks_; ++r) {
    auto& names = seen[static_cast<size_t>(layout_.node_of[r])];
    const std::string name =
        infos_[r].device_group.empty() ? "#rank" + std::to_string(r) : infos_[r].device_group;
    auto it = std::find(names.begin(), names.end(), name);
    layout_.dgroup_of[r] = static_cast<int>(it - names.begin());
    if (it == names.end()) names.push_back(name);
  }
}

Status braidComm::initView(std::shared_ptr<braidComm> parent, const std::vector<int>& members,
                           int rank, uint32_t id, const CommOptions& opts) {
  std::shared_ptr<braidComm> root = parent->root_ ? parent->root_ : parent;
  opts_ = opts;
  // What shapes the streams is the root's: the same lanes, chunking agreed at its init.
  opts_.config.nchannels = root->opts_.config.nchannels;
  opts_.config.chunk_bytes = root->opts_.config.chunk_bytes;
  if (opts_.config.algo.empty()) opts_.config.algo = parent->opts_.config.algo;
  rank_ = rank;
  nranks_ = static_cast<int>(members.size());
  nchannels_ = root->nchannels_;
  comm_id_ = id;
  secret_ = root->secret_;
  loopback_root_ = root->loopback_root_;
  char hex[16];
  std::snprintf(hex, sizeof(hex), ".%08x", id);
  tag_ = root->tag_ + hex;
  root_rank_of_.resize(members.size());
  infos_.resize(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    root_rank_of_[i] = parent->rootRank(members[i]);
    infos_[i] = parent->infos_[members[i]];
    infos_[i].rank = static_cast<int>(i);
  }
  host_cpus_ = parent->host_cpus_;
  buildLayout();
  links_ = parent->links_;
  for (auto& o : links_.origin) o = LinkOrigin::kInherited;
  auto tuner = Tuner::Create(opts_.config.algo, nranks_, links_.model, &layout_);
  if (!tuner.ok()) return Status(tuner.status()).prepend(where() + ": BRAID_ALGO: ");
  tuner_ = std::make_unique<Tuner>(std::move(*tuner));
  numbers_.p2p_send.assign(nranks_, 0);
  numbers_.p2p_recv.assign(nranks_, 0);
  root_ = std::move(root);
  SetLogRank(rank_);
  return Status::Ok();
}

uint32_t braidComm::nextSplitId(int color) {
  // FNV-1a over (this communicator's id, the split's index, the colour). A collision between two
  // live views of one root would only weaken the wire check that catches calls issued out of
  // order; it cannot mix data, which the issue order decides.
  uint32_t h = 2166136261u;
  auto mix = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 16777619u;
    }
  };
  mix(comm_id_);
  mix(splits_++);
  mix(static_cast<uint32_t>(color));
  return h ? h : 1;
}

Status braidComm::connectTransports(Bootstrap& bs, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(auto factories, SelectTransports(opts_.config.transports));
  TransportContext ctx;
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.nchannels = nlanes();
  ctx.ranks = infos_;
  ctx.comm_tag = tag_;
  ctx.secret = secret_;
  ctx.socket_ifname = opts_.config.socket_ifname;
  ctx.all_on_one_host = layout_.nnodes == 1;
  ctx.shm_ring_bytes = opts_.config.shm_ring_bytes;
  ctx.causes = &causes_;
  ctx.board_bytes = opts_.config.oneshot_bytes;
  ctx.lazy_connect = opts_.config.lazy_connect;
  ctx.transports = opts_.config.transports;
  // This node's RDMA NICs, for a transport that picks devices per fabric (ucx); the placement
  // was computed (and cached) by exchangeRankInfo.
  if (auto placed = LocalPlacement(opts_.config.host_id, infos_[rank_].hostname); placed.ok())
    ctx.local_nics = placed->rdma_nics;
  for (int r = 0; r < nranks_; ++r)
    ctx.doorbells.push_back("braid-" + tag_ + "-" + std::to_string(r));
  ctx.doorbell_name = ctx.doorbells[rank_];
  BRAID_ASSIGN_OR_RETURN(doorbell_, Doorbell::Bind(ctx.doorbell_name));

  std::vector<std::string> names;
  std::string mine;
  // Whether this rank can read every peer of its host by cross-memory attach (its first field):
  // the board reads by reference only where every rank can (transport/cross_memory.h).
  bool reads_peers = opts_.config.single_copy_bytes > 0;
  for (int p = 0; p < nranks_ && reads_peers; ++p)
    if (p != rank_ && infos_[p].host_id == infos_[rank_].host_id)
      reads_peers = CanReadPeerMemory(
          infos_[p].pid, {infos_[p].memory_probe_address, infos_[p].memory_probe_value});
  PutField(&mine, reads_peers ? "1" : "0");
  // Whether this rank maps the device IPC probe of every rank of its host in another process
  // (its second field): the shim's per-call IPC path is on only where every rank does.
  bool maps_devices = !ipc_probe_.empty();
  const int my_device = device::IpcProbe::DeviceOf(ipc_probe_.text());
  for (int p = 0; p < nranks_ && maps_devices; ++p) {
    if (p == rank_ || infos_[p].host_id != infos_[rank_].host_id) continue;
    if (infos_[p].device_ipc_probe.empty()) {
      maps_devices = false;
    } else if (infos_[p].pid == infos_[rank_].pid) {
      // A rank of this process: reached by address, on the same device only.
      maps_devices = device::IpcProbe::DeviceOf(infos_[p].device_ipc_probe) == my_device;
    } else {
      Status st = ipc_probe_.tryOpen(infos_[p].device_ipc_probe);
      if (!st.ok()) {
        BRAID_INFO("rank %d: cannot map rank %d's device memory (CUDA IPC): %s", rank_, p,
                   st.message().c_str());
        maps_devices = false;
      }
    }
  }
  PutField(&mine, maps_devices ? "1" : "0");
  for (auto* f : factories) {
    auto inst = f->create(ctx);
    if (!inst.ok()) {
      BRAID_WARN("rank %d: transport %s unavailable: %s", rank_, f->name(),
                 inst.status().message().c_str());
      continue;
    }
    PutField(&mine, f->name());
    PutField(&mine, (*inst)->localBlob());
    names.push_back(f->name());
    transports_.push_back(std::move(*inst));
  }
  BRAID_ASSIGN_OR_RETURN(auto all, bs.allGather(mine, deadline));

  // blobs[t][r]: rank r's blob for this rank's transport t ("" when r has none).
  std::vector<std::vector<std::string>> blobs(transports_.size(),
                                              std::vector<std::string>(nranks_));
  bool all_read_peers = true;
  device_ipc_ = !ipc_probe_.empty();
  intra_tcp_ = true;
  for (int r = 0; r < nranks_; ++r) {
    BRAID_ASSIGN_OR_RETURN(auto f, SplitFields(all[r], r));
    if (f.size() % 2 != 0 || f.size() < 2 || (f[0] != "0" && f[0] != "1") ||
        (f[1] != "0" && f[1] != "1"))
      return RemoteError("malformed transport list from rank " + std::to_string(r));
    all_read_peers = all_read_peers && f[0] == "1";
    device_ipc_ = device_ipc_ && f[1] == "1";
    // Lists are in priority order and tcp connects any pair: tcp first on every rank means
    // every pair talks over it.
    intra_tcp_ = intra_tcp_ && f.size() >= 4 && f[2] == "tcp";
    for (size_t i = 2; i + 1 < f.size(); i += 2)
      for (size_t t = 0; t < names.size(); ++t)
        if (names[t] == f[i]) blobs[t][r] = f[i + 1];
  }

  transport_of_.assign(nranks_, "");
  std::vector<std::vector<int>> peers_of(transports_.size());
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    bool found = false;
    for (size_t t = 0; t < transports_.size() && !found; ++t) {
      if (blobs[t][p].empty() || blobs[t][rank_].empty()) continue;
      if (!transports_[t]->canConnect(p, blobs[t])) continue;
      peers_of[t].push_back(p);
      transport_of_[p] = names[t];
      found = true;
    }
    if (!found)
      return SystemError("no transport connects this rank with rank " + std::to_string(p) +
                         " (host " + infos_[p].hostname + "); transports enabled here: " +
                         (opts_.config.transports.empty() ? "all" : opts_.config.transports) +
                         " (check BRAID_TRANSPORTS on both ranks)");
  }

  endpoints_.resize(nranks_);
  for (size_t t = 0; t < transports_.size(); ++t) {
    std::vector<std::vector<std::unique_ptr<Endpoint>>> out;
    Status st = transports_[t]->connect(peers_of[t], blobs[t], deadline, &out);
    if (!st.ok()) return st.prepend(names[t] + " connect: ");
    if (out.size() != peers_of[t].size())
      return InternalError(names[t] + " connect returned the wrong number of peers");
    for (size_t i = 0; i < out.size(); ++i) {
      if (static_cast<int>(out[i].size()) != nlanes())
        return InternalError(names[t] + " connect returned the wrong number of channels");
      endpoints_[peers_of[t][i]] = std::move(out[i]);
    }
  }
  // Every rank has mapped / connected: transports may now drop names and listeners.
  BRAID_RETURN_IF_ERROR(bs.barrier(deadline));
  // Every rank has tried the probes (before the exchange above): this one may go.
  ipc_probe_.reset();
  for (auto& t : transports_) BRAID_RETURN_IF_ERROR(t->finishConnect());
  // The small-message board serves a communicator whose every peer is on it (one host, shm to
  // all): the one-shot collectives read every rank's post. Symmetric: shm connects a pair exactly
  // when both ranks share the host and have a segment, so every rank reaches the same answer.
  for (size_t t = 0; t < transports_.size() && nranks_ > 1; ++t) {
    LocalBoard* b = transports_[t]->localBoard();
    if (!b || names[t] != "shm") continue;
    bool all = true;
    for (int p = 0; p < nranks_ && all; ++p)
      all = b->covers(p) && (p == rank_ || transport_of_[p] == names[t]);
    if (all) board_ = b;
  }
  single_copy_bytes_ = board_ && all_read_peers ? opts_.config.single_copy_bytes : 0;
  if (rank_ == 0 && board_ && opts_.config.single_copy_bytes > 0 && !all_read_peers)
    BRAID_INFO(
        "%s: large calls copy through shared memory: a rank may not read its peers' memory "
        "(cross-memory attach refused, e.g. by ptrace rules or pid namespaces)",
        where().c_str());
  return Status::Ok();
}

Status braidComm::calibrateLinks(Bootstrap& bs, Deadline deadline) {
  LinkCalibrationSetup s;
  s.rank = rank_;
  s.nranks = nranks_;
  s.layout = &layout_;
  s.endpoint = [this](int peer) { return endpoints_[peer].empty() ? nullptr : endpoint(peer, 0); };
  s.doorbell = &doorbell_;
  s.spin_us = opts_.config.spin_us;
  s.enabled = opts_.config.link_calibration;
  s.profile_path = opts_.config.link_profile;
  s.inherited = opts_.inherited_links;
  s.nics_per_node = NicsPerNode(layout_, infos_);
  s.where = where();
  BRAID_ASSIGN_OR_RETURN(links_, CalibrateLinks(bs, s, deadline));
  // Not a measured figure: this communicator's own transports (a split's differ from its
  // parent's whose model it inherits).
  links_.model.intra_tcp = intra_tcp_ && nranks_ > 1;
  // Calibration measures the node and inter-node links; the device-group link is the topology's.
  if (group_link_ && !links_.model.group) links_.model.group = group_link_;
  return Status::Ok();
}

void braidComm::setAsyncError(const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (async_code_.load() != braidSuccess) return;  // the first error is the cause
  async_message_ = st.message();
  async_code_.store(st.code(), std::memory_order_release);
}

Status braidComm::asyncError() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (async_code_.load() == braidSuccess) return Status::Ok();
  return Status::Error(static_cast<ErrorClass>(async_code_.load()), async_message_);
}

void braidComm::setLastError(const std::string& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  last_error_ = msg;
}

std::string braidComm::lastError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void braidComm::submit(std::shared_ptr<Operation> op) {
  op->setOwner(this);
  opIssued();
  engine()->submit(std::move(op));
}

CallStart braidComm::startCall(OpDesc& d, Status* result, MakeOperation make, void* ctx) {
  return engine()->startCall(this, d, result, make, ctx);
}

bool braidComm::runInline(Operation& op) {
  op.setOwner(this);
  opIssued();
  const Operation::HeldCaller held(op);
  if (engine()->tryRunInline(op)) return true;
  opDone();  // not taken: the caller submits it instead
  return false;
}

bool braidComm::runInline(const std::vector<std::shared_ptr<Operation>>& ops) {
  for (const auto& op : ops) op->setOwner(this);
  own_inflight_.fetch_add(ops.size());
  const Operation::HeldCaller held(ops);  // until the whole batch completes (a group's end)
  if (engine()->tryRunInline(ops)) return true;
  for (size_t i = 0; i < ops.size(); ++i) opDone();
  return false;
}

bool braidComm::waitFor(Operation& op, Deadline deadline, bool held_caller) {
  braid::Engine* engine = config().inline_blocking ? this->engine() : nullptr;
  if (op.done()) return true;
  std::optional<Operation::HeldCaller> held;
  if (held_caller) held.emplace(op);
  if (engine) engine->driveUntilDone(op, deadline);
  return op.wait(deadline, config().spin_us);
}

void braidComm::poll() {
  if (engine() && config().inline_blocking) (void)engine()->poll();
}

bool braidComm::peerSentUnreadStreamBytes(int peer) const {
  if (root_) return false;
  for (const auto& ep : endpoints_[static_cast<size_t>(peer)])
    if (ep && ep->hasUnreadBytes()) return true;
  return false;
}

bool braidComm::peerInAnotherCall(int peer, uint64_t seq) const {
  // Loaded after the data was seen: the peer announced the call before that data moved.
  return peerSentUnreadStreamBytes(peer) && board_ && board_->started(peer) <= seq;
}

bool braidComm::runBoardCalls(std::span<const OpDesc* const> calls, Status* results) {
  return !root_ && engine_ && board_ && engine_->runBoardCalls(calls, results);
}

void braidComm::opDone() {
  // The last touch of this object when nobody waits: a split view's destroy may free it as soon
  // as it reads zero. With a waiter, the decrement happens under the lock the waiter checks the
  // counter under, so that the waiter cannot see zero (and free) before this unlocks.
  if (own_waiters_.load() > 0) {
    std::lock_guard<std::mutex> lock(own_mu_);
    own_inflight_.fetch_sub(1);
    own_cv_.notify_all();
    return;
  }
  own_inflight_.fetch_sub(1);
}

bool braidComm::waitOwnOps(Deadline deadline) {
  // A waiter that counts itself just after an opDone read own_waiters_ as zero is not woken by
  // it: the wait sleeps in slices and reads the counter again (drain and destroy only).
  constexpr auto kSlice = std::chrono::milliseconds(2);
  own_waiters_.fetch_add(1);
  std::unique_lock<std::mutex> lock(own_mu_);
  bool drained = own_inflight_.load() == 0;
  while (!drained && !deadline.expired()) {
    own_cv_.wait_until(lock, std::min(deadline.at(), Clock::now() + kSlice));
    drained = own_inflight_.load() == 0;
  }
  own_waiters_.fetch_sub(1);
  return drained;
}

std::string braidComm::debugState(Deadline deadline) const {
  if (!engine()) return where() + ": not initialised\n";
  std::string s = engine()->debugState(deadline);
  // The rank a chain of waiting ranks ends at: the report above names the rank this one waits
  // on directly, which may be waiting itself. The ranks that have not issued the oldest
  // collective in flight are asked for (the control plane, not the engine; bounded).
  if (root_ || static_cast<int>(control_addrs_.size()) != nranks_) return s;
  const uint64_t issued = engine()->collsIssued();
  const int64_t oldest = engine()->lastCollCompleted() + 1;
  if (static_cast<int64_t>(issued) <= oldest) return s;  // no collective in flight
  std::vector<int> others;
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_) others.push_back(r);
  const auto counts =
      AskIssuedCalls(controlPeers(), others,
                     Deadline::After(std::min<int64_t>(kLivenessProbeMs, deadline.remainingMs())));
  std::string missing;
  for (size_t k = 0; k < others.size(); ++k) {
    if (!counts[k] || static_cast<int64_t>(*counts[k]) > oldest) continue;
    const RankInfo& info = infos_[static_cast<size_t>(others[k])];
    missing += std::string(missing.empty() ? "" : ", ") + "rank " + std::to_string(others[k]) +
               " (host " + info.hostname + ", pid " + std::to_string(info.pid) + "; " +
               (*counts[k] == 0 ? std::string("no collective yet")
                                : "its last collective was #" + std::to_string(*counts[k] - 1)) +
               ")";
  }
  if (!missing.empty())
    s += "  collective #" + std::to_string(oldest) + " not yet called by: " + missing + "\n";
  return s;
}

Status braidComm::drain() {
  if (!engine()) return Status::Ok();
  // Operations a caller left quiet (past their last post: Engine::endInline leaves them for the
  // caller's next call) need a driver to read what their peers posted: the thread takes them.
  engine()->wake();
  // This communicator's own operations: a root does not wait for its views' work, nor a view
  // for its root's.
  if (!waitOwnOps(Deadline::After(opts_.config.timeout_ms)))
    return TimeoutError(where() + ": operations still running after " +
                        std::to_string(opts_.config.timeout_ms / 1000) + " s (BRAID_TIMEOUT)");
  return Status::Ok();
}

Status braidComm::finalize() {
  BRAID_RETURN_IF_ERROR(drain());
  return asyncError();
}

void braidComm::shutdownEndpoints() {
  if (root_) return root_->shutdownEndpoints();
  for (auto& peer : endpoints_)
    for (auto& ep : peer)
      if (ep) ep->shutdown();
}

ControlPeers braidComm::controlPeers() const {
  if (root_) return root_->controlPeers();
  ControlPeers p;
  p.addrs = &control_addrs_;
  p.secret = &secret_;
  p.rank = rank_;
  p.nranks = nranks_;
  return p;
}

FailureCause braidComm::selfCause(FailureCause::Reason reason, std::string detail) const {
  if (root_) return root_->selfCause(reason, std::move(detail));  // causes name root ranks
  FailureCause c;
  c.reason = reason;
  c.rank = rank_;
  c.observer = rank_;
  c.pid = static_cast<int32_t>(getpid());
  c.host = hostname();
  c.detail = FailureCause::FitDetail(detail);
  return c;
}

FailureCause braidComm::peerCause(int peer, FailureCause::Reason reason) const {
  const RankInfo& info = rankInfos()[static_cast<size_t>(peer)];
  FailureCause c;
  c.reason = reason;
  c.rank = peer;
  c.pid = info.pid;
  c.host = info.hostname;
  return c;
}

FailureCause braidComm::announceFailure() {
  if (root_) return root_->announceFailure();
  if (!causes_.first()) causes_.offer(selfCause(FailureCause::Reason::kOwnFailure, ""));
  FailureCause kept = *causes_.first();
  // Only the rank that saw the failure itself speaks for it; a weak cause names nothing new.
  if (kept.weak() || kept.observer != rank_ || !causes_.claimBroadcast()) return kept;
  if (static_cast<int>(control_addrs_.size()) != nranks_) return kept;
  // Not to the failed rank: dead, or stopped (it would cost the whole deadline). A rank in a
  // deadlock with this one answered just now, and learns how its call ends.
  std::vector<bool> skip(nranks_, false);
  if (kept.rank != rank_ && kept.reason != FailureCause::Reason::kP2pDeadlock)
    skip[kept.rank] = true;
  notice_reserve_.clear();  // (descriptors for the notices, should this rank have run out)
  SendFailureNotices(controlPeers(), kept, skip, Deadline::After(kFailureNoticeMs));
  return kept;
}

Status braidComm::failWithCause(const Status& st, const std::string& ctx, const std::string& coll,
                                uint64_t seq, const std::optional<FailureCause>& local) {
  CauseBoard& board = causes();
  std::string seen = st.message();
  if (seen.compare(0, ctx.size(), ctx) == 0) seen.erase(0, ctx.size());
  if (local) board.offer(*local);
  // Only a neighbour's shut-down stream so far: whoever saw the failure itself told every rank
  // before that neighbour could shut anything down, but the neighbour may have learned it
  // from that rank's notice while the notice to this rank was still on its way (bounded by the
  // sender's deadline).
  if (auto f = board.first(); f && f->weak())
    (void)board.waitStrong(Deadline::After(kFailureNoticeMs));
  // Nothing else explains it: this rank's own failure, which the others are told about.
  if (!board.first()) board.offer(selfCause(FailureCause::Reason::kOwnFailure, seen));
  board.complete(rank_, true, coll, seq);
  // Before the streams close: the ranks that fail because of that learn the cause first.
  const FailureCause cause = announceFailure();
  Status final = st;
  // A mismatch this rank found itself (the ranks' calls or configurations differ) is a usage
  // error of the program, whichever rank reported first: its own message names both sides.
  const bool own_usage_error = st.cls() == ErrorClass::kInvalidUsage;
  // (A deadlock through this rank's point-to-point call is named like another rank's failure:
  // the rank that found it says how, this rank's own view is a shut stream.)
  if (!own_usage_error && (cause.rank != rank_ || cause.reason == FailureCause::Reason::kRevoked ||
                           cause.reason == FailureCause::Reason::kAborted ||
                           cause.reason == FailureCause::Reason::kP2pDeadlock)) {
    // Another rank's failure: name it first, then what this rank saw of it.
    final =
        Status::Error(cause.errorClass(), ctx + cause.describe() + " (seen here: " + seen + ")");
  }
  BRAID_WARN("%s", final.message().c_str());
  setAsyncError(final);
  // The streams may now be mid-message: close them so peers fail at once instead of waiting for
  // their timeout (errors propagate through the communicator).
  shutdownEndpoints();
  return final;
}

Status braidComm::viewAbortReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_abort_reason_;
}

void braidComm::abortOperations(const Status& reason) {
  if (root_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (view_aborted_.load()) return;
      view_abort_reason_ = reason;
    }
    view_aborted_.store(true, std::memory_order_release);
    engine()->wake();
    return;
  }
  if (engine()) engine()->abort(reason);
}

void braidComm::abort() {
  abortInit();
  // During the init its thread owns the members (where() reads them) and there is no engine
  // to stop yet: record the abort only. kReady is stored after the engine exists.
  if (state() == State::kInitializing) {
    setAsyncError(AbortedError("communicator aborted (braidCommAbort) during its init"));
    return;
  }
  Status reason = AbortedError("communicator aborted (braidCommAbort) on " + where());
  setAsyncError(reason);
  abortOperations(reason);
  // A split view's abort stays local (the root's streams go on; see abortOperations). A root's
  // peers blocked on this rank learn why: the abort is the cause they name (unless a failure was
  // already recorded, which stays the cause), and the streams close so they fail at once.
  if (root_ || state() != State::kReady) return;
  causes_.offer(selfCause(FailureCause::Reason::kAborted, ""));
  causes_.complete(rank_, false, "", 0);
  (void)announceFailure();
  shutdownEndpoints();
}

namespace {

// Whether the next bytes on `ep` (some have arrived) are the peer's goodbye; reads them either
// way (the caller leaves the communicator). Called with the engine's loop claimed.
bool ReadGoodbye(Endpoint* ep) {
  WireHeader h;
  size_t got = 0;
  // A goodbye is one small write: its bytes are all there within microseconds of the first.
  const Deadline until = Deadline::After(10);
  while (got < sizeof(h)) {
    auto r = ep->recv(reinterpret_cast<std::byte*>(&h) + got, sizeof(h) - got);
    if (!r.ok()) return true;  // the peer closed or failed: nobody waits
    got += *r;
    if (*r == 0 && until.expired()) return false;
    if (*r == 0) sched_yield();
  }
  return h.magic == kWireMagic && h.flags == kWireGoodbye;
}

// The goodbye after the last message on `ep`, whole or not at all where the stream takes it
// (a stream the peer does not drain within a moment: the peer then reads the close instead).
void SendGoodbye(Endpoint* ep, FailureCause::Reason why) {
  WireHeader h;  // (send() flushes what was corked first: the goodbye stays last)
  h.flags = kWireGoodbye;
  h.reserved = static_cast<uint32_t>(why);
  size_t sent = 0;
  const Deadline until = Deadline::After(10);
  while (sent < sizeof(h)) {
    auto r = ep->send(reinterpret_cast<const std::byte*>(&h) + sent, sizeof(h) - sent);
    if (!r.ok()) return;
    sent += *r;
    if (*r == 0 && until.expired()) return;
    if (*r == 0) sched_yield();
  }
  ep->settle(100);
}

}  // namespace

bool braidComm::awaitedByAPeer() {
  if (root_ || !engine()) return false;
  bool awaited = false;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    // Stream data this rank never read: the peer is in an operation this rank did not make,
    // unless it is the peer's goodbye (it finished and left too), which is read past here. One
    // pass that reads what it finds: a goodbye that lands after a first look must not count as
    // data at a second look (two ranks that finish together and leave at once would each take
    // the other's goodbye for a waiting call, and fail the ranks still running).
    for (const auto& ep : endpoints_[static_cast<size_t>(p)])
      if (ep && ep->hasUnreadBytes() && !ReadGoodbye(ep.get())) {
        if (!awaited)
          BRAID_INFO("%s: rank %d sent data for a call this rank never made (%s)", where().c_str(),
                     p, ep->describe().c_str());
        awaited = true;
      }
    // A post on the board for a call this rank never made (its next number is known when no
    // call is open: the operations are drained).
    if (board_ && board_clock_.next() != 0 && board_->posted(p, board_clock_.next()))
      awaited = true;
  }
  return awaited;
}

void braidComm::leave(FailureCause::Reason why) {
  if (root_ || !engine_ || state() != State::kReady || asyncErrorCode() != braidSuccess) return;
  // A child of fork() (the exit hook runs in it too) holds its parent's streams: not its own.
  if (infos_[static_cast<size_t>(rank_)].pid != getpid()) return;
  bool awaited = false;
  const bool idle = engine_->withIdleLoop([&] {
    // A peer's goodbye is no call waiting; anything else is (read past either way: this rank
    // leaves, and a waiting peer is told so below).
    awaited = awaitedByAPeer();
    // Before the goodbyes: a shm peer that sees one on a stream while it waits on the board then
    // finds the reason there too, not "a peer in another call".
    for (const auto& t : transports_) t->markDeparted(static_cast<uint32_t>(why));
    if (awaited) return;
    for (int p = 0; p < nranks_; ++p)
      if (p != rank_)
        for (const auto& ep : endpoints_[static_cast<size_t>(p)])
          if (ep && ep->connected()) SendGoodbye(ep.get(), why);
  });
  if (idle && awaited) announceLeaving(why);
}

void braidComm::announceLeaving(FailureCause::Reason why) {
  // As an abort: the cause goes to every rank (bounded), then the streams close so that a peer
  // blocked on one fails at once, holding the cause.
  causes_.offer(selfCause(why, ""));
  causes_.complete(rank_, false, "", 0);
  (void)announceFailure();
  shutdownEndpoints();
}

int braidComm::addPreMulOp(const PreMulOp& op) {
  std::lock_guard<std::mutex> lock(mu_);
  int id = next_premul_id_++;
  premul_ops_[id] = op;
  return id;
}

bool braidComm::removePreMulOp(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  return premul_ops_.erase(id) > 0;
}

bool braidComm::findPreMulOp(int id, PreMulOp* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = premul_ops_.find(id);
  if (it == premul_ops_.end()) return false;
  *out = it->second;
  return true;
}

std::string braidComm::where() const {
  std::string host =
      rank_ >= 0 && rank_ < static_cast<int>(infos_.size()) ? infos_[rank_].hostname : "";
  if (host.empty()) {
    // Before the rendezvous has told every rank's: this rank's own is known all along.
    char name[256] = {};
    host = gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : "?";
  }
  return "rank " + std::to_string(rank_) + "/" + std::to_string(nranks_) + " on host " + host;
}

std::string braidComm::fabricSummary() const {
  // Per pair of ranks on different nodes: the best RDMA type both nodes have (NicType order:
  // InfiniBand, RoCE, Slingshot; the same preference as topo::PairNicType), else none.
  static const char* kNames[] = {"ib", "roce", "slingshot"};
  static const int kPreference[] = {0, 2, 1};  // ib, slingshot, roce
  std::map<std::string, int> pairs;
  for (int a = 0; a < nranks_; ++a)
    for (int b = a + 1; b < nranks_; ++b) {
      if (layout_.node_of[a] == layout_.node_of[b]) continue;
      const unsigned common = infos_[a].nic_types & infos_[b].nic_types;
      std::string type = "none";
      for (int t : kPreference)
        if (common & (1u << t)) {
          type = kNames[t];
          break;
        }
      pairs[type]++;
    }
  std::ostringstream s;
  s << where() << ": inter-node pairs by common RDMA fabric:";
  if (pairs.empty()) s << " none (one node)";
  for (auto& [type, k] : pairs) s << " " << type << " " << k;
  // What this rank's own inter-node pairs run on (ucx where both nodes' UCX found their NICs of
  // the common fabric, or where BRAID_TRANSPORTS forces it; tcp otherwise).
  std::map<std::string, int> used;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && layout_.node_of[p] != layout_.node_of[rank_])
      used[root_ || !transport_of_.empty() ? transportOf(p) : std::string("?")]++;
  if (!used.empty()) {
    s << "; this rank's inter-node peers use";
    for (auto& [name, k] : used) s << " " << name << ":" << k;
  }
  return s.str();
}

std::string braidComm::describe() const {
  std::map<std::string, int> n;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) n[transport_of_.empty() ? "?" : transport_of_[p]]++;
  std::ostringstream s;
  s << where() << " pid " << getpid() << " nodes " << layout_.nnodes << " channels " << nchannels_;
  if (root_) {
    s << " split view " << std::hex << comm_id_ << std::dec << " of " << root_->where();
    return s.str();
  }
  s << " transports";
  if (n.empty()) s << " none";
  for (auto& [name, k] : n) s << " " << name << ":" << k;
  if (rank_ >= 0 && rank_ < static_cast<int>(infos_.size()))
    s << " fabric " << FabricName(infos_[rank_].fabric);
  return s.str();
}
