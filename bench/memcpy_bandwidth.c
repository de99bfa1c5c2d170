/* memcpy_bandwidth: the copy bandwidth of this host, the yardstick for the shm
 * backend's table in bench/allreduce_sweep.sh.
 *
 *   memcpy_bandwidth [--procs N] [--min-bytes 4K] [--max-bytes 64M]
 *
 * For each size of a x2 sweep, N processes (as many as the ranks being compared)
 * each memcpy a buffer of that size back and forth at the same time, as the
 * ranks of an all-reduce do. A row reports the memory traffic (bytes read plus
 * bytes written, all processes together, per second): "size traffic_gbps".
 * Small sizes stay in cache, large ones measure DRAM.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parse_bytes.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds one process takes for `iters` copies of `bytes`, after warming up. */
static double time_copies(size_t bytes, int iters) {
  /* One allocation, the second buffer 1 KB + 64 B off the first's page offset:
   * buffers at the same offset modulo 4 KB make loads alias earlier stores and
   * would understate what a copy can do. */
  char* base = malloc(2 * bytes + 8192);
  if (!base) { fprintf(stderr, "memcpy_bandwidth: out of memory\n"); exit(2); }
  char* a = (char*)(((uintptr_t)base + 4095) & ~(uintptr_t)4095);
  char* b = a + ((bytes + 4095) & ~(size_t)4095) + 1088;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  for (int i = 0; i < 3; ++i) memcpy(b, a, bytes);
  double t0 = now();
  for (int i = 0; i < iters; ++i) {
    if (i & 1) memcpy(a, b, bytes); else memcpy(b, a, bytes);
  }
  double t = now() - t0;
  free(base);
  return t;
}

int main(int argc, char** argv) {
  int procs = 2;
  long long min_bytes = 4 << 10, max_bytes = 64 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--procs")) procs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--min-bytes")) min_bytes = parse_bytes(argv[i + 1]);
    else if (!strcmp(argv[i], "--max-bytes")) max_bytes = parse_bytes(argv[i + 1]);
    else { fprintf(stderr, "memcpy_bandwidth: unknown flag %s\n", argv[i]); return 2; }
  }
  if (procs < 1 || min_bytes <= 0 || max_bytes < min_bytes) {
    fprintf(stderr, "memcpy_bandwidth: need --procs >= 1 and 0 < --min-bytes <= --max-bytes\n");
    return 2;
  }
  printf("# memcpy_bandwidth: %d processes copying at once; traffic = read + write bytes/s\n", procs);
  printf("# %10s %14s\n", "size(B)", "traffic(GB/s)");
  for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    /* About 256 MB copied per process per size, at least 20 copies. */
    int iters = (int)((256LL << 20) / bytes);
    if (iters < 20) iters = 20;
    int fds[2];
    if (pipe(fds) != 0) return 2;
    for (int p = 0; p < procs; ++p) {
      if (fork() == 0) {
        double t = time_copies((size_t)bytes, iters);
        if (write(fds[1], &t, sizeof t) != sizeof t) _exit(1);
        _exit(0);
      }
    }
    double slowest = 0;
    for (int p = 0; p < procs; ++p) {
      double t = 0;
      if (read(fds[0], &t, sizeof t) != sizeof t) return 2;
      if (t > slowest) slowest = t;
    }
    while (wait(NULL) > 0) {}
    close(fds[0]);
    close(fds[1]);
    printf("%12lld %14.2f\n", bytes, 2.0 * bytes * iters * procs / slowest / 1e9);
    fflush(stdout);
  }
  return 0;
}
