#!/usr/bin/env python3
"""The safetensors Python library's side of test_safetensors.cpp.

usage: safetensors_interop.py write SPEC OUT    save SPEC's tensors with save_file
       safetensors_interop.py check SPEC FILE   load FILE and compare it with SPEC

SPEC is JSON: {"metadata": {k: v}, "tensors": [{"name", "dtype" ("F32", ...),
"shape", "values" (flat, exact in the dtype)}]}. Tensors are compared bit for bit.
Exits 0 when all is well, 1 on a mismatch, 3 when safetensors is missing.
"""
import json
import sys

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"safetensors_interop.py: cannot import torch and safetensors with {sys.executable} "
          f"({e}); run scripts/install-deps.sh, which installs both into the virtual "
          "environment the tests use")
    sys.exit(3)

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


def build(entry):
    """The tensor an entry of the spec describes."""
    dtype = DTYPES[entry["dtype"]]
    if dtype == torch.bool:
        source = torch.bool
    elif dtype.is_floating_point:
        source = torch.float64
    else:
        source = torch.int64
    values = torch.tensor(entry["values"], dtype=source)
    return values.to(dtype).reshape(entry["shape"])


def same_bits(a, b):
    """Bit-exact equality (float8 has no torch.equal on the CPU)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def check(spec, path):
    errors = []
    loaded = load_file(path)
    names = [e["name"] for e in spec["tensors"]]
    if sorted(loaded) != sorted(names):
        errors.append(f"names {sorted(loaded)} != expected {sorted(names)}")
    for entry in spec["tensors"]:
        want = build(entry)
        got = loaded.get(entry["name"])
        if got is not None and not same_bits(got, want):
            errors.append(f"{entry['name']}: got {got.dtype} {list(got.shape)} {got.tolist()}, "
                          f"expected {want.dtype} {list(want.shape)} {want.tolist()}")
    with safe_open(path, framework="pt") as f:
        if f.metadata() != spec["metadata"]:
            errors.append(f"metadata {f.metadata()} != expected {spec['metadata']}")
        # Partial reads go through the same offsets.
        for entry in spec["tensors"]:
            if len(entry["shape"]) >= 1 and entry["shape"][0] >= 2:
                part = f.get_slice(entry["name"])[1:]
                if not same_bits(part, build(entry)[1:]):
                    errors.append(f"{entry['name']}: get_slice()[1:] differs")
    for e in errors:
        print("safetensors_interop.py:", path, e)
    return 1 if errors else 0


def main():
    mode, spec_path, path = sys.argv[1:4]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    if mode == "write":
        save_file({e["name"]: build(e) for e in spec["tensors"]}, path, metadata=spec["metadata"])
        return 0
    if mode == "check":
        return check(spec, path)
    print(f"safetensors_interop.py: unknown mode {mode!r} (write or check)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
