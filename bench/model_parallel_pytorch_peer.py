"""PyTorch 2.x peers for bench/model_parallel_vs_pytorch.sh: the GPT of
bench/torch_gpt.py trained with AdamW over gloo, one thread per rank, on the same
global batch as Tessera's layout_bench (GLOBAL sequences of 64 tokens, micro-batches
of MICRO), in one of two layouts:

  tp  DTensor tensor parallelism over all ranks: parallelize_module with
      ColwiseParallel on the query, key, value and first MLP projections and
      RowwiseParallel on the attention output and second MLP projections (Megatron's
      split; heads are divided between ranks). The whole batch goes through every
      rank, one micro-batch at a time, as layout_bench does.
  pp  torch.distributed.pipelining over all ranks: the blocks split evenly into
      stages (embeddings on the first, the final norm, head and loss on the last),
      Schedule1F1B over GLOBAL / MICRO micro-batches.

The attention's query, key and value are three Linear layers instead of one (the
same parameters and FLOPs as c_attn), so that a column split keeps whole heads.
Prints from rank 0:  median_step_ms <x> peak_rss_mb <max over ranks>
Usage: model_parallel_pytorch_peer.py MODE WORLD STEPS PORT LAYERS EMBD [GLOBAL MICRO]
(PORT 0: a free one)"""
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_timing  # noqa: E402

MODE, WORLD, STEPS, PORT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
N_LAYER, N_EMBD = int(sys.argv[5]), int(sys.argv[6])
GLOBAL = int(sys.argv[7]) if len(sys.argv) > 7 else 16
MICRO = int(sys.argv[8]) if len(sys.argv) > 8 else 2
BLOCK, VOCAB = 64, 256
N_HEAD = N_EMBD // 64 if N_EMBD >= 256 and N_EMBD % 64 == 0 else 4  # as layout_bench


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        # No biases, as layout_bench's GPT (bias false).
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd, bias=False), nn.LayerNorm(n_embd, bias=False)
        self.q, self.k, self.v = (nn.Linear(n_embd, n_embd, bias=False) for _ in range(3))
        self.attn_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=False)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=False)

    def attn(self, x):
        b, t, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        d = N_EMBD // N_HEAD  # under tensor parallelism each rank holds n_head / tp heads
        q, k, v = (z.view(b, t, -1, d).transpose(1, 2) for z in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(d)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.attn_proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Stage(nn.Module):
    """Blocks [first, last) of the GPT, with the embeddings when first == 0 and the
    final norm and head (logits) when last == N_LAYER."""

    def __init__(self, first, last):
        super().__init__()
        self.embed = first == 0
        self.head = last == N_LAYER
        if self.embed:
            self.wte, self.wpe = nn.Embedding(VOCAB, N_EMBD), nn.Embedding(BLOCK, N_EMBD)
        self.h = nn.ModuleList(Block(N_EMBD, N_HEAD) for _ in range(first, last))
        if self.head:
            self.ln_f = nn.LayerNorm(N_EMBD, bias=False)
            self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)

    def forward(self, x):
        if self.embed:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x)) if self.head else x


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def batch(rank):
    g = torch.Generator().manual_seed(1234)  # every rank sees the same global batch
    tokens = torch.randint(VOCAB, (GLOBAL, BLOCK + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def tp_step_fn(rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (WORLD,))
    model = Stage(0, N_LAYER)
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "attn_proj": RowwiseParallel(), "c_fc": ColwiseParallel(), "c_proj": RowwiseParallel()}
    for blk in model.h:
        parallelize_module(blk, mesh, plan)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = batch(rank)

    def step():
        opt.zero_grad()
        for i in range(0, GLOBAL, MICRO):
            (loss_fn(model(x[i:i + MICRO]), y[i:i + MICRO]) * MICRO / GLOBAL).backward()
        opt.step()
    return step


def pp_step_fn(rank):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    per = N_LAYER // WORLD
    module = Stage(rank * per, (rank + 1) * per)
    stage = PipelineStage(module, rank, WORLD, torch.device("cpu"))
    schedule = Schedule1F1B(stage, GLOBAL // MICRO, loss_fn=loss_fn)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4)
    x, y = batch(rank)

    def step():
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == WORLD - 1:
            schedule.step(target=y, losses=[])
        else:
            schedule.step()
        opt.step()
    return step


def worker(rank, port):
    torch.set_num_threads(1)
    peer_timing.init_gloo(rank, WORLD, port)
    torch.manual_seed(0)
    step = tp_step_fn(rank) if MODE == "tp" else pp_step_fn(rank)
    peer_timing.measure(rank, step, STEPS, warmup=1, barrier=True)


if __name__ == "__main__":
    if MODE not in ("tp", "pp"):
        sys.exit(f"mode must be tp or pp, not {MODE}")
    peer_timing.spawn(worker, WORLD, PORT)
