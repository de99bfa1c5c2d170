"""PyTorch's Gloo all_reduce (torch.distributed, PyTorch 2.x), measured
like `tessera bench`: for each size of a doubling sweep, untimed warmup, then
per iteration an untimed barrier and one timed all_reduce; a row's time is the
median over iterations of the slowest rank's time. Prints the same columns as
bench/mpi_allreduce_peer: size count time(us) algbw busbw check.

Usage: torch_allreduce_peer.py NPROC PORT MIN_BYTES MAX_BYTES ITERS WARMUP
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_bytes(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def worker(rank, n, port, lo, hi, iters, warmup):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=n)
    if rank == 0:
        print(f"# torch_allreduce_peer: torch {torch.__version__} gloo world_size={n} "
              f"dtype=float32 iters={iters} warmup={warmup}", flush=True)
    size = lo
    while size <= hi:
        count = size // 4
        # (rank + i) % 3: small integers, so the sum is exact.
        pristine = ((torch.arange(count) + rank) % 3).float()
        t = pristine.clone()
        times = []
        for it in range(warmup + iters):
            t.copy_(pristine)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if it >= warmup:
                times.append(time.perf_counter() - t0)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        expected = sum(((torch.arange(count) + r) % 3).float() for r in range(n))
        ok = torch.tensor([1 if torch.equal(t, expected) else 0])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if rank == 0:
            sec = statistics.median(slowest.tolist())
            algbw = size / sec / 1e9
            busbw = algbw * 2 * (n - 1) / n
            print(f"{size:12d} {count:12d} {sec * 1e6:12.2f} {algbw:12.3f} {busbw:12.3f} "
                  f"{'ok' if ok.item() == 1 else 'FAIL':>6}", flush=True)
        size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    n, port = int(sys.argv[1]), int(sys.argv[2])
    lo, hi = parse_bytes(sys.argv[3]), parse_bytes(sys.argv[4])
    iters, warmup = int(sys.argv[5]), int(sys.argv[6])
    mp.spawn(worker, args=(n, port, lo, hi, iters, warmup), nprocs=n)
