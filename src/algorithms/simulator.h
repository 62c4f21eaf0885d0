// The simulator: predicts a schedule's time on a modelled network (alpha-beta per link class,
// one send and one receive port per rank) by executing all ranks' schedules as an event
// simulation. Used by the tuner's calibration tests and tests/sim.
#pragma once

#include "algorithms/algorithm.h"
#include "algorithms/tuner.h"
#include "core/status.h"

namespace braid {

// Predicted seconds for `algo` serving `args` on `model`; ranks on different nodes of
// args.layout use model.inter, same node model.intra (no layout: all intra).
Result<double> SimulateSeconds(const Algorithm& algo, const CollArgs& args, const LinkModel& model);

}  // namespace braid
