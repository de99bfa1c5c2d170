"""Tessera's Gloo and LibTorch's Gloo in one process, at the same time.

libtorch_cpu.so contains and exports its own Gloo; Tessera's Gloo backend carries a
private static copy (another version) whose symbols are all local. This program
imports PyTorch 2.x, creates two c10d ProcessGroupGloo ranks on threads, loads
Tessera's backend through the probe library and runs both copies' all_reduces
concurrently, several rounds, checking every result. A symbol of one copy bound to
the other's code shows up here as a crash or a wrong sum.

usage: gloo_isolation.py PROBE_LIBRARY
"""
import ctypes
import datetime
import sys
import threading

import torch
import torch.distributed as dist

ROUNDS = 5
NUMEL = 1 << 18


def torch_gloo_rank(store, rank, errors):
    try:
        pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=60))
        base = torch.arange(NUMEL, dtype=torch.float32)
        for it in range(ROUNDS):
            t = base + (rank + 1 + it)
            pg.allreduce([t]).wait()
            if not torch.equal(t, base * 2 + (3 + 2 * it)):
                errors.append(f"torch gloo rank {rank}: wrong sum in round {it}")
                return
    except Exception as e:  # reported below, with the rank
        errors.append(f"torch gloo rank {rank}: {e}")


def tessera_gloo(probe, errors):
    message = ctypes.create_string_buffer(4096)
    if probe.tessera_gloo_probe(ROUNDS, NUMEL, message, len(message)) != 0:
        errors.append("tessera gloo: " + message.value.decode())


def main():
    probe = ctypes.CDLL(sys.argv[1])
    probe.tessera_gloo_probe.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_char_p, ctypes.c_int]
    errors = []
    store = dist.HashStore()
    threads = [threading.Thread(target=torch_gloo_rank, args=(store, r, errors)) for r in range(2)]
    threads.append(threading.Thread(target=tessera_gloo, args=(probe, errors)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Once more, one after the other, each copy alone.
    tessera_gloo(probe, errors)
    if errors:
        print("\n".join(errors))
        return 1
    print(f"torch {torch.__version__}: c10d gloo and tessera gloo, {ROUNDS} rounds each "
          f"of {NUMEL} floats, concurrently in one process: all sums correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
