/* mpi_allreduce_peer: the MPI peer that `tessera bench --op all_reduce` is compared
 * against. Plain C over MPI_Allreduce (float32, sum), measured the same way as
 * tessera bench so the two tables can be read side by side:
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 2 mpi_allreduce_peer \
 *       [--min-bytes 1K] [--max-bytes 32M] [--iters 20] [--warmup 5]
 *
 * For each size of a doubling sweep: a correctness run (rank-dependent small
 * integers whose sum is exact), `warmup` untimed runs, then `iters` timed runs,
 * each preceded by a barrier that is not timed. A row's time is the median over
 * iterations of the slowest rank's time for that iteration. Bus bandwidth uses
 * nccl-tests' all-reduce factor 2(n-1)/n.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse_bytes.h"

static void die(int rank, const char* msg, const char* arg) {
  if (rank == 0) fprintf(stderr, "mpi_allreduce_peer: error: %s%s\n", msg, arg ? arg : "");
  MPI_Finalize();
  exit(2);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Rank r's input element i: (r + i) % 3. The sum over n ranks is at most 2n. */
static void fill_input(float* buf, long long count, int rank) {
  for (long long i = 0; i < count; ++i) buf[i] = (float)((rank + i) % 3);
}

static int check_result(const float* buf, long long count, int size) {
  for (long long i = 0; i < count; ++i) {
    long long expect = 0;
    for (int r = 0; r < size; ++r) expect += (r + i) % 3;
    if (buf[i] != (float)expect) return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  long long min_bytes = 1024, max_bytes = 32LL << 20;
  int iters = 20, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (rank == 0)
        printf("usage: mpi_allreduce_peer [--min-bytes N] [--max-bytes N] [--iters N] "
               "[--warmup N]\n(sizes accept K/M/G suffixes)\n");
      MPI_Finalize();
      return 0;
    }
    if (!v) die(rank, "missing value after ", a);
    if (!strcmp(a, "--min-bytes")) min_bytes = parse_bytes(v);
    else if (!strcmp(a, "--max-bytes")) max_bytes = parse_bytes(v);
    else if (!strcmp(a, "--iters")) iters = atoi(v);
    else if (!strcmp(a, "--warmup")) warmup = atoi(v);
    else die(rank, "unknown option ", a);
    ++i;
  }
  if (min_bytes < 4 || max_bytes < min_bytes) die(rank, "need 4 <= --min-bytes <= --max-bytes", 0);
  if (iters < 1 || warmup < 0) die(rank, "need --iters >= 1 and --warmup >= 0", 0);

  long long max_count = max_bytes / 4;
  float* input = malloc((size_t)max_count * sizeof(float));
  float* work = malloc((size_t)max_count * sizeof(float));
  double* times = malloc((size_t)iters * sizeof(double));
  if (!input || !work || !times) die(rank, "out of memory", 0);

  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  char* nl = strchr(version, ',');
  if (nl) *nl = '\0';
  if (rank == 0) {
    printf("# mpi_allreduce_peer: op=all_reduce backend=mpi-peer (%s) world_size=%d dtype=float32 "
           "iters=%d warmup=%d\n",
           version, size, iters, warmup);
    printf("# %10s %12s %12s %12s %12s %6s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "check");
  }
  int all_ok = 1;
  for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    long long count = bytes / 4;
    fill_input(input, count, rank);
    memcpy(work, input, (size_t)count * sizeof(float));
    MPI_Allreduce(MPI_IN_PLACE, work, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int ok = check_result(work, count, size), all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    all_ok &= all;
    for (int it = 0; it < warmup + iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, work, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = MPI_Wtime() - t0;
      if (it >= warmup) times[it - warmup] = t;
    }
    MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(times, (size_t)iters, sizeof(double), cmp_double);
    double med = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
    double algbw = (double)(count * 4) / med / 1e9;
    double busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0)
      printf("  %10lld %12lld %12.2f %12.3f %12.3f %6s\n", count * 4, count, med * 1e6, algbw,
             busbw, all ? "ok" : "FAIL");
    fflush(stdout);
  }
  free(input);
  free(work);
  free(times);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
