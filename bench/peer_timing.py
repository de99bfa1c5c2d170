"""Step timing shared by the PyTorch peers of bench/: run `step` warmup + steps
times, then print from rank 0 the median step time and the largest peak RSS of any
rank, in the line the bench scripts parse:
  median_step_ms <x> peak_rss_mb <max over ranks>
and close the process group."""
import resource
import time

import torch
import torch.distributed as dist


def measure(rank, step, steps, warmup, barrier=False):
    times = []
    for i in range(warmup + steps):
        if barrier:  # start every rank's step together (layout_bench does)
            dist.barrier()
        t0 = time.perf_counter()
        step()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"median_step_ms {times[len(times) // 2]:.1f} peak_rss_mb {rss.item():.0f}", flush=True)
    dist.destroy_process_group()
