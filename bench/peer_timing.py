"""Step timing shared by the PyTorch peers of bench/: run `step` warmup + steps
times, then print from rank 0 the median step time and the largest peak RSS of any
rank, in the line the bench scripts parse:
  median_step_ms <x> peak_rss_mb <max over ranks>
and close the process group; and the process-group start every peer shares: a free
port chosen once by the parent, and a collective timeout, so a peer that loses a
rank fails in minutes instead of hanging its benchmark script."""
import datetime
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist


def free_port():
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank, world, port, timeout_s=300):
    """Joins the gloo process group at 127.0.0.1:port; collectives give up after timeout_s."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def spawn(worker, world, port, *args):
    """Runs worker(rank, port, *args) in `world` processes; port 0 picks a free one here,
    in the parent, so every child gets the same port."""
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(port or free_port(),) + args, nprocs=world)


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
    leave()


def leave():
    """Ends this rank's process now, without Python's teardown. PyTorch 2.11 can
    deadlock there: freeing DDP's Reducer runs ~ProcessGroupGloo, which holds the
    GIL while it waits for its work thread, and that thread waits for the GIL to
    free a tensor of its last work (seen with py-spy --native in a 4-rank DDP run).
    The result is printed by then, so nothing is lost."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
