"""Lamb written out in plain PyTorch, float32, for test_lamb.cpp to compare against.

The formula is DeepSpeed's FusedLamb (eps outside the square root, weight decay
inside the update and its norm, trust ratio clamped to [min_coeff, max_coeff] and
1 when a norm is 0). Reads p0.<name> and g<step>.<name> from the input file,
writes the parameters and moments after every step to the output file.

usage: lamb_reference.py IN OUT lr beta1 beta2 eps weight_decay max_coeff min_coeff
                         bias_correction(0|1) steps
"""
import math
import sys

import torch
from safetensors.torch import load_file, save_file


def lamb_step(p, g, m, v, t, lr, b1, b2, eps, wd, max_coeff, min_coeff, bias_correction):
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    bc1 = 1 - math.pow(b1, t) if bias_correction else 1.0
    bc2 = 1 - math.pow(b2, t) if bias_correction else 1.0
    u = (m / bc1) / ((v / bc2).sqrt() + eps)
    if wd != 0:
        u = u + wd * p
    w_norm = p.norm()
    u_norm = u.norm()
    ratio = torch.ones((), dtype=p.dtype)
    if w_norm > 0 and u_norm > 0:
        ratio = (w_norm / u_norm).clamp(min_coeff, max_coeff)
    p.addcmul_(u, ratio, value=-lr)
    return ratio


def main():
    src, dst = sys.argv[1], sys.argv[2]
    lr, b1, b2, eps, wd, max_coeff, min_coeff = map(float, sys.argv[3:10])
    bias_correction = sys.argv[10] == "1"
    steps = int(sys.argv[11])
    tensors = load_file(src)
    names = sorted(k[len("p0."):] for k in tensors if k.startswith("p0."))
    params = {n: tensors["p0." + n].clone() for n in names}
    m = {n: torch.zeros_like(params[n]) for n in names}
    v = {n: torch.zeros_like(params[n]) for n in names}
    out = {}
    for t in range(1, steps + 1):
        for n in names:
            ratio = lamb_step(params[n], tensors[f"g{t}.{n}"], m[n], v[n], t, lr, b1, b2, eps,
                              wd, max_coeff, min_coeff, bias_correction)
            out[f"p{t}.{n}"] = params[n].clone()
            out[f"ratio{t}.{n}"] = ratio.reshape(1).clone()
    for n in names:
        out["exp_avg." + n] = m[n]
        out["exp_avg_sq." + n] = v[n]
    save_file(out, dst)


if __name__ == "__main__":
    main()
