// The `lins` preset at init (braidShardPresetPlanned): on 4 ranks of 2 emulated nodes
// (BRAID_HOSTID) every rank plans for the comm's own 2 x 2 shape, gets the same valid
// configuration, and it is the one braidShardPlan returns for that shape; the sharded step then
// accepts it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "multirank/harness.h"

namespace {

using braid_test::AllSucceeded;
using braid_test::DescribeOutcomes;
using braid_test::JobOptions;
using braid_test::RunJob;

// The sharding layer's error after the failed condition.
#undef CHECK_OR_FAIL
#define CHECK_OR_FAIL(cond, what)                                                              \
  CHECK_OR_FAIL_WITH((std::string("shard: ") + braidShardGetLastError(nullptr)).c_str(), cond, \
                     "%s", what)

TEST(ShardPlanAtInit, EveryRankGetsThePlanForTheCommsShape) {
  JobOptions opt;
  opt.nranks = 4;
  opt.timeout_s = 60;
  opt.init = false;
  opt.env = {{"BRAID_TIMEOUT", "20"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    const std::string host = "plannode" + std::to_string(rank / 2);
    setenv("BRAID_HOSTID", host.c_str(), 1);
    braidComm_t comm = nullptr;
    CHECK_OR_FAIL(braidCommInitRank(&comm, nranks, id, rank) == braidSuccess, "init");
    braidShardModel_t m = BRAID_SHARD_MODEL_INITIALIZER;
    m.params = 1e9;
    m.layers = 8;
    m.hidden = 2048;
    m.seq = 2048;
    braidShardCluster_t c = BRAID_SHARD_CLUSTER_INITIALIZER;
    c.deviceMemory = 12e9;  // 16 Phi = 16 GB does not fit: something must be sharded
    c.link = {2e-6, 8e9, 25e-6, 1.2e9, 1};
    braidShardConfig_t cfg;
    CHECK_OR_FAIL(braidShardPresetPlanned(comm, &m, &c, nullptr, &cfg) == braidSuccess, "plan");
    CHECK_OR_FAIL(cfg.ranksPerNode == 2 && cfg.nodes == 2, "shape of the comm");
    CHECK_OR_FAIL(std::strcmp(cfg.preset, "lins") == 0, "preset name");
    CHECK_OR_FAIL(braidShardConfigValidate(&cfg, nullptr, 0) == braidSuccess, "valid");
    c.ranksPerNode = 2;
    c.nodes = 2;
    braidShardPlan_t plan{};
    CHECK_OR_FAIL(braidShardPlan(&m, &c, nullptr, &plan) == braidSuccess, "plan directly");
    const bool same = std::memcmp(&plan.best.config, &cfg, sizeof cfg) == 0;
    braidShardPlanFree(&plan);
    CHECK_OR_FAIL(same, "the same configuration as braidShardPlan");
    CHECK_OR_FAIL(
        cfg.p.intra * cfg.p.inter * cfg.g.intra * cfg.g.inter * cfg.os.intra * cfg.os.inter > 1,
        "something sharded under 12 GB");
    // The step takes it (a small model of the same shape).
    const std::vector<size_t> buckets = {64, 32};
    std::vector<std::vector<float>> init = {std::vector<float>(64, 0.5f),
                                            std::vector<float>(32, 0.5f)};
    const void* ptrs[2] = {init[0].data(), init[1].data()};
    braidShard_t sh = nullptr;
    CHECK_OR_FAIL(
        braidShardCreate(comm, &cfg, 2, buckets.data(), braidFloat32, ptrs, &sh) == braidSuccess,
        "create");
    braidShardDestroy(sh);
    // No model: refused with a message, no crash.
    CHECK_OR_FAIL(
        braidShardPresetPlanned(comm, nullptr, &c, nullptr, &cfg) == braidErrInvalidArgument,
        "NULL model refused");
    braidCommDestroy(comm);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
