/* mpi_allreduce_perf: Open MPI's MPI_Allreduce (float, sum) timed the way braid's
 * all_reduce_perf times it, for perf/compare. Launch with mpirun -np N.
 *
 *   mpi_allreduce_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
 *
 * Per size: warm-up, MPI_Barrier, ITERS blocking calls (out of place, buffers moved between
 * iterations like braid's harness), time per op averaged over ranks. Output rows use the
 * nccl-tests layout (in-place columns N/A) so one parser reads both. Exit status 7 when the
 * check finds a wrong element. */
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

int main(int argc, char** argv) {
  unsigned long long min_bytes = 8, max_bytes = 64ull << 20, factor = 2;
  int iters = 20, warmup = 1, check = 1;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = v != NULL;
    if (ok && !strcmp(argv[i], "-b"))
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
        fprintf(stderr, "mpi_allreduce_perf: bad option '%s' (use -b -e -f -n -w -c)\n", argv[i]);
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
  if (rank == 0) {
    printf("# mpi_allreduce_perf: MPI_Allreduce float sum, %d ranks, out of place, blocking\n", n);
    printf(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)\n");
  }
  unsigned long long total_wrong = 0;
  for (unsigned long long size = min_bytes; size <= max_bytes; size *= factor) {
    size_t count = (size_t)(size / sizeof(float));
    size_t bytes = count * sizeof(float);
    size_t steps = bytes ? alloc / bytes : 1;
    if (steps == 0) steps = 1;
    for (int w = 0; w < warmup; ++w) {
      size_t shift = count * (w % steps);
      MPI_Allreduce(send + shift, recv + shift, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; ++it) {
      size_t shift = count * (it % steps);
      MPI_Allreduce(send + shift, recv + shift, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double sec = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    sec /= n;
    unsigned long long wrong = 0;
    if (check) {
      /* Small integers: every partial sum is exact in float. */
      for (size_t i = 0; i < count; ++i) send[i] = (float)((7 * i + 13 * (size_t)rank) % 101);
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += (double)((7 * i + 13 * (size_t)r) % 101);
        wrong += recv[i] != (float)want;
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      total_wrong += wrong;
    }
    if (rank == 0) {
      double algbw = sec > 0 ? (double)bytes / 1e9 / sec : 0;
      char tbuf[32];
      printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6llu  %7s  %6s  %6s  %6s\n", bytes,
             count, "float", "sum", -1, TimeStr(sec * 1e6, tbuf, sizeof tbuf), algbw,
             algbw * 2.0 * (n - 1) / n, wrong, "N/A", "N/A", "N/A", "N/A");
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
