/* mpi_allreduce_perf: Open MPI's MPI_Allreduce (float, sum), MPI_Allgather or
 * MPI_Reduce_scatter_block (float, sum) timed the way braid's all_reduce_perf, all_gather_perf
 * and reduce_scatter_perf time them, for perf/compare. Launch with mpirun -np N.
 *
 *   mpi_allreduce_perf [--coll allreduce|allgather|reducescatter] [-b MIN] [-e MAX] [-f FACTOR]
 *                      [-n ITERS] [-w WARMUP] [-c 0|1]
 *
 * Sizes are nccl-tests': the whole buffer (all-reduce: the buffer, all-gather: the output,
 * reduce-scatter: the input). For all-gather and reduce-scatter the per-rank count is rounded
 * down to whole 16-byte units, as braid's binaries do, and the row prints the rounded size and
 * the per-rank count; busbw = algbw * (n-1)/n there, 2(n-1)/n for all-reduce.
 * Per size: warm-up, MPI_Barrier, ITERS blocking calls (out of place, buffers moved between
 * iterations like braid's harness), time per op averaged over ranks. Output rows use the
 * nccl-tests layout (in-place columns N/A) so one parser reads both. Exit status 7 when the
 * check finds a wrong element, 2 for bad usage (an unknown --coll included). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ParseSize(const char* s, unsigned long long* out) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K' || *end == 'k')
    v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm')
    v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g')
    v <<= 30, ++end;
  if (*end != '\0') return 0;
  *out = v;
  return 1;
}

static const char* TimeStr(double us, char* buf, size_t n) {
  if (us >= 10000.0)
    snprintf(buf, n, "%7.0f", us);
  else if (us >= 100.0)
    snprintf(buf, n, "%7.1f", us);
  else
    snprintf(buf, n, "%7.2f", us);
  return buf;
}

enum Coll { kAllreduce, kAllgather, kReduceScatter };
static const char* const kCollNames[] = {"allreduce", "allgather", "reducescatter"};

/* One blocking call of `coll` on `count` elements per rank (all-reduce: the whole buffer). */
static void Call(enum Coll coll, const float* send, float* recv, size_t count) {
  if (coll == kAllreduce)
    MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (coll == kAllgather)
    MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
  else
    MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Rank r's input element i: small integers, so every partial sum is exact in float. */
static float Input(size_t i, int r) {
  return (float)((7 * i + 13 * (size_t)r) % 101);
}

int main(int argc, char** argv) {
  unsigned long long min_bytes = 8, max_bytes = 64ull << 20, factor = 2;
  int iters = 20, warmup = 1, check = 1;
  enum Coll coll = kAllreduce;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = v != NULL;
    if (ok && !strcmp(argv[i], "--coll")) {
      int c = 0;
      while (c < 3 && strcmp(v, kCollNames[c])) ++c;
      if (c == 3) {
        if (rank == 0)
          fprintf(stderr,
                  "mpi_allreduce_perf: --coll '%s': expected allreduce, allgather or "
                  "reducescatter\n",
                  v);
        MPI_Finalize();
        return 2;
      }
      coll = (enum Coll)c;
    } else if (ok && !strcmp(argv[i], "-b"))
      ok = ParseSize(v, &min_bytes);
    else if (ok && !strcmp(argv[i], "-e"))
      ok = ParseSize(v, &max_bytes);
    else if (ok && !strcmp(argv[i], "-f"))
      ok = ParseSize(v, &factor) && factor >= 2;
    else if (ok && !strcmp(argv[i], "-n"))
      ok = (iters = atoi(v)) >= 1;
    else if (ok && !strcmp(argv[i], "-w"))
      ok = (warmup = atoi(v)) >= 0;
    else if (ok && !strcmp(argv[i], "-c"))
      ok = (check = atoi(v)) >= 0;
    else
      ok = 0;
    if (!ok) {
      if (rank == 0)
        fprintf(stderr, "mpi_allreduce_perf: bad option '%s' (use --coll -b -e -f -n -w -c)\n",
                argv[i]);
      MPI_Finalize();
      return 2;
    }
    ++i;
  }
  if (min_bytes > max_bytes || min_bytes == 0) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce_perf: need 0 < -b <= -e\n");
    MPI_Finalize();
    return 2;
  }
  size_t alloc = (size_t)max_bytes;
  float* send = aligned_alloc(4096, (alloc + 4095) & ~(size_t)4095);
  float* recv = aligned_alloc(4096, (alloc + 4095) & ~(size_t)4095);
  if (!send || !recv) {
    fprintf(stderr, "mpi_allreduce_perf: cannot allocate 2 x %zu bytes\n", alloc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(send, 0, alloc);
  memset(recv, 0, alloc);
  const double bus_factor = coll == kAllreduce ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
  if (rank == 0) {
    if (coll == kAllreduce)
      printf("# mpi_allreduce_perf: MPI_Allreduce float sum, %d ranks, out of place, blocking\n",
             n);
    else if (coll == kAllgather)
      printf("# mpi_allreduce_perf: MPI_Allgather float, %d ranks, out of place, blocking\n", n);
    else
      printf(
          "# mpi_allreduce_perf: MPI_Reduce_scatter_block float sum, %d ranks, out of place, "
          "blocking\n",
          n);
    printf(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)\n");
  }
  unsigned long long total_wrong = 0;
  for (unsigned long long size = min_bytes; size <= max_bytes; size *= factor) {
    /* count: the whole buffer in elements (the shift between iterations); param: the count
     * passed to MPI (all-gather, reduce-scatter: per rank, whole 16-byte units like braid). */
    size_t count = (size_t)(size / sizeof(float));
    size_t param = count;
    if (coll != kAllreduce) {
      param = (count / (size_t)n) & ~(size_t)3;
      count = param * (size_t)n;
    }
    size_t bytes = count * sizeof(float);
    size_t steps = bytes ? alloc / bytes : 1;
    if (steps == 0) steps = 1;
    for (int w = 0; w < warmup; ++w) {
      size_t shift = count * (w % steps);
      Call(coll, send + shift, recv + shift, param);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; ++it) {
      size_t shift = count * (it % steps);
      Call(coll, send + shift, recv + shift, param);
    }
    double sec = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    sec /= n;
    unsigned long long wrong = 0;
    if (check) {
      /* Inputs: all-reduce and reduce-scatter the whole buffer, all-gather one block. The
       * output is first filled with -1 (no input's value) so a stale result cannot pass. */
      size_t in = coll == kAllgather ? param : count;
      size_t out = coll == kReduceScatter ? param : count;
      for (size_t i = 0; i < in; ++i) send[i] = Input(i, rank);
      for (size_t i = 0; i < out; ++i) recv[i] = -1.0f;
      Call(coll, send, recv, param);
      for (size_t i = 0; i < out; ++i) {
        double want = 0;
        if (coll == kAllreduce)
          for (int r = 0; r < n; ++r) want += (double)Input(i, r);
        else if (coll == kAllgather)
          want = (double)Input(i % param, (int)(i / param));
        else
          for (int r = 0; r < n; ++r) want += (double)Input((size_t)rank * param + i, r);
        wrong += recv[i] != (float)want;
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      total_wrong += wrong;
    }
    if (rank == 0) {
      double algbw = sec > 0 ? (double)bytes / 1e9 / sec : 0;
      char tbuf[32];
      printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6llu  %7s  %6s  %6s  %6s\n", bytes,
             param, "float", coll == kAllgather ? "none" : "sum", -1,
             TimeStr(sec * 1e6, tbuf, sizeof tbuf), algbw, algbw * bus_factor, wrong, "N/A", "N/A",
             "N/A", "N/A");
      fflush(stdout);
    }
    if (size > max_bytes / factor) break;
  }
  if (rank == 0)
    printf("# Out of bounds values : %llu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  free(send);
  free(recv);
  MPI_Finalize();
  return total_wrong ? 7 : 0;
}
