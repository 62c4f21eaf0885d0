/* mpi_coll_perf: Open MPI's MPI_Allgather, MPI_Reduce_scatter_block and MPI_Allreduce (float,
 * sum) at one size, for the emulated-cluster comparison (perf/emulated_hier.sh,
 * docs/hierarchical.md). Launch with mpirun -np N.
 *
 *   mpi_coll_perf allgather|reducescatter|allreduce BYTES [ITERS]
 *
 * BYTES is the collective's whole buffer as nccl-tests counts it (all-gather: the output,
 * reduce-scatter: the input, all-reduce: the buffer). One warm-up call, MPI_Barrier, ITERS
 * blocking out-of-place calls; prints the slowest rank's time per op in microseconds and checks
 * one element of the result (exit 7 when wrong). Build: mpicc -O2 -o mpi_coll_perf this file. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 3) {
    if (rank == 0)
      fprintf(stderr, "usage: mpi_coll_perf allgather|reducescatter|allreduce BYTES [ITERS]\n");
    MPI_Finalize();
    return 2;
  }
  const char* coll = argv[1];
  const size_t bytes = strtoull(argv[2], NULL, 10);
  const int iters = argc > 3 ? atoi(argv[3]) : 3;
  const size_t total = bytes / sizeof(float) / n * n; /* elements, a multiple of n */
  const size_t shard = total / n;
  float* in = malloc(total * sizeof(float));
  float* out = malloc(total * sizeof(float));
  for (size_t i = 0; i < total; ++i) in[i] = (float)(rank + 1);
  int which = !strcmp(coll, "allgather") ? 0 : !strcmp(coll, "reducescatter") ? 1 : 2;
  double t0 = 0;
  for (int it = -1; it < iters; ++it) {
    if (it == 0) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    if (which == 0)
      MPI_Allgather(in, (int)shard, MPI_FLOAT, out, (int)shard, MPI_FLOAT, MPI_COMM_WORLD);
    else if (which == 1)
      MPI_Reduce_scatter_block(in, out, (int)shard, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else
      MPI_Allreduce(in, out, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double us = (MPI_Wtime() - t0) / iters * 1e6, worst = 0;
  MPI_Reduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  /* all-gather: the last shard came from rank n-1; the others: the sum n(n+1)/2. */
  const float want = which == 0 ? (float)n : (float)(n * (n + 1) / 2);
  const int wrong = out[0] != (which == 0 ? 1.0f : want) || (which == 0 && out[total - 1] != want);
  int any = 0;
  MPI_Reduce(&wrong, &any, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("mpi %s %zu bytes: %.0f us%s\n", coll, total * sizeof(float), worst,
           any ? " WRONG" : "");
  free(in);
  free(out);
  MPI_Finalize();
  return any ? 7 : 0;
}
