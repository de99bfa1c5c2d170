"""PyTorch peer of bench/training_modes.sh: the demo GPT of `tessera train` (2 layers,
128 wide, 4 heads, 64 bytes of context, tied head; the same architecture as
src/tessera/models/gpt.h) trained with torch.nn.parallel.DistributedDataParallel over
gloo on the bytes of /usr/share/common-licenses (blocks drawn from a seeded
generator; the last 10% held out), AdamW with the demo's warm-up and cosine
schedule, and optionally PyTorch's own PowerSGD comm hook. Prints, from rank 0:
  mode <m> median_step_ms <x> val_loss <v> train_loss <t>
Usage: training_modes_peer.py RANK WORLD MASTER_ADDR PORT MODE STEPS [RANK_R START_ITER]
  MODE: sync | powersgd   (one process per rank; gloo binds MASTER_ADDR's interface)
"""
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT  # noqa: E402

N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB = 2, 4, 128, 64, 256
BATCH, LR, WARMUP = 16, 3e-3, 20


def corpus():
    data = b""
    root = "/usr/share/common-licenses"
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data += f.read()
    t = torch.tensor(list(data), dtype=torch.long)
    cut = int(len(t) * 0.9)
    return t[:cut], t[cut:]


def batch(data, gen):
    starts = torch.randint(len(data) - BLOCK - 1, (BATCH,), generator=gen)
    x = torch.stack([data[s:s + BLOCK] for s in starts])
    y = torch.stack([data[s + 1:s + BLOCK + 1] for s in starts])
    return x, y


def lr_at(step, total):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, total - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def main():
    rank, world, addr, port, mode, steps = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                           sys.argv[4], sys.argv[5], int(sys.argv[6]))
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, port
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1337)
    model = nn.parallel.DistributedDataParallel(GPT(N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB, gpt2_init=True))
    if mode == "powersgd":
        state = powersgd.PowerSGDState(process_group=None,
                                       matrix_approximation_rank=int(sys.argv[7]),
                                       start_powerSGD_iter=int(sys.argv[8]))
        model.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.99), weight_decay=0.01)
    train, val = corpus()
    gen = torch.Generator().manual_seed(1000 + rank)
    times, losses = [], []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        x, y = batch(train, gen)
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    vgen = torch.Generator().manual_seed(7 + rank)
    with torch.no_grad():
        v = torch.tensor([sum(model.module(*batch(val, vgen)).item() for _ in range(8)) / 8])
    dist.all_reduce(v)
    if rank == 0:
        times.sort()
        print(f"mode {mode} median_step_ms {1000 * times[len(times) // 2]:.2f} "
              f"val_loss {v.item() / world:.4f} train_loss {sum(losses[-10:]) / 10:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
