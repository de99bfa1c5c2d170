"""all_reduce bus bandwidth of torch.distributed's NCCL backend, laid out as
test_nccl_gpu lays out Tessera's ranks (on one GPU: every rank shares it, each
with its own NCCL_HOSTID), so scripts/gpu-check.sh can print both figures side
by side. Usage: python3 torch_nccl_baseline.py [world_size]. Prints
"BW torch_nccl all_reduce <dtype> 256MiB ranks=N time_ms=.. algbw_GBps=.. busbw_GBps=.."."""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def one_gpu_env(rank):
    os.environ.update({
        "NCCL_HOSTID": f"torch-baseline-rank-{rank}", "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket",
        "NCCL_SOCKET_IFNAME": "lo", "NCCL_NVLS_ENABLE": "0"})


def worker(rank, world, port):
    gpus = torch.cuda.device_count()
    if gpus < world:
        one_gpu_env(rank)
    torch.cuda.set_device(rank % gpus)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    for dtype in (torch.float32, torch.bfloat16):
        nbytes = 256 << 20
        t = torch.ones(nbytes // t_size(dtype), dtype=dtype, device="cuda")
        for _ in range(2):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        iters = 5
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
            torch.cuda.synchronize()
        s = (time.perf_counter() - start) / iters
        algbw = nbytes / s / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(f"BW torch_nccl all_reduce {str(dtype).split('.')[-1]} 256MiB ranks={world} "
                  f"time_ms={s * 1e3:.2f} algbw_GBps={algbw:.3f} busbw_GBps={busbw:.3f}",
                  flush=True)
    dist.destroy_process_group()


def t_size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port), nprocs=world, join=True)


if __name__ == "__main__":
    main()
