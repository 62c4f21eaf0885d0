#include "core/runtime/link_calibration.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <vector>

#include "algorithms/link_profile.h"
#include "core/base/log.h"

namespace braid {
namespace {

// Ping-pong rounds per pair. The first round of each kind warms the path up (page faults, the
// peer still finishing its previous pair) and is not counted; the rest give an odd number of
// samples for the median, which ignores a round where a rank was descheduled (ranks outnumber
// cores on small machines).
constexpr int kLatencyRounds = 9;
constexpr size_t kLatencyBytes = 8;
// The bandwidth probe streams this many bytes one way and gets an 8-byte answer. Several MiB,
// not one message of a few hundred KiB: a shaped or policed link (tc tbf, a switch's burst
// allowance) lets a burst of about a few ms of traffic through at line rate, and a probe that
// fits in it measures the line, not the link (a 512 KiB probe read a 1 Gbit/s tbf link, burst
// 500 KB, as 2 Gbit/s). With 4 MiB a 500 KB burst inflates the estimate by at most 1.14x.
constexpr int kBandwidthRounds = 3;
constexpr size_t kBandwidthBytes = 4 << 20;

std::atomic<int> g_measurements{0};

struct Pair {
  int a = -1;  // measures (pings)
  int b = -1;  // echoes
  bool valid() const { return a >= 0; }
};

// The two ranks that measure `c` on this layout (invalid when the communicator has no such
// link). Every rank computes the same pairs from the same layout.
Pair PairFor(LinkClass c, const GroupLayout& l, int nranks) {
  const int n = std::min<int>(nranks, static_cast<int>(l.node_of.size()));
  if (c == LinkClass::kInterNode) {
    if (l.nnodes <= 1) return {};
    for (int r = 1; r < n; ++r)
      if (l.node_of[r] != l.node_of[0]) return {0, r};
    return {};
  }
  // Nodes are numbered in order of first appearance, so node 0 holds rank 0: the first node
  // with two ranks is rank 0's whenever rank 0 has a local peer.
  const int nnodes = std::max(l.nnodes, 1);
  std::vector<int> first(nnodes, -1);
  std::vector<Pair> pair_of(nnodes);
  for (int r = 0; r < n; ++r) {
    const int node = l.node_of[r];
    if (node < 0 || node >= nnodes) continue;
    if (first[node] < 0)
      first[node] = r;
    else if (!pair_of[node].valid())
      pair_of[node] = {first[node], r};
  }
  for (const Pair& p : pair_of)
    if (p.valid()) return p;
  return {};
}

Status StreamFailure(const Endpoint& ep, const Deadline& deadline, const char* what) {
  if (deadline.aborted())
    return AbortedError(std::string("link calibration aborted while ") + what + " " +
                        ep.describe());
  return TimeoutError(std::string("link calibration: timed out ") + what + " " + ep.describe() +
                      " (the init deadline, BRAID_TIMEOUT, passed; set BRAID_LINK_CALIBRATION=0 "
                      "to skip the measurement)");
}

// Moves exactly `len` bytes over `ep` (sending or receiving). Waits like the engine: spins for
// spin_us after the last progress, then sleeps in poll() on the endpoint's fds and this rank's
// doorbell, so that measuring ranks do not starve the others of the machine's cores.
Status MoveExactly(Endpoint& ep, bool sending, std::byte* data, size_t len,
                   const LinkCalibrationSetup& s, const Deadline& deadline) {
  size_t done = 0;
  auto last_progress = Clock::now();
  const auto spin = std::chrono::microseconds(s.spin_us);
  std::vector<pollfd> fds;
  while (done < len) {
    auto r = sending ? ep.send(data + done, len - done) : ep.recv(data + done, len - done);
    if (!r.ok()) return r.status();
    if (*r > 0) {
      done += *r;
      last_progress = Clock::now();
      continue;
    }
    if (deadline.expired())
      return StreamFailure(ep, deadline, sending ? "sending to" : "waiting for");
    if (Clock::now() - last_progress < spin) {
      sched_yield();
      continue;
    }
    fds.clear();
    if (s.doorbell) fds.push_back({s.doorbell->fd(), POLLIN, 0});
    if (!ep.arm(sending, !sending, fds))
      (void)poll(fds.data(), fds.size(), deadline.remainingMs(kAbortCheckMs));
    ep.disarm(fds);
    if (s.doorbell) s.doorbell->drain();
  }
  return Status::Ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];  // odd sizes only
}

// Rounds of `bytes` from `a` to `b` answered by `answer` bytes back, as `a` (timing) or `b`
// (echoing); returns the median round time in seconds on `a`, 0 on `b`.
Result<double> PingPong(Endpoint& ep, bool pinger, size_t bytes, size_t answer, int rounds,
                        std::vector<std::byte>& buf, const LinkCalibrationSetup& s,
                        const Deadline& deadline) {
  std::vector<double> round_s;
  for (int i = 0; i <= rounds; ++i) {  // round 0 warms up
    if (pinger) {
      const auto t0 = Clock::now();
      BRAID_RETURN_IF_ERROR(MoveExactly(ep, true, buf.data(), bytes, s, deadline));
      BRAID_RETURN_IF_ERROR(MoveExactly(ep, false, buf.data(), answer, s, deadline));
      const double rtt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i > 0) round_s.push_back(rtt);
    } else {
      BRAID_RETURN_IF_ERROR(MoveExactly(ep, false, buf.data(), bytes, s, deadline));
      BRAID_RETURN_IF_ERROR(MoveExactly(ep, true, buf.data(), answer, s, deadline));
    }
  }
  return pinger ? Median(std::move(round_s)) : 0.0;
}

// This rank's side of one pair's measurement. On the pinger: the measured parameters, or
// nullopt (with a warning) when they are not believable. On the echoer: nullopt.
Result<std::optional<LinkParams>> MeasurePair(LinkClass c, const Pair& pair,
                                              const LinkCalibrationSetup& s,
                                              const Deadline& deadline) {
  const bool pinger = s.rank == pair.a;
  Endpoint* ep = s.endpoint(pinger ? pair.b : pair.a);
  if (!ep) return InternalError("link calibration: no stream to the peer");
  g_measurements.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::byte> buf(kBandwidthBytes, std::byte{0});
  BRAID_ASSIGN_OR_RETURN(double small_rtt, PingPong(*ep, pinger, kLatencyBytes, kLatencyBytes,
                                                    kLatencyRounds, buf, s, deadline));
  BRAID_ASSIGN_OR_RETURN(double big, PingPong(*ep, pinger, kBandwidthBytes, kLatencyBytes,
                                              kBandwidthRounds, buf, s, deadline));
  if (!pinger) return std::optional<LinkParams>();
  LinkParams p;
  p.alpha_s = small_rtt / 2;
  // The stream's round less a small round trip is what the bytes themselves took. On a loaded
  // machine the small round can come out as large as the big one (a descheduled echo): then the
  // whole time is the honest bound, not a negative difference.
  const double transfer = big - small_rtt >= big / 2 ? big - small_rtt : big;
  p.beta_bytes_s = transfer > 0 ? static_cast<double>(kBandwidthBytes) / transfer : -1;
  Status ok = CheckLinkParams(p);
  if (!ok.ok()) {
    BRAID_WARN(
        "%s: measured %s link with %s is not believable (%s); using the default model for "
        "it",
        s.where.c_str(), LinkClassName(c), ep->describe().c_str(), ok.message().c_str());
    return std::optional<LinkParams>();
  }
  return std::optional<LinkParams>(p);
}

// The model's NICs a node (LinkCalibrationSetup::nics_per_node, bounded as braidLinkParams_t's).
int NicsOf(const LinkCalibrationSetup& s) {
  return std::clamp(s.nics_per_node, 1, 1024);
}

// Rank 0's decision, sent to every rank: 'M' = measure; 'U' + origin per class + profile text
// (the classes whose origin is not kDefault) = use this model.
std::string EncodeUse(const CalibratedLinks& l) {
  std::string m = "U";
  LinkProfile p;
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    m += static_cast<char>(l.origin[c]);
    if (l.origin[c] != LinkOrigin::kDefault)
      p.set(static_cast<LinkClass>(c), l.model.of(static_cast<LinkClass>(c)));
  }
  if (p.has[0] || p.has[1]) m += FormatLinkProfile(p);
  return m;
}

void SetClass(LinkModel* m, LinkClass c, const LinkParams& p) {
  (c == LinkClass::kIntraNode ? m->intra : m->inter) = p;
}

Result<CalibratedLinks> DecodeUse(const std::string& m) {
  auto bad = [](const std::string& why) {
    return RemoteError("malformed link model from rank 0: " + why);
  };
  if (m.size() < 1 + kNumCalibratedClasses || m[0] != 'U') return bad("no decision");
  CalibratedLinks l;
  bool any = false;
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    const auto o = static_cast<uint8_t>(m[1 + c]);
    if (o > static_cast<uint8_t>(LinkOrigin::kInherited)) return bad("unknown origin");
    l.origin[c] = static_cast<LinkOrigin>(o);
    any = any || l.origin[c] != LinkOrigin::kDefault;
  }
  if (!any) return l;
  auto p = ParseLinkProfile(std::string_view(m).substr(1 + kNumCalibratedClasses));
  if (!p.ok()) return bad(p.status().message());
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    if (l.origin[c] == LinkOrigin::kDefault) continue;
    if (!p->has[c]) return bad("a class without its parameters");
    SetClass(&l.model, static_cast<LinkClass>(c), p->params[c]);
  }
  return l;
}

// Rank 0: the model to use without measuring, or nullopt to measure. `profile` receives the
// file's classes when it parsed (kept when the new profile is written).
std::optional<CalibratedLinks> DecideWithoutMeasuring(const LinkCalibrationSetup& s,
                                                      const bool needed[kNumCalibratedClasses],
                                                      std::optional<LinkProfile>* profile) {
  CalibratedLinks l;
  if (s.inherited) {
    l.model = *s.inherited;
    for (auto& o : l.origin) o = LinkOrigin::kInherited;
    return l;
  }
  if (!s.enabled) return l;
  if (!s.profile_path.empty()) {
    auto loaded = LoadLinkProfile(s.profile_path);
    if (!loaded.ok()) {
      BRAID_WARN(
          "%s: ignoring BRAID_LINK_PROFILE: %s; measuring the links instead (the file is "
          "rewritten)",
          s.where.c_str(), loaded.status().message().c_str());
    } else if (*loaded) {
      *profile = **loaded;
      bool covers = true;
      for (int c = 0; c < kNumCalibratedClasses; ++c) {
        if (!(*profile)->has[c]) {
          covers = covers && !needed[c];
          continue;
        }
        SetClass(&l.model, static_cast<LinkClass>(c), (*profile)->params[c]);
        l.origin[c] = LinkOrigin::kProfile;
      }
      if (covers) return l;
      BRAID_INFO("%s: link profile %s lacks a link class this communicator has; measuring",
                 s.where.c_str(), s.profile_path.c_str());
    }
  }
  bool any_needed = false;
  for (int c = 0; c < kNumCalibratedClasses; ++c) any_needed = any_needed || needed[c];
  if (!any_needed) {  // one rank: no link to measure (a profile's classes were taken above)
    if (*profile) return l;
    return CalibratedLinks{};
  }
  return std::nullopt;
}

}  // namespace

const char* LinkOriginName(LinkOrigin o) {
  switch (o) {
    case LinkOrigin::kDefault:
      return "default";
    case LinkOrigin::kMeasured:
      return "measured";
    case LinkOrigin::kProfile:
      return "profile";
    case LinkOrigin::kInherited:
      return "inherited";
  }
  return "?";
}

std::string CalibratedLinks::describe() const {
  std::string s;
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    const auto cls = static_cast<LinkClass>(c);
    if (c) s += ", ";
    s += DescribeLinkParams(cls, model.of(cls)) + " (" + LinkOriginName(origin[c]) + ")";
  }
  if (model.nics_per_node > 1) s += ", " + std::to_string(model.nics_per_node) + " NICs per node";
  return s;
}

int LinkMeasurementsRun() {
  return g_measurements.load(std::memory_order_relaxed);
}

Result<CalibratedLinks> CalibrateLinks(Bootstrap& bs, const LinkCalibrationSetup& s,
                                       Deadline deadline) {
  if (!s.layout) return InternalError("link calibration without a layout");
  Pair pairs[kNumCalibratedClasses];
  bool needed[kNumCalibratedClasses];
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    pairs[c] = PairFor(static_cast<LinkClass>(c), *s.layout, s.nranks);
    needed[c] = pairs[c].valid();
  }

  // Round 1: rank 0's decision.
  std::string decision;
  std::optional<LinkProfile> old_profile;
  if (s.rank == 0) {
    auto use = DecideWithoutMeasuring(s, needed, &old_profile);
    decision = use ? EncodeUse(*use) : "M";
  }
  BRAID_ASSIGN_OR_RETURN(auto all, bs.allGather(decision, deadline));
  if (all.empty()) return InternalError("link calibration: empty bootstrap round");
  if (all[0] != "M") {
    BRAID_ASSIGN_OR_RETURN(CalibratedLinks l, DecodeUse(all[0]));
    // (The decision carries the links' parameters; an inherited model's NICs are its own, as
    // its inter bandwidth counts them.)
    l.model.nics_per_node = s.inherited ? s.inherited->nics_per_node : NicsOf(s);
    if (s.rank == 0) BRAID_INFO("link model: %s", l.describe().c_str());
    return l;
  }

  // Measure, pair by pair in class order on every rank.
  const auto t0 = Clock::now();
  std::string mine;
  LinkProfile measured;
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    const Pair& p = pairs[c];
    if (!p.valid() || (s.rank != p.a && s.rank != p.b)) continue;
    auto r = MeasurePair(static_cast<LinkClass>(c), p, s, deadline);
    if (!r.ok())
      return Status(r.status())
          .prepend("measuring the " + std::string(LinkClassName(static_cast<LinkClass>(c))) +
                   "-node link: ");
    if (*r) measured.set(static_cast<LinkClass>(c), **r);
  }
  if (measured.has[0] || measured.has[1]) mine = FormatLinkProfile(measured);

  // Round 2: the pingers' results; every rank parses the same bytes.
  BRAID_ASSIGN_OR_RETURN(all, bs.allGather(mine, deadline));
  CalibratedLinks l;
  for (int c = 0; c < kNumCalibratedClasses; ++c) {
    const Pair& p = pairs[c];
    if (!p.valid() || p.a >= static_cast<int>(all.size()) || all[p.a].empty()) continue;
    auto parsed = ParseLinkProfile(all[p.a]);
    if (!parsed.ok())
      return RemoteError("malformed link measurement from rank " + std::to_string(p.a) + ": " +
                         parsed.status().message());
    if (!parsed->has[c]) continue;  // not believable there: the default (it warned)
    LinkParams v = parsed->params[c];
    // One NIC to one NIC: the node's link is its NICs together.
    if (c == static_cast<int>(LinkClass::kInterNode)) v.beta_bytes_s *= NicsOf(s);
    SetClass(&l.model, static_cast<LinkClass>(c), v);
    l.origin[c] = LinkOrigin::kMeasured;
  }
  l.model.nics_per_node = NicsOf(s);

  if (s.rank == 0) {
    std::string saved;
    if (!s.profile_path.empty()) {
      // Classes of an older profile that this communicator could not measure are kept.
      LinkProfile out = old_profile ? *old_profile : LinkProfile{};
      bool any = false;
      for (int c = 0; c < kNumCalibratedClasses; ++c) {
        if (l.origin[c] != LinkOrigin::kMeasured) continue;
        out.set(static_cast<LinkClass>(c), l.model.of(static_cast<LinkClass>(c)));
        any = true;
      }
      Status st = any ? SaveLinkProfile(s.profile_path, out) : Status::Ok();
      if (!st.ok())
        BRAID_WARN("%s: could not write BRAID_LINK_PROFILE: %s", s.where.c_str(),
                   st.message().c_str());
      else if (any)
        saved = "; written to " + s.profile_path;
    }
    BRAID_INFO("link model: %s (calibrated in %.1f ms)%s", l.describe().c_str(),
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), saved.c_str());
  }
  return l;
}

}  // namespace braid
