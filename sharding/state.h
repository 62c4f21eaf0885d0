// The state behind a braidShard_t handle, shared by the step (step.cc), its optimizer
// (optimizer.cc) and the checkpoints (checkpoint.cc). Internal to the sharding library.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/layout.h"

// One registered bucket: this rank's shards of it.
struct Bucket {
  size_t numel = 0;
  size_t padded = 0;                       // multiple of s_os (so of s_g and s_p too: nesting)
  std::vector<unsigned char> param_shard;  // padded / s_p elements in the parameter dtype
  std::vector<unsigned char> grad_shard;   // padded / s_g: accumulated gradient (parameter dtype)
  std::vector<float> master, m, v;         // padded / s_os: the OS shard, fp32
  std::vector<float> grad32;               // padded / s_os: fp32 gradient between Prepare/Finish
  std::vector<unsigned char> full;         // gathered parameters while in use (s_p > 1)
  braidRequest_t gather = nullptr;         // in-flight gather into `full`
  double gather_issued = 0.0;              // its issue time (Now()), for the timeline
  bool gathered = false;                   // handed to the caller, not yet released
  int reduced = 0;                         // micro-batches reduced since the last step
  // hpZ (SecondaryCopy): this rank's slice hpz_pos of the full bucket, padded / hpz elements in
  // the parameter dtype or their INT8 encoding, kept from the first release after a gather from
  // the primary shard until the parameters change (update, checkpoint load).
  std::vector<unsigned char> secondary;
  bool secondary_valid = false;
  std::vector<unsigned char> encoded;  // an INT8 secondary gather's encodings, while in flight
  bool from_secondary = false;         // the gather in flight or in use reads the secondary copy
  int gathers = 0;  // gathers issued since the bucket's last gradient hand-over (0: a forward)
};

// The handle (global namespace: braidShard_t is `struct braidShard*` in the C API).
struct braidShard {
  braidComm_t comm = nullptr;  // the caller's, not owned
  braidShardConfig_t cfg{};
  braidDataType_t dtype = braidFloat32;  // parameters and gradients
  size_t esize = 4;
  int rank = 0, nranks = 0;
  braid::shard::RankLayout layout;
  // One full OS replica (the OS group of rank 0) sums the squared gradient, so that each element
  // counts once in the global norm whatever the replication of the OS shards.
  bool os_primary = false;
  // Views of `comm`, owned; NULL where the group is this rank alone.
  braidComm_t p_comm = nullptr, g_comm = nullptr, replica_comm = nullptr, redist_comm = nullptr;
  braidComm_t hpz_comm = nullptr;  // the hpZ group (SecondaryCopy with hpz > 1)
  // The boundary's two-step reduction (SplitBoundary): slices group and copies group.
  braidComm_t slices_comm = nullptr, copies_comm = nullptr;
  bool split_boundary = false;
  bool secondary = false;  // SecondaryCopy(cfg)
  std::vector<Bucket> buckets;
  // Two padded gradient buffers (s_g > 1): one bucket's reduce-scatter stays in flight while the
  // caller computes the next bucket's gradient; the other buffer takes that gradient.
  std::vector<unsigned char> scratch[2];
  int slot = 0;                      // the buffer the next reduce-scatter uses
  int pending_bucket = -1;           // bucket whose reduce-scatter is in flight, or -1
  braidRequest_t pending = nullptr;  // its request (in scratch[slot ^ 1])
  double pending_issued = 0.0;       // its issue time (Now()), for the timeline
  // Buffers of released gathered buckets, kept for the next gathers (at most two: the bucket in
  // use and the one prefetched, the planner's buffer estimate): a fresh buffer per gather costs
  // its page faults and zero-filling, milliseconds per bucket of tens of MB, in the caller's
  // gather time. A gather takes the smallest spare that holds its bucket, else allocates that
  // bucket's size; the largest buffers are the ones kept.
  std::vector<std::vector<unsigned char>> spare_full;
  int last_gather = -1, direction = 1;
  bool prefetch = true;  // braidShardSetPrefetch
  int64_t t = 0;         // optimizer steps applied
  // Between PrepareStep and FinishStep; `skipped`: the prepared step found an overflow.
  bool prepared = false, skipped = false;
  // Dynamic loss scaler (PyTorch's GradScaler) and its state.
  bool scaler_on = false;
  braidShardLossScaler_t scaler{};
  float scale = 1.0f;
  int64_t good_steps = 0;
  std::string error = "no error";
  // Traffic accounting (braidShardTraffic): for each group the step communicates over, its size
  // and whether all of it is on this rank's node; computed once from the layout at create.
  enum Group {
    kGroupP,
    kGroupG,
    kGroupReplica,
    kGroupRedist,
    kGroupAll,
    kGroupHpz,
    kGroupSlices,
    kGroupCopies,
    kGroups
  };
  int group_size[kGroups] = {1, 1, 1, 1, 1, 1, 1, 1};
  bool group_intra[kGroups] = {true, true, true, true, true, true, true, true};
  braidShardTraffic_t traffic{};

  // Counts what one rank sends in a collective over `group`, by the ring definition of
  // shard.h: all-gather / reduce-scatter of `count` elements per rank, all-reduce of `count`.
  void CountAllGather(int purpose, int group, size_t count, size_t elem) {
    Count(purpose, group, static_cast<uint64_t>(group_size[group] - 1) * count * elem);
  }
  // The same for a quantized all-gather / reduce-scatter: `bytes` per rank (the encoding).
  void CountEncoded(int purpose, int group, uint64_t bytes) {
    Count(purpose, group, static_cast<uint64_t>(group_size[group] - 1) * bytes);
  }
  void CountAllReduce(int purpose, int group, size_t count, size_t elem) {
    const uint64_t k = static_cast<uint64_t>(group_size[group]);
    Count(purpose, group, 2 * (k - 1) * count * elem / k);
  }
  // Timeline (braidShardTraffic's exposed/hidden seconds), steady clock in seconds.
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Waits for a non-blocking collective issued at `issued`: the time until now was hidden behind
  // the caller's work (at most: it may have finished earlier), the wait itself is exposed.
  braidResult_t WaitTimed(braidRequest_t* req, double issued) {
    const double need = Now();
    braidResult_t rc = braidWait(req, -1);
    traffic.hiddenSeconds += need > issued ? need - issued : 0.0;
    traffic.exposedSeconds += Now() - need;
    return rc;
  }
  // A blocking collective that started at `start`: all of it was exposed.
  void Exposed(double start) {
    const double d = Now() - start;
    traffic.exposedSeconds += d > 0.0 ? d : 0.0;
  }
  void Count(int purpose, int group, uint64_t bytes) {
    if (group_size[group] < 2) return;  // no communicator: nothing moves
    (group_intra[group] ? traffic.intra : traffic.inter)[purpose] += bytes;
    (group_intra[group] ? traffic.intraTotal : traffic.interTotal) += bytes;
    ++traffic.collectives;
  }

  braidResult_t Fail(braidResult_t code, const std::string& what) {
    error = "rank " + std::to_string(rank) + ": " + what;
    return code;
  }
  braidResult_t CommFail(braidResult_t code, const char* op, braidComm_t c) {
    return Fail(code, std::string(op) + " failed: " + braidGetLastError(c ? c : comm));
  }
  int S(int state) const { return braid::shard::SizeOf(braid::shard::FactorOf(cfg, state)); }
};

namespace braid::shard {

// Agreement across ranks: for each value, max and min over the comm in one all-reduce (the max
// of v and of -v).
braidResult_t MinMax(braidComm_t comm, const std::vector<int64_t>& v, std::vector<int64_t>* mn,
                     std::vector<int64_t>* mx);
// Agrees on a local outcome: returns braidSuccess when every rank's `local_error` is empty;
// otherwise this rank's own message, or one that points at the other rank's, with `code`.
braidResult_t Agree(braidShard* sh, const char* api, const std::string& local_error,
                    braidResult_t code);
// Waits for every prefetch in flight (the step and checkpoints read or rewrite the P shards).
braidResult_t FinishPrefetches(braidShard* sh, const char* api);
// Waits for the reduce-scatter in flight, if any, and accumulates its shard.
braidResult_t FinishPending(braidShard* sh);

}  // namespace braid::shard
