"""PyTorch peer for bench/embedding_bench.sh: the same tables, ids, sharding and
update as bench/embedding_bench.cpp, built from nn.EmbeddingBag(mode="sum",
sparse=True) and torch.distributed.all_to_all_single over gloo, one thread per rank.

  table_wise  table t on rank t % WORLD (what Tessera's planner picks for equal
              tables); lengths, then ids, to the owner with all_to_all_single; pooled
              rows back with all_to_all_single; gradients to the owner the same way.
  row_wise    rows split in WORLD contiguous blocks; each rank pools the ids it owns;
              the partial sums go back with all_to_all_single and are added up by the
              requester (a reduce-scatter; gloo has no reduce_scatter_tensor);
              gradients reach every owner with all_gather.

The update is row-wise Adagrad on the coalesced sparse gradient (one accumulator per
row, mean of the squared gradient), which torch.optim lacks. Ids are drawn before
timing with torch.Generator seeded per (step, rank, table), the same ops as the C++
side. Prints from rank 0: "lookups_per_s <x> median_step_ms <y>".
Usage: embedding_peer.py WORLD SHARDING [STEPS TABLES ROWS DIM BATCH]"""
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_timing  # noqa: E402

WARMUP = 3
LR, EPS = 0.01, 1e-8


def draw_ids(rows, batch, step, rank, table):
    g = torch.Generator().manual_seed(step * 1000 + rank * 100 + table)
    lengths = torch.randint(1, 3, (batch,), generator=g, dtype=torch.long)
    u = torch.rand(int(lengths.sum()), generator=g, dtype=torch.float64)
    ids = (torch.exp(u * math.log(rows + 1)) - 1).floor().long().clamp(0, rows - 1)
    return lengths, ids


def offsets_of(lengths):
    return torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])


def rowwise_adagrad(bag, acc):
    g = bag.weight.grad.coalesce()
    rows, vals = g.indices()[0], g.values()
    with torch.no_grad():
        acc[rows] += vals.pow(2).mean(1)
        bag.weight[rows] -= LR * vals / (acc[rows].sqrt() + EPS).unsqueeze(1)
    bag.weight.grad = None


def a2a(send, in_splits, out_splits, dtype):
    out = torch.empty(sum(out_splits), dtype=dtype)
    dist.all_to_all_single(out, send, out_splits, in_splits)
    return out


class Sharded:
    """The tables this rank holds and one step of lookups + update."""

    def __init__(self, rank, world, sharding, n_tables, rows, dim, batch):
        self.rank, self.world, self.sharding = rank, world, sharding
        self.n_tables, self.rows, self.dim, self.batch = n_tables, rows, dim, batch
        if sharding == "table_wise":
            self.owned = [[t for t in range(n_tables) if t % world == r] for r in range(world)]
            self.bounds = [0, rows]
            local_rows = rows
        else:
            self.owned = [list(range(n_tables)) for _ in range(world)]
            self.bounds = [rows * r // world for r in range(world + 1)]
            local_rows = self.bounds[rank + 1] - self.bounds[rank]
        self.bags = {t: nn.EmbeddingBag(local_rows, dim, mode="sum", sparse=True)
                     for t in self.owned[rank]}
        self.acc = {t: torch.zeros(local_rows) for t in self.owned[rank]}
        self.grad = torch.full((batch, dim), 0.01)

    def ids_for(self, r, lengths, ids):
        if self.sharding == "table_wise":
            return lengths, ids
        lo, hi = self.bounds[r], self.bounds[r + 1]
        mine = (ids >= lo) & (ids < hi)
        bag = torch.repeat_interleave(torch.arange(self.batch), lengths)
        return torch.bincount(bag[mine], minlength=self.batch), ids[mine] - lo

    def step(self, features):
        w, b, d, me = self.world, self.batch, self.dim, self.rank
        lens, vals, val_splits = [], [], []
        for r in range(w):
            n = 0
            for t in self.owned[r]:
                ln, v = self.ids_for(r, *features[t])
                lens.append(ln)
                vals.append(v)
                n += v.numel()
            val_splits.append(n)
        mine = len(self.owned[me])
        lengths_in = a2a(torch.cat(lens), [b * len(self.owned[r]) for r in range(w)],
                         [b * mine] * w, torch.long).view(w, mine, b)
        counts = lengths_in.sum(2)
        ids_in = a2a(torch.cat(vals), val_splits, counts.sum(1).tolist(), torch.long)
        pooled, pos = {}, 0
        pieces = {t: [] for t in self.owned[me]}
        for s in range(w):
            for i, t in enumerate(self.owned[me]):
                n = int(counts[s, i])
                pieces[t].append(ids_in[pos:pos + n])
                pos += n
        for i, t in enumerate(self.owned[me]):
            ln = lengths_in[:, i, :].reshape(-1)
            pooled[t] = self.bags[t](torch.cat(pieces[t]), offsets_of(ln))  # [w * b, d]
        send = torch.cat([pooled[t][s * b:(s + 1) * b].detach().reshape(-1)
                          for s in range(w) for t in self.owned[me]])
        back = a2a(send, [b * d * mine] * w, [b * d * len(self.owned[r]) for r in range(w)],
                   torch.float32)
        if self.sharding == "row_wise":  # partial sums: add up over the owners
            back.view(w, self.n_tables, b, d).sum(0)
        self.backward(pooled)

    def backward(self, pooled):
        w, b, d, me = self.world, self.batch, self.dim, self.rank
        mine = self.owned[me]
        if self.sharding == "table_wise":
            send = torch.cat([self.grad.reshape(-1) for r in range(w) for _ in self.owned[r]])
            got = a2a(send, [b * d * len(self.owned[r]) for r in range(w)],
                      [b * d * len(mine)] * w, torch.float32).view(w, len(mine), b, d)
        else:
            local = torch.cat([self.grad.reshape(-1) for _ in range(self.n_tables)])
            parts = [torch.empty_like(local) for _ in range(w)]
            dist.all_gather(parts, local)
            got = torch.stack(parts).view(w, self.n_tables, b, d)
        for i, t in enumerate(mine):
            pooled[t].backward(got[:, i].reshape(w * b, d))
            rowwise_adagrad(self.bags[t], self.acc[t])


def worker(rank, port, world, sharding, steps, n_tables, rows, dim, batch):
    torch.set_num_threads(1)
    peer_timing.init_gloo(rank, world, port)
    tables = Sharded(rank, world, sharding, n_tables, rows, dim, batch)
    features = [[draw_ids(rows, batch, s, rank, t) for t in range(n_tables)]
                for s in range(WARMUP + steps)]
    lookups = sum(f[1].numel() for s in features[WARMUP:] for f in s)
    times = []
    for s in range(WARMUP + steps):
        dist.barrier()
        t0 = time.perf_counter()
        tables.step(features[s])
        if s >= WARMUP:
            times.append((time.perf_counter() - t0) * 1e3)
    slowest = torch.tensor([sum(times)], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    total = torch.tensor([float(lookups)], dtype=torch.float64)
    dist.all_reduce(total)
    times.sort()
    if rank == 0:
        print(f"lookups_per_s {total.item() / (slowest.item() / 1e3):.0f} "
              f"median_step_ms {times[len(times) // 2]:.3f}", flush=True)
    dist.destroy_process_group()
    peer_timing.leave()


if __name__ == "__main__":
    world, sharding = int(sys.argv[1]), sys.argv[2]
    assert sharding in ("row_wise", "table_wise"), "SHARDING: row_wise or table_wise"
    rest = [int(a) for a in sys.argv[3:]]
    steps, n_tables, rows, dim, batch = rest + [20, 8, 100000, 64, 2048][len(rest):]
    peer_timing.spawn(worker, world, 0, world, sharding, steps, n_tables, rows, dim, batch)
