/*
 * A small MLP trained data-parallel with braid's C API alone (no Python, no C++), to show that
 * any framework that can call C can use the sharded step:
 *
 *   braidrun -n 2 -- build/examples/c_trainer --preset zero3 --steps 30
 *
 * The model is 8 -> 16 (tanh) -> 1, registered as two buckets (the hidden layer, the output
 * layer); each rank draws its own synthetic samples of a fixed "teacher" function and minimises
 * the mean squared error. Per micro-batch the trainer gathers each bucket for the forward pass,
 * gathers again in reverse for the backward pass and hands each bucket's gradient to braid; at
 * the accumulation boundary braidShardStepEx() runs AdamW with gradient-norm clipping on braid's
 * shards. Rank 0 prints the loss per step (the mean over all ranks' samples).
 *
 * It checks itself and exits non-zero otherwise: every rank sees the same loss and the same
 * parameters every step (an all-reduce of max and min), and the loss decreases. The last line,
 * printed by rank 0 only when both hold, is what the ctest looks for.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid/braid.h"
#include "braid/shard.h"

enum { kIn = 8, kHidden = 16, kBatch = 16, kMicrobatches = 2 };
/* Bucket 0: W1 (kHidden x kIn) then b1 (kHidden); bucket 1: W2 (kHidden) then b2 (1). */
enum { kBucket0 = kHidden * kIn + kHidden, kBucket1 = kHidden + 1 };

/* A deterministic generator, so every run (and every rank's initial parameters) is the same. */
static uint64_t Next(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}
static float Uniform(uint64_t* s) { /* in [-1, 1) */
  return (float)Next(s) / (float)(1u << 30) - 1.0f;
}

/* The function to learn. */
static float Teacher(const float* x) {
  float y = 0.5f * x[0] * x[1] - 0.3f * x[2] + 0.2f;
  for (int j = 3; j < kIn; ++j) y += 0.1f * (float)(j - 5) * x[j];
  return y;
}

static int Fail(const char* what, braidShard_t sh, int rank) {
  fprintf(stderr, "c_trainer rank %d: %s failed: %s\n", rank, what,
          sh ? braidShardGetLastError(sh) : braidShardGetLastError(NULL));
  return 1;
}

/* max and min over the ranks of `v` (one all-reduce of v and -v): do all ranks agree? */
static int Agree(braidComm_t comm, double v, int* agree) {
  double buf[2] = {v, -v};
  if (braidAllReduce(buf, buf, 2, braidFloat64, braidMax, comm) != braidSuccess) return 1;
  *agree = buf[0] == -buf[1];
  return 0;
}

int main(int argc, char** argv) {
  const char* preset = "zero3";
  int steps = 30;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--preset") && i + 1 < argc) {
      preset = argv[++i];
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--preset NAME] [--steps N] (under braidrun)\n", argv[0]);
      return 2;
    }
  }

  braidComm_t comm = NULL;
  if (braidInitFromEnv(&comm) != braidSuccess) {
    fprintf(stderr, "c_trainer: init: %s (run it under braidrun)\n", braidGetLastError(NULL));
    return 1;
  }
  int rank = 0, nranks = 1;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &nranks);

  braidShardConfig_t cfg;
  if (braidShardPreset(preset, comm, &cfg) != braidSuccess) return Fail("preset", NULL, rank);

  /* Initial parameters, identical on every rank: uniform in +-1/sqrt(fan-in), zero biases. */
  static float init0[kBucket0], init1[kBucket1];
  uint64_t seed = 12345;
  for (int i = 0; i < kHidden * kIn; ++i) init0[i] = Uniform(&seed) / sqrtf((float)kIn);
  for (int i = 0; i < kHidden; ++i) init1[i] = Uniform(&seed) / sqrtf((float)kHidden);
  const size_t numel[2] = {kBucket0, kBucket1};
  const void* init[2] = {init0, init1};
  braidShard_t sh = NULL;
  if (braidShardCreate(comm, &cfg, 2, numel, braidFloat32, init, &sh) != braidSuccess)
    return Fail("braidShardCreate", NULL, rank);

  braidShardStepOptions_t opt = BRAID_SHARD_STEP_OPTIONS_INITIALIZER;
  opt.adamw.lr = 0.02f;
  opt.adamw.weightDecay = 0.0f;
  opt.maxGradNorm = 1.0f;

  static float x[kBatch][kIn], y[kBatch], h[kBatch][kHidden], out[kBatch];
  static float g0[kBucket0], g1[kBucket1], dh[kBatch][kHidden];
  double first_loss = 0.0, last_loss = 0.0;
  for (int step = 0; step < steps; ++step) {
    double loss_sum = 0.0;
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      /* This rank's samples of this micro-batch. */
      uint64_t s = 1000003ull * (uint64_t)(step * kMicrobatches + mb) + 7919ull * (uint64_t)rank;
      for (int n = 0; n < kBatch; ++n) {
        for (int j = 0; j < kIn; ++j) x[n][j] = Uniform(&s);
        y[n] = Teacher(x[n]);
      }
      /* Forward, bucket by bucket (braid prefetches the next while this one computes). */
      const float* p = NULL;
      if (braidShardGather(sh, 0, (const void**)&p) != braidSuccess)
        return Fail("gather 0", sh, rank);
      for (int n = 0; n < kBatch; ++n)
        for (int k = 0; k < kHidden; ++k) {
          float a = p[kHidden * kIn + k];
          for (int j = 0; j < kIn; ++j) a += p[k * kIn + j] * x[n][j];
          h[n][k] = tanhf(a);
        }
      if (braidShardRelease(sh, 0) != braidSuccess) return Fail("release 0", sh, rank);
      if (braidShardGather(sh, 1, (const void**)&p) != braidSuccess)
        return Fail("gather 1", sh, rank);
      for (int n = 0; n < kBatch; ++n) {
        float a = p[kHidden];
        for (int k = 0; k < kHidden; ++k) a += p[k] * h[n][k];
        out[n] = a;
        loss_sum += (double)(a - y[n]) * (a - y[n]) / kBatch;
      }
      /* Backward in reverse bucket order: the output layer (still gathered), then the hidden. */
      memset(g1, 0, sizeof(g1));
      for (int n = 0; n < kBatch; ++n) {
        const float d = 2.0f * (out[n] - y[n]) / kBatch; /* d loss / d out */
        for (int k = 0; k < kHidden; ++k) {
          g1[k] += d * h[n][k];
          dh[n][k] = d * p[k] * (1.0f - h[n][k] * h[n][k]);
        }
        g1[kHidden] += d;
      }
      if (braidShardRelease(sh, 1) != braidSuccess) return Fail("release 1", sh, rank);
      if (braidShardReduceGrad(sh, 1, g1) != braidSuccess) return Fail("reduce 1", sh, rank);
      memset(g0, 0, sizeof(g0));
      for (int n = 0; n < kBatch; ++n)
        for (int k = 0; k < kHidden; ++k) {
          for (int j = 0; j < kIn; ++j) g0[k * kIn + j] += dh[n][k] * x[n][j];
          g0[kHidden * kIn + k] += dh[n][k];
        }
      if (braidShardReduceGrad(sh, 0, g0) != braidSuccess) return Fail("reduce 0", sh, rank);
    }
    braidShardStepInfo_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (braidShardStepEx(sh, &opt, &info) != braidSuccess) return Fail("step", sh, rank);

    /* The loss of this step over every rank's samples (before the update). */
    double loss = loss_sum / kMicrobatches;
    if (braidAllReduce(&loss, &loss, 1, braidFloat64, braidSum, comm) != braidSuccess)
      return Fail("loss all-reduce", sh, rank);
    loss /= nranks;
    /* Every rank must see the same loss and hold the same parameters. */
    double checksum = 0.0;
    for (int b = 0; b < 2; ++b) {
      const float* p = NULL;
      if (braidShardGather(sh, b, (const void**)&p) != braidSuccess)
        return Fail("gather", sh, rank);
      for (size_t i = 0; i < numel[b]; ++i) checksum += (double)p[i] * (double)(i + 1 + 1000 * b);
      if (braidShardRelease(sh, b) != braidSuccess) return Fail("release", sh, rank);
    }
    int loss_agrees = 0, params_agree = 0;
    if (Agree(comm, loss, &loss_agrees) || Agree(comm, checksum, &params_agree))
      return Fail("agreement all-reduce", sh, rank);
    if (!loss_agrees || !params_agree) {
      fprintf(stderr, "c_trainer rank %d: step %d: the ranks disagree (loss %d, parameters %d)\n",
              rank, step, loss_agrees, params_agree);
      return 1;
    }
    if (rank == 0)
      printf("step %3d  loss %.6f  grad norm %.4f%s\n", step, loss, info.gradNorm,
             info.clipped ? " (clipped)" : "");
    if (step == 0) first_loss = loss;
    last_loss = loss;
  }
  fflush(stdout);
  const int decreased = steps > 1 && last_loss < 0.5 * first_loss;
  if (rank == 0) {
    if (decreased)
      printf(
          "c_trainer: %s on %d ranks, %d steps: loss %.6f -> %.6f (decreased), every rank "
          "agreed every step\n",
          preset, nranks, steps, first_loss, last_loss);
    else
      fprintf(stderr, "c_trainer: the loss did not halve: %.6f -> %.6f\n", first_loss, last_loss);
  }
  braidShardDestroy(sh);
  braidCommDestroy(comm);
  return decreased ? 0 : 1;
}
