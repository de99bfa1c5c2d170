"""Table of bench/allreduce_sweep.sh: medians over the reps of every backend's
and peer's (Open MPI's MPI_Allreduce, PyTorch's Gloo)
all_reduce time and bus bandwidth, the ratios the shm backend is judged by, and
the shm algorithm's memory traffic against memcpy's at the same size.

Usage: sweep_table.py RESULT_DIR NPROC REPS
"""
import glob
import json
import os
import statistics
import sys


def shm_traffic_per_rank(size, n, small_bytes=256 << 10):
    """Bytes one rank reads plus writes in the shm all_reduce (shm_backend.h).

    Small: copy in (S read + S written), then every rank reduces all N slots
    (N*S read, S written). Large: copy in the N-1 foreign slices, reduce the own
    slice from N sources into the output and the own slot, copy out the N-1
    reduced slices: 4(N-1)/N*S + S + 2S/N.
    """
    if size <= small_bytes:
        return (n + 3) * size
    return 4 * (n - 1) / n * size + size + 2 * size / n


def main():
    out_dir, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    times = {}  # (backend, size) -> [time_us]
    busbw = {}
    failed = set()

    def add(backend, size, t, bw, check):
        times.setdefault((backend, size), []).append(t)
        busbw.setdefault((backend, size), []).append(bw)
        if check not in ("ok", "-"):
            failed.add((backend, size))

    # tessera bench --json rows; the mpi backend ran in its own job.
    for pattern in ("tessera.*.json", "mpi_backend.*.json"):
        for path in glob.glob(os.path.join(out_dir, pattern)):
            for r in json.load(open(path))["rows"]:
                add(r["backend"], r["size"], r["time_us"], r["busbw_gbps"], r["check"])
    # The peers print "size count time_us algbw busbw check" rows.
    for pattern, name in (("mpi_peer.*.txt", "MPI_Allreduce"), ("torch_peer.*.txt", "torch gloo")):
        for path in glob.glob(os.path.join(out_dir, pattern)):
            for line in open(path):
                f = line.split()
                if len(f) >= 6 and f[0].isdigit():
                    add(name, int(f[0]), float(f[2]), float(f[4]), f[5])
    copy = {}
    for path in glob.glob(os.path.join(out_dir, "memcpy.*.txt")):
        for line in open(path):
            f = line.split()
            if len(f) == 2 and f[0].isdigit():
                copy.setdefault(int(f[0]), []).append(float(f[1]))

    med = lambda d, k: statistics.median(d[k]) if k in d else None
    backends = [b for b in ("shm", "gloo", "hierarchical", "mpi", "MPI_Allreduce", "torch gloo")
                if any(k[0] == b for k in times)]
    sizes = sorted({k[1] for k in times})
    print(f"# all_reduce float32 sum, {n} ranks, median of {reps} runs; time in us, "
          "busbw in GB/s (2(n-1)/n * S / t)")
    head = f"{'size':>8}"
    for b in backends:
        head += f" {b + ' us':>18} {'busbw':>6}"
    head += (f" {'shm/gloo':>9} {'shm/torch':>9} {'shm/MPI':>8} {'shm traffic':>11} {'copy':>6} {'frac':>5}"
             f" {'io frac':>7}")
    print(head)
    for s in sizes:
        label = f"{s >> 20}M" if s >= 1 << 20 else f"{s >> 10}K"
        row = f"{label:>8}"
        for b in backends:
            t, bw = med(times, (b, s)), med(busbw, (b, s))
            mark = "!" if (b, s) in failed else ""
            row += f" {t:>17.1f}{mark or ' '} {bw:>6.3f}" if t is not None else f" {'-':>18} {'-':>6}"
        shm = med(busbw, ("shm", s))
        gloo = med(busbw, ("gloo", s))
        peer = med(busbw, ("MPI_Allreduce", s))
        torch_gloo = med(busbw, ("torch gloo", s))
        row += f" {shm / gloo:>8.1f}x" if shm and gloo else f" {'-':>9}"
        row += f" {shm / torch_gloo:>8.1f}x" if shm and torch_gloo else f" {'-':>9}"
        row += f" {shm / peer:>7.2f}x" if shm and peer else f" {'-':>8}"
        t = med(times, ("shm", s))
        c = med(copy, s)
        if t and c:
            traffic = n * shm_traffic_per_rank(s, n) / (t * 1e-6) / 1e9
            io = n * 2 * s / (t * 1e-6) / 1e9
            row += f" {traffic:>11.2f} {c:>6.2f} {traffic / c:>5.2f} {io / c:>7.2f}"
        print(row)
    print("# shm traffic: bytes all ranks read + write per second in the shm algorithm; "
          "copy: memcpy traffic of the same number of processes at that size; frac = ratio;")
    print("# io frac: the traffic no all_reduce can avoid (each rank reads its input and "
          "writes its output once, 2S) against copy: near 1 means memory-bound")
    if failed:
        print("# '!': a result check failed in at least one run")
        sys.exit(1)


main()
