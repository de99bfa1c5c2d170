"""PyTorch peer for bench/zero_vs_pytorch.sh: the GPT of bench/ddp_pytorch_peer.py at a
given size, trained with AdamW over gloo: DDP plainly ("ddp"), DDP with
torch.distributed.optim.ZeroRedundancyOptimizer ("zero1", PyTorch's ZeRO stage 1),
FSDP2 ("fsdp2": torch.distributed.fsdp.fully_shard on every block and the root,
PyTorch 2.x's ZeRO stage 3), or DeepSpeed's engine at ZeRO stage 1, 2 or 3 ("ds1",
"ds2", "ds3": DS_ACCELERATOR=cpu, gloo, its torch AdamW), when deepspeed imports.
One thread per rank, fixed random tokens. Prints from rank 0:
  median_step_ms <x> peak_rss_mb <max over ranks>
Usage: zero_pytorch_peer.py MODE WORLD STEPS PORT LAYERS EMBD BATCH [SEQ]   (PORT 0: a free one)"""
import os
import sys

import torch
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_timing  # noqa: E402
from torch_gpt import GPT  # noqa: E402

MODE, WORLD, STEPS, PORT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
N_LAYER, N_EMBD, BATCH = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
BLOCK = int(sys.argv[8]) if len(sys.argv) > 8 else 64
N_HEAD = N_EMBD // 64 if N_EMBD % 64 == 0 else 4
VOCAB = 256


def deepspeed_step_fn(x, y):
    import deepspeed
    model = GPT(N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB)
    cfg = {"train_batch_size": BATCH * WORLD, "train_micro_batch_size_per_gpu": BATCH,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
           "zero_optimization": {"stage": int(MODE[2:])}, "steps_per_print": 1 << 30}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=cfg)

    def step():
        engine.backward(engine(x, y))
        engine.step()
    return step


def worker(rank, port):
    torch.set_num_threads(1)
    peer_timing.init_gloo(rank, WORLD, port)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(VOCAB, (BATCH, BLOCK + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    if MODE.startswith("ds"):
        return measure(rank, deepspeed_step_fn(x, y))
    if MODE == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        model = GPT(N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB)
        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(GPT(N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB))
    if MODE == "zero1":
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
    measure(rank, step)


def measure(rank, step):
    peer_timing.measure(rank, step, STEPS, warmup=2 if STEPS > 3 else 0)


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    peer_timing.spawn(worker, WORLD, PORT)
