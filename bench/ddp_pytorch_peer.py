"""PyTorch DDP peer for bench/ddp_vs_pytorch.sh: the same GPT as
src/tessera/models/gpt.h (pre-LN blocks, causal mask rebuilt per call, 4x GELU MLP, tied
head), the same per-rank batch, gloo, one thread per rank. Prints
"median_step_ms <x>" from rank 0. Usage: ddp_pytorch_peer.py WORLD STEPS PORT
[LAYERS BATCH] (WORLD 1: a plain single process without DDP; PORT 0: a free one)."""
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_timing  # noqa: E402

N_HEAD, N_EMBD, BLOCK, VOCAB = 4, 128, 64, 256
# Layers and per-rank batch: argv[4], argv[5] (default 4 and 8), as ddp_vs_pytorch.cpp.
N_LAYER = int(sys.argv[4]) if len(sys.argv) > 4 else 4
BATCH = int(sys.argv[5]) if len(sys.argv) > 5 else 8


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2) for z in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(c // N_HEAD)
        future = torch.ones(t, t, dtype=torch.bool).triu(1)  # rebuilt per call, like gpt.cpp
        att = att.masked_fill(future, float("-inf"))
        y = att.softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.attn = Attention()
        self.c_fc, self.c_proj = nn.Linear(N_EMBD, 4 * N_EMBD), nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, N_EMBD), nn.Embedding(BLOCK, N_EMBD)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def worker(rank, port, world, steps):
    torch.set_num_threads(1)
    model = GPT()
    if world > 1:
        peer_timing.init_gloo(rank, world, port)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(VOCAB, (BATCH, BLOCK), generator=g)
    y = torch.randint(VOCAB, (BATCH, BLOCK), generator=g)
    times = []
    for i in range(5 + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
        if i >= 5:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    if rank == 0:
        print(f"median_step_ms {times[len(times) // 2]:.2f}", flush=True)
    if world > 1:
        dist.destroy_process_group()
        peer_timing.leave()


if __name__ == "__main__":
    world, steps, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    if world == 1:
        worker(0, port, 1, steps)
    else:
        peer_timing.spawn(worker, world, port, world, steps)
