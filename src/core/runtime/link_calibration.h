// Link calibration: the alpha-beta parameters the tuner ranks algorithms with, measured over the
// communicator's own transports at init (spec/algorithms.md section 4), loaded from a cached
// profile (BRAID_LINK_PROFILE), inherited from a parent communicator, or the constant defaults
// (BRAID_LINK_CALIBRATION=0).
//
// Every rank must build the same tuner table, or ranks would pick different algorithms for one
// collective. So the model is decided once and shared: rank 0 chooses the source (its own
// environment and profile win, as for BRAID_NCHANNELS) and tells every rank over the bootstrap;
// when measuring, one pair of ranks per link class measures (the lower rank pings, the other
// echoes) and sends its result over the bootstrap again. Every rank, the measuring ones
// included, then parses the same bytes, so the doubles are identical everywhere.
//
// Pairs: intra-node, rank 0 with the next rank on its node (or the first two ranks of the first
// node that has two); inter-node, rank 0 with the first rank of another node (one NIC of each:
// with several NICs a node, the measured bandwidth is scaled to the node's link, see
// LinkCalibrationSetup::nics_per_node). Pairs run one
// after another in that order on every rank, so a rank in both pairs cannot deadlock them.
// Cost: a few ping-pongs of 8 bytes (alpha, the median one-way time) and of 512 KiB (beta, from
// the median one-way time less alpha) per class: milliseconds, while the other ranks sleep in
// the bootstrap. Every wait is bounded by the init's deadline and abortable; a peer that dies
// fails the init with the transport's error naming it.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/tuner.h"
#include "core/net/bootstrap.h"
#include "core/base/clock.h"
#include "core/net/doorbell.h"
#include "core/base/status.h"
#include "transport/transport.h"

namespace braid {

// Where one link class's parameters came from.
enum class LinkOrigin : uint8_t { kDefault = 0, kMeasured = 1, kProfile = 2, kInherited = 3 };
const char* LinkOriginName(LinkOrigin o);

// The model a communicator's tuner is built with, and the origin of each class.
struct CalibratedLinks {
  LinkModel model;
  LinkOrigin origin[kNumCalibratedClasses] = {LinkOrigin::kDefault, LinkOrigin::kDefault};
  // "intra 2.10 us 7.90 GB/s (measured), inter 25.00 us 1.20 GB/s (default)"
  std::string describe() const;
};

struct LinkCalibrationSetup {
  int rank = 0;
  int nranks = 1;
  const GroupLayout* layout = nullptr;  // required
  // The stream a peer is measured over (the communicator's lane 0 to it).
  std::function<Endpoint*(int peer)> endpoint;
  Doorbell* doorbell = nullptr;  // wakes this rank when a shm peer wrote or read
  int64_t spin_us = 50;          // BRAID_SPIN_US: spin this long before sleeping, as the engine
  bool enabled = true;           // BRAID_LINK_CALIBRATION
  std::string profile_path;      // BRAID_LINK_PROFILE ("" = none)
  // A parent communicator's model (split, shrink): taken as is, nothing is measured.
  std::optional<LinkModel> inherited;
  // The NICs of a node (NicsPerNode, placement.h; every rank computes the same): the model's
  // nics_per_node. `inter` is one node's link, all its NICs together, while the inter-node pair
  // measures one rank's NIC to one peer's: a measured inter bandwidth is taken times this (a
  // profile holds the model's value, written so; the defaults are a node's link already).
  int nics_per_node = 1;
  std::string where;  // "rank 0/4 on host h" for messages
};

// Decides, measures if needed and shares the model (collective over `bs`: every rank of the
// communicator calls it, after the transports are connected and before the engine starts).
// On rank 0 it also writes the profile when one was asked for and measured.
Result<CalibratedLinks> CalibrateLinks(Bootstrap& bs, const LinkCalibrationSetup& setup,
                                       Deadline deadline);

// How many pair measurements this process took part in (either side), so tests can observe that
// a profile spared them without timing anything.
int LinkMeasurementsRun();

}  // namespace braid
