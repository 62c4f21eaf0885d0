// The registry of built-in algorithms and the names of the schedule IR's enums.
#include "algorithms/algorithm.h"
#include "algorithms/board_schedules.h"
#include "algorithms/builtin_algorithms.h"

namespace braid {

const std::vector<const Algorithm*>& AllAlgorithms() {
  // Order matters only for ties in the tuner: bandwidth algorithms first, "ordered" (chosen by
  // BRAID_DETERMINISTIC, never cheaper) last.
  static const std::vector<const Algorithm*> all = {
      &RingAlgorithm(),
      &RecursiveDoublingAlgorithm(),
      &RabenseifnerAlgorithm(),
      &BinomialTreeAlgorithm(),
      &BruckAlgorithm(),
      &PatAlgorithm(),
      &PairwiseAlgorithm(),
      &DisseminationAlgorithm(),
      &OrderedReductionAlgorithm(),
  };
  return all;
}

const std::vector<const Algorithm*>& HierarchicalAlgorithms() {
  // HO-Ring first: it wins ties with H-Ring (it is never slower where it applies). The 3-level
  // variants serve only layouts with device groups.
  static const std::vector<const Algorithm*> hier = {
      &HoRingAlgorithm(),  &HierRingAlgorithm(), &HoRing3Algorithm(),    &HierRing3Algorithm(),
      &Torus2dAlgorithm(), &Torus2d3Algorithm(), &HierLeaderAlgorithm(), &HierTreeAlgorithm(),
      &HierPatAlgorithm(), &RailRingAlgorithm(),
  };
  return hier;
}

const Algorithm* QuantizedAlgorithmFor(CollKind kind) {
  switch (kind) {
    case CollKind::kAllGather:
      return &QuantizedAllGatherAlgorithm();
    case CollKind::kReduceScatter:
      return &QuantizedReduceScatterAlgorithm();
    default:
      return nullptr;
  }
}

const std::vector<const Algorithm*>& TestingAlgorithms() {
  static const std::vector<const Algorithm*> testing = {&TestCodecAllReduceAlgorithm(),
                                                        &BoardPutAllGatherAlgorithm()};
  return testing;
}

const Algorithm* FindAlgorithm(const std::string& name) {
  // Issue 10's short name for the leader-based all-reduce (BRAID_ALGO="allreduce:leader").
  if (name == "leader") return &HierLeaderAlgorithm();
  if (name == BoardAlgorithm().name()) return &BoardAlgorithm();
  for (const auto* list : {&AllAlgorithms(), &HierarchicalAlgorithms(), &TestingAlgorithms()})
    for (const Algorithm* a : *list)
      if (name == a->name()) return a;
  for (CollKind k : {CollKind::kAllGather, CollKind::kReduceScatter})
    if (name == QuantizedAlgorithmFor(k)->name()) return QuantizedAlgorithmFor(k);
  return nullptr;
}

const char* CollKindName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce:
      return "allreduce";
    case CollKind::kReduceScatter:
      return "reducescatter";
    case CollKind::kAllGather:
      return "allgather";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kReduce:
      return "reduce";
    case CollKind::kAllToAll:
      return "alltoall";
    case CollKind::kSendRecv:
      return "sendrecv";
    case CollKind::kBarrier:
      return "barrier";
  }
  return "?";
}

const char* StepOpKindName(StepOpKind k) {
  switch (k) {
    case StepOpKind::kSend:
      return "send";
    case StepOpKind::kRecv:
      return "recv";
    case StepOpKind::kRecvReduce:
      return "recv-reduce";
    case StepOpKind::kCopy:
      return "copy";
    case StepOpKind::kReduce:
      return "reduce";
    case StepOpKind::kScale:
      return "scale";
    case StepOpKind::kDivide:
      return "divide";
    case StepOpKind::kQuantize:
      return "quantize";
    case StepOpKind::kDequantize:
      return "dequantize";
    case StepOpKind::kDequantizeReduce:
      return "dequantize-reduce";
    case StepOpKind::kExpose:
      return "expose";
    case StepOpKind::kGet:
      return "get";
    case StepOpKind::kPut:
      return "put";
    case StepOpKind::kCombine:
      return "combine";
    case StepOpKind::kSignal:
      return "signal";
    case StepOpKind::kWait:
      return "wait";
  }
  return "?";
}

}  // namespace braid
