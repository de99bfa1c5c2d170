/* first_touch: what a page of freshly mapped memory costs on this host against a
 * page already in the process, the reason `tessera run --malloc retain` (the
 * default) keeps freed memory for reuse (docs/launcher.md).
 *
 *   first_touch [--mb 64] [--reps 4]
 *
 * Each repetition maps MB fresh anonymous megabytes, writes them once (every page
 * faulted in: the kernel finds, zeroes and maps a page; on a VM the hypervisor may
 * back it too), writes them again (pages in place), and unmaps them, as glibc
 * does with a large buffer freed after every step. Prints GB/s and microseconds
 * per 4 KB page for both, and their ratio; the medians of the repetitions.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  long mb = 64;
  int reps = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--mb") == 0) mb = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
    else { fprintf(stderr, "usage: first_touch [--mb 64] [--reps 4]\n"); return 2; }
  }
  if (mb <= 0 || reps <= 0 || reps > 64) { fprintf(stderr, "first_touch: bad arguments\n"); return 2; }
  const size_t bytes = (size_t)mb << 20;
  double first[64], again[64];
  for (int r = 0; r < reps; ++r) {
    char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("first_touch: mmap"); return 1; }
    double t0 = now();
    memset(p, 1, bytes);
    double t1 = now();
    memset(p, 2, bytes);
    double t2 = now();
    munmap(p, bytes);
    first[r] = t1 - t0;
    again[r] = t2 - t1;
  }
  qsort(first, reps, sizeof(double), cmp);
  qsort(again, reps, sizeof(double), cmp);
  const double f = first[reps / 2], a = again[reps / 2], pages = (double)bytes / 4096;
  printf("| memory | GB/s | us per 4 KB page |\n|---|---|---|\n");
  printf("| fresh (first touch) | %.2f | %.2f |\n", bytes / f / 1e9, f / pages * 1e6);
  printf("| reused | %.2f | %.2f |\n", bytes / a / 1e9, a / pages * 1e6);
  printf("\nfirst touch costs %.0fx a reused page (%ld MB, median of %d)\n", f / a, mb, reps);
  return 0;
}
