#!/usr/bin/env python3
"""transformers' side of test_hf_gpt2.cpp: the reference GPT-2 and its logits.

usage: gpt2_interop.py create OUT_DIR
           writes OUT_DIR/lm (GPT2LMHeadModel, one model.safetensors),
           OUT_DIR/lm_sharded (the same model in several shards with an index),
           OUT_DIR/base (its GPT2Model: names without "transformer.") and
           OUT_DIR/reference.safetensors ({"tokens": int64 [B, T],
           "logits": float32 [B, T, V]}, the model's logits on those tokens).
       gpt2_interop.py check MODEL_DIR REFERENCE
           loads MODEL_DIR with GPT2LMHeadModel.from_pretrained and compares its
           logits on REFERENCE's tokens with REFERENCE's logits.

Exits 0 when all is well, 1 on a mismatch, 3 when transformers is missing.
"""
import sys

try:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:
    print(f"gpt2_interop.py: cannot import torch, safetensors and transformers with "
          f"{sys.executable} ({e}); run scripts/install-deps.sh, which installs them into "
          "the virtual environment the tests use")
    sys.exit(3)

TOLERANCE = 1e-4


def logits_of(model, tokens):
    model.eval()
    with torch.no_grad():
        return model(tokens).logits.float()


def create(out_dir):
    torch.manual_seed(20240607)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=32, vocab_size=96,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    # Every parameter random, LayerNorms included, so that a transposed or
    # swapped tensor cannot go unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(f"{out_dir}/lm", safe_serialization=True)
    model.save_pretrained(f"{out_dir}/lm_sharded", safe_serialization=True,
                          max_shard_size="100KB")
    model.transformer.save_pretrained(f"{out_dir}/base", safe_serialization=True)
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, config.vocab_size, (3, config.n_positions), generator=gen)
    logits = logits_of(model, tokens)
    save_file({"tokens": tokens, "logits": logits.contiguous()},
              f"{out_dir}/reference.safetensors")
    print(f"gpt2_interop.py: created; logits |max| {logits.abs().max().item():.3f}")
    return 0


def check(model_dir, reference):
    ref = load_file(reference)
    model, info = GPT2LMHeadModel.from_pretrained(model_dir, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"gpt2_interop.py: from_pretrained({model_dir}) reported {problems}")
        return 1
    diff = (logits_of(model, ref["tokens"]) - ref["logits"]).abs().max().item()
    print(f"gpt2_interop.py: {model_dir}: max |logits - reference| = {diff:.3e}")
    return 0 if diff <= TOLERANCE else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "create":
        return create(argv[2])
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
