// The algorithm interface and the registry of built-in algorithms.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

struct LinkModel;  // tuner.h

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // Name used by the tuner grammar and -A flags: "ring", "rd", "tree", "pairwise", ...
  virtual const char* name() const = 0;
  // Whether this algorithm can serve the request (collective, shape, count).
  virtual bool supports(const CollArgs& args) const = 0;
  // Builds `rank`'s part of the schedule. Pure: same inputs, same output; no I/O.
  virtual Result<RankSchedule> build(const CollArgs& args, int rank) const = 0;
  // Predicted seconds for `args` on `model`, cheap enough for the tuner to call at comm init at
  // any scale (no simulation). Built-in algorithms override it with a closed alpha-beta form;
  // the default walks rank 0's schedule (cost_model.cc).
  virtual double estimate_seconds(const CollArgs& args, const LinkModel& model) const;
  // Whether the tuner ranks it on `model` at all (BRAID_ALGO may still name it wherever
  // supports() holds): for an algorithm measured to lose where the cost model cannot tell.
  virtual bool rankedOn(const LinkModel&) const { return true; }
  // The same for one request: for an algorithm the model prices right over part of its range
  // only (PAT's pack and unpack copies, which the model does not charge). The tuner asks this.
  virtual bool rankedFor(const CollArgs&, const LinkModel& model) const { return rankedOn(model); }
};

// All built-in algorithms, in a stable order.
const std::vector<const Algorithm*>& AllAlgorithms();
// The algorithm called `name` (the tuner's or a testing one, builtin_algorithms.h), or nullptr.
const Algorithm* FindAlgorithm(const std::string& name);

}  // namespace braid
