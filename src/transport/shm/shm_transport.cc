#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <new>

#include "core/base/log.h"
#include "transport/shm/shm_board.h"
#include "transport/shm/shm_endpoint.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_sizing.h"
#include "transport/transport.h"

namespace braid {
namespace shm {
namespace {

constexpr const char* kBlobMagic = "shm1";
constexpr size_t kMaxBlobBytes = 4096;  // blobs come from other ranks: bound what we parse

void PutField(std::string* out, const char* key, const std::string& value) {
  *out += key;
  *out += ':';
  *out += std::to_string(value.size());
  *out += ':';
  *out += value;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string HostName(const TransportContext& ctx, int rank) {
  const RankInfo& r = ctx.ranks[static_cast<size_t>(rank)];
  return r.hostname.empty() ? r.host_id : r.hostname;
}

// Ring sizes are powers of two >= 4 KiB, so this is exact.
std::string RingSize(uint64_t b) {
  return b >= (1 << 20) ? std::to_string(b >> 20) + " MiB" : std::to_string(b >> 10) + " KiB";
}

std::atomic<InitHook> g_init_hook{nullptr};

void AtInitPoint(InitPoint point, const std::string& comm_tag) {
  if (InitHook hook = g_init_hook.load(std::memory_order_acquire)) hook(point, comm_tag);
}

}  // namespace

std::string EncodeBlob(const ShmBlob& b) {
  // key:len:value fields, so no value (host ids come from the user) can break the framing.
  std::string out = kBlobMagic;
  PutField(&out, "seg", b.segment);
  PutField(&out, "ring", std::to_string(b.ring_bytes));
  PutField(&out, "pid", std::to_string(b.pid));
  PutField(&out, "host", b.host_id);
  PutField(&out, "bell", b.doorbell);
  PutField(&out, "dev", std::to_string(b.shm_dev));
  PutField(&out, "pidns", std::to_string(b.pidns));
  PutField(&out, "uid", std::to_string(b.uid));
  return out;
}

ShmBlob DecodeBlob(const std::string& text) {
  ShmBlob b;
  const std::string magic = kBlobMagic;
  if (text.size() > kMaxBlobBytes || text.compare(0, magic.size(), magic) != 0) return b;
  std::map<std::string, std::string> fields;
  size_t pos = magic.size();
  while (pos < text.size()) {
    size_t c1 = text.find(':', pos);
    if (c1 == std::string::npos) return b;
    size_t c2 = text.find(':', c1 + 1);
    if (c2 == std::string::npos) return b;
    uint64_t len = 0;
    if (!ParseU64(text.substr(c1 + 1, c2 - c1 - 1), &len) || len > text.size() - c2 - 1) return b;
    fields[text.substr(pos, c1 - pos)] = text.substr(c2 + 1, len);
    pos = c2 + 1 + len;
  }
  uint64_t pid = 0;
  for (const char* k : {"seg", "ring", "pid", "host", "bell", "dev", "pidns", "uid"})
    if (!fields.count(k)) return b;
  if (!ParseU64(fields["ring"], &b.ring_bytes) || !ParseU64(fields["pid"], &pid) ||
      !ParseU64(fields["dev"], &b.shm_dev) || !ParseU64(fields["pidns"], &b.pidns) ||
      !ParseU64(fields["uid"], &b.uid) || pid == 0 || pid > INT32_MAX)
    return b;
  b.pid = static_cast<int>(pid);
  b.segment = fields["seg"];
  b.host_id = fields["host"];
  b.doorbell = fields["bell"];
  b.valid = true;
  return b;
}

namespace {

class ShmTransport final : public TransportInstance {
 public:
  static Result<std::unique_ptr<TransportInstance>> Create(const TransportContext& ctx);

  std::string localBlob() const override { return EncodeBlob(blob_); }
  bool canConnect(int peer, const std::vector<std::string>& blobs) const override;
  Status connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                 Deadline deadline,
                 std::vector<std::vector<std::unique_ptr<Endpoint>>>* out) override;
  // Every rank has mapped our segment by now: the locator has served.
  Status finishConnect() override {
    if (segment_) segment_->retire();
    AtInitPoint(InitPoint::kFinished, ctx_.comm_tag);
    return Status::Ok();
  }
  const char* name() const override { return "shm"; }
  LocalBoard* localBoard() override { return board_.get(); }
  void markDeparted(uint32_t reason) override {
    if (segment_) segment_->view().owner()->departed.store(reason, std::memory_order_release);
  }

 private:
  explicit ShmTransport(const TransportContext& ctx) : ctx_(ctx) {}
  Status connectPeer(int peer, const std::string& blob,
                     std::vector<std::unique_ptr<Endpoint>>* channels);
  std::string who() const { return "shm transport (rank " + std::to_string(ctx_.rank) + "): "; }

  TransportContext ctx_;
  std::unique_ptr<OwnedSegment> segment_;  // null when this rank has no local peer
  std::unique_ptr<ShmBoard> board_;        // null without a segment or with board_bytes 0
  ShmBlob blob_;
};

Result<std::unique_ptr<TransportInstance>> ShmTransport::Create(const TransportContext& ctx) {
  if (ctx.rank < 0 || ctx.rank >= ctx.nranks ||
      ctx.ranks.size() != static_cast<size_t>(ctx.nranks) || ctx.nchannels < 1 ||
      ctx.nchannels > 1024)
    return InvalidArgument("shm transport: inconsistent transport context");
  std::unique_ptr<ShmTransport> t(new (std::nothrow) ShmTransport(ctx));
  if (!t) return SystemError("shm transport: out of memory");
  const std::string& my_host = ctx.ranks[static_cast<size_t>(ctx.rank)].host_id;
  t->blob_.pid = static_cast<int>(getpid());
  t->blob_.host_id = my_host;
  t->blob_.doorbell = ctx.doorbell_name;
  t->blob_.shm_dev = ShmDevice();
  t->blob_.pidns = PidNamespaceId();
  t->blob_.uid = geteuid();
  t->blob_.valid = true;

  std::vector<int> writers;  // local peers, in rank order: one slot each
  if (!my_host.empty())
    for (int r = 0; r < ctx.nranks; ++r)
      if (r != ctx.rank && ctx.ranks[static_cast<size_t>(r)].host_id == my_host)
        writers.push_back(r);
  if (writers.empty()) return std::unique_ptr<TransportInstance>(std::move(t));

  RemoveStaleSegments();

  const auto nslots = static_cast<uint32_t>(writers.size());
  const auto nch = static_cast<uint32_t>(ctx.nchannels);
  const uint32_t nlocal = nslots + 1;
  auto free_res = ShmFreeBytes();
  if (!free_res.ok()) return Status(free_res.status()).prepend(t->who());
  const uint64_t free_bytes = *free_res;
  // The small-message board is part of the segment (shm_layout.h: entries, slots and two
  // payload buffers of BRAID_ONESHOT_BYTES).
  const uint64_t board_bytes = std::min<uint64_t>(
      (ctx.board_bytes + kBoardAlignBytes - 1) / kBoardAlignBytes * kBoardAlignBytes,
      kMaxBoardBytes);
  SegmentPlan plan = PlanSegment(ctx.shm_ring_bytes, nlocal, nch, free_bytes, board_bytes);
  // Where /dev/shm is too short for minimum rings and a board, the rings come first: a rank
  // without a board turns the board off for its communicator (every rank then sees a peer it
  // does not cover), never the transport.
  if (plan.layout.nslots == 0 && board_bytes != 0)
    plan = PlanSegment(ctx.shm_ring_bytes, nlocal, nch, free_bytes, 0);
  if (plan.layout.nslots == 0) {
    return SystemError(t->who() +
                       NoSpaceMessage(free_bytes, nlocal * plan.minimum_bytes,
                                      /*rings_at_minimum=*/true,
                                      "for " + std::to_string(nlocal) + " local ranks x " +
                                          std::to_string(nslots) + " peers x " +
                                          std::to_string(nch) + " channels"));
  }
  const SegmentLayout& layout = plan.layout;
  // One line per host, not per rank (quiet logs at 256 ranks): the lowest local rank speaks.
  const bool speaker = writers.front() > ctx.rank;
  const std::string requested = RingSize(RequestedRingBytes(ctx.shm_ring_bytes));
  const std::string size_text = RingSize(layout.ring_bytes);
  const auto host_mib = static_cast<unsigned long long>(nlocal * layout.totalBytes() >> 20);
  if (speaker && plan.short_of_space)
    BRAID_WARN(
        "shm: /dev/shm has %llu MiB free for %u local ranks: segments of %llu MiB in all, rings "
        "of at most %s instead of %s (enlarge /dev/shm, e.g. docker --shm-size, to keep "
        "BRAID_SHM_RING_BYTES)",
        static_cast<unsigned long long>(free_bytes >> 20), nlocal, host_mib, size_text.c_str(),
        requested.c_str());
  else if (speaker && plan.below_request)
    BRAID_INFO(
        "shm: %u local ranks x %u peers x %u lanes share %llu MiB of segments: the first %llu "
        "rings used per rank get %s, later ones less (docs/scale.md)",
        nlocal, nslots, nch, host_mib, static_cast<unsigned long long>(kFullSizeRings),
        size_text.c_str());

  auto seg =
      OwnedSegment::Create(layout, ctx.rank, writers, ctx.comm_tag,
                           SegmentName(ctx.comm_tag, ctx.rank, t->blob_.pid, t->blob_.pidns));
  if (!seg.ok()) return Status(seg.status()).prepend(t->who());
  t->segment_ = std::move(seg.value());
  if (t->segment_->view().board()) {
    t->board_.reset(new (std::nothrow) ShmBoard(ctx.rank, ctx.nranks, t->segment_->view()));
    if (!t->board_) return SystemError(t->who() + "out of memory");
  }
  t->blob_.segment = t->segment_->locator();
  t->blob_.ring_bytes = layout.ring_bytes;
  // The file system we actually created in, should /dev/shm be a link.
  t->blob_.shm_dev = t->segment_->device();
  AtInitPoint(InitPoint::kSegmentCreated, ctx.comm_tag);
  return std::unique_ptr<TransportInstance>(std::move(t));
}

bool ShmTransport::canConnect(int peer, const std::vector<std::string>& blobs) const {
  if (peer == ctx_.rank || peer < 0 || peer >= ctx_.nranks ||
      blobs.size() != static_cast<size_t>(ctx_.nranks))
    return false;
  const ShmBlob a = DecodeBlob(blobs[static_cast<size_t>(ctx_.rank)]);
  const ShmBlob b = DecodeBlob(blobs[static_cast<size_t>(peer)]);
  // Only symmetric conditions, so that both sides reach the same answer.
  return a.valid && b.valid && !a.segment.empty() && !b.segment.empty() && !a.host_id.empty() &&
         a.host_id == b.host_id && a.shm_dev != 0 && a.shm_dev == b.shm_dev && a.pidns == b.pidns &&
         a.uid == b.uid;
}

Status ShmTransport::connectPeer(int peer, const std::string& blob_text,
                                 std::vector<std::unique_ptr<Endpoint>>* channels) {
  const ShmBlob b = DecodeBlob(blob_text);
  if (!b.valid || b.segment.empty() || !segment_)
    return InternalError("no shm segment on one side (canConnect was false)");
  if (!IsSegmentLocatorOf(b.segment, b.pid))
    return RemoteError("its shm blob names " + b.segment + ", not a segment of its own process");
  const SegmentView& mine = segment_->view();
  const int rx_slot = mine.slotOf(peer);
  if (rx_slot < 0) return InternalError("not a local peer of this rank's segment");
  std::string bell = b.doorbell;
  if (static_cast<size_t>(peer) < ctx_.doorbells.size() &&
      !ctx_.doorbells[static_cast<size_t>(peer)].empty())
    bell = ctx_.doorbells[static_cast<size_t>(peer)];
  // The link first: a peer that died since it published its blob is named as such.
  BRAID_ASSIGN_OR_RETURN(auto link,
                         PeerLink::Open(peer, b.pid, HostName(ctx_, peer), bell, ctx_.causes));
  auto opened = OpenSegment(b.segment, ctx_.comm_tag, peer);
  if (!opened.ok()) {
    // A peer killed meanwhile loses its descriptors before its pidfd reports the exit: wait a
    // moment (on this error path only) so that it is named as what it is.
    if (link->pidfd() >= 0) {
      pollfd p{link->pidfd(), POLLIN, 0};
      (void)poll(&p, 1, 100);
    }
    return link->dead() ? link->deathError() : opened.status();
  }
  const SegmentView& theirs = *opened;
  link->watchDeparture(theirs.mapping, theirs.owner());
  const int tx_slot = theirs.slotOf(ctx_.rank);
  if (tx_slot < 0 || theirs.layout.nchannels != static_cast<uint32_t>(ctx_.nchannels) ||
      theirs.layout.ring_bytes != b.ring_bytes)
    return InternalError("segment " + b.segment + " does not match (" +
                         std::to_string(theirs.layout.nchannels) + " channels, rings of " +
                         std::to_string(theirs.layout.ring_bytes) + " bytes)");
  // A peer whose board differs (BRAID_ONESHOT_BYTES is agreed at init, so only a bug) is left
  // uncovered: the communicator then runs no call on the board.
  if (board_ && !board_->addPeer(peer, theirs, link))
    BRAID_WARN("shm: rank %d's small-message board does not match rank %d's; not using it", peer,
               ctx_.rank);
  for (uint32_t c = 0; c < static_cast<uint32_t>(ctx_.nchannels); ++c) {
    const auto ts = static_cast<uint32_t>(tx_slot);
    const auto rs = static_cast<uint32_t>(rx_slot);
    RingRef tx{theirs.control(ts, c), theirs.mapping, theirs.layout};
    RingRef rx{mine.control(rs, c), mine.mapping, mine.layout};
    std::unique_ptr<Endpoint> ep(new (std::nothrow)
                                     ShmEndpoint(link, std::move(tx), std::move(rx)));
    if (!ep) return SystemError("out of memory");
    ep->setTransport(this);
    channels->push_back(std::move(ep));
  }
  return Status::Ok();
}

Status ShmTransport::connect(const std::vector<int>& peers, const std::vector<std::string>& blobs,
                             Deadline deadline,
                             std::vector<std::vector<std::unique_ptr<Endpoint>>>* out) {
  AtInitPoint(InitPoint::kConnecting, ctx_.comm_tag);
  out->clear();
  out->resize(peers.size());
  // Nothing here waits on the peer (its segment exists since its blob was published), so the
  // deadline only bounds a long list.
  for (size_t i = 0; i < peers.size(); ++i) {
    const int peer = peers[i];
    Status st;
    if (peer < 0 || peer >= ctx_.nranks || blobs.size() != static_cast<size_t>(ctx_.nranks))
      st = InvalidArgument("bad peer or blob list");
    else if (deadline.expired())
      st = TimeoutError("deadline passed");
    else
      st = connectPeer(peer, blobs[static_cast<size_t>(peer)], &(*out)[i]);
    if (!st.ok()) {
      out->clear();
      return st.prepend(who() + "connect to rank " + std::to_string(peer) + ": ");
    }
  }
  AtInitPoint(InitPoint::kConnected, ctx_.comm_tag);
  return Status::Ok();
}

class ShmFactory final : public TransportFactory {
 public:
  const char* name() const override { return "shm"; }
  int priority() const override { return 200; }
  Result<std::unique_ptr<TransportInstance>> create(const TransportContext& ctx) override {
    return ShmTransport::Create(ctx);
  }
};

}  // namespace

void SetInitHookForTesting(InitHook hook) {
  g_init_hook.store(hook, std::memory_order_release);
}

}  // namespace shm

TransportFactory* ShmTransportFactory() {
  static shm::ShmFactory factory;
  return &factory;
}

}  // namespace braid
