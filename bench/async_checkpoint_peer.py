"""The peer of bench/async_checkpoint.sh: the same GPT and AdamW in PyTorch on one
gloo rank, saved with torch.distributed.checkpoint (DCP) synchronously
(dcp.save) and asynchronously (dcp.async_save, twice: it copies the state to host
memory and writes it on a background thread). Prints one line:
  dcp sync_s <s> async_blocking_s <first> async_blocking_later_s <second> async_write_s <s>
      step_s <quiet> step_s_writing <during>
usage: async_checkpoint_peer.py LAYERS EMBD DIR"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_timing  # noqa: E402
from torch_gpt import GPT  # noqa: E402


def main():
    layers, embd, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)  # Tessera's ranks compute on one thread too
    peer_timing.init_gloo(0, 1, peer_timing.free_port())
    torch.manual_seed(0)
    model = GPT(layers, 16, embd, 64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(256, (1, 64))

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(idx, idx).backward()
        opt.step()
        return time.perf_counter() - t0

    quiet = [step() for _ in range(4)][1:]  # the first step creates AdamW's state

    def state():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    t0 = time.perf_counter()
    dcp.save(state(), checkpoint_id=f"{root}/dcp_sync")
    sync_s = time.perf_counter() - t0

    def background_save(name):
        """async_save, training on while it writes: (blocking s, write s, step times)."""
        t0 = time.perf_counter()
        future = dcp.async_save(state(), checkpoint_id=f"{root}/{name}")
        blocking = time.perf_counter() - t0
        steps = []
        while not future.done():
            steps.append(step())
        future.result()
        # The last step ends after the write did.
        return blocking, time.perf_counter() - t0, steps[:-1] if len(steps) > 1 else steps

    blocking_s, write_s, writing = background_save("dcp_async_1")
    blocking_later_s, _, writing_later = background_save("dcp_async_2")
    writing += writing_later
    print(f"dcp sync_s {sync_s:.3f} async_blocking_s {blocking_s:.3f} "
          f"async_blocking_later_s {blocking_later_s:.3f} async_write_s {write_s:.2f} "
          f"step_s {statistics.median(quiet):.3f} step_s_writing "
          f"{statistics.median(writing) if writing else float('nan'):.3f}", flush=True)
    dist.destroy_process_group()
    peer_timing.leave()


if __name__ == "__main__":
    main()
