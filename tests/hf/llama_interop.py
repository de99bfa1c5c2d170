#!/usr/bin/env python3
"""transformers' side of test_hf_llama.cpp: reference Llama models and their logits.

usage: llama_interop.py create OUT_DIR
           writes tiny random LlamaForCausalLM models, each in OUT_DIR/NAME with
           its logits in OUT_DIR/NAME.reference.safetensors ({"tokens": int64
           [B, T], "logits": float32 [B, T, V]}):
             gqa       4 query heads sharing 2 key/value heads, untied head
             sharded   the gqa model in several shards with an index
             bf16      the gqa model stored in bfloat16 (logits of those weights)
             tied      multi-head, head tied to the embedding, head_dim != hidden/heads
             llama3    rope_scaling of type llama3 (Llama 3.1), rope_theta 500000
             linear    rope_scaling of type linear
       llama_interop.py check MODEL_DIR REFERENCE
           loads MODEL_DIR with LlamaForCausalLM.from_pretrained and compares its
           logits on REFERENCE's tokens with REFERENCE's logits.

Exits 0 when all is well, 1 on a mismatch, 3 when transformers is missing.
"""
import sys

try:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"llama_interop.py: cannot import torch, safetensors and transformers with "
          f"{sys.executable} ({e}); run scripts/install-deps.sh, which installs them into "
          "the virtual environment the tests use")
    sys.exit(3)

TOLERANCE = 1e-4
SEQ = 32


def logits_of(model, tokens):
    model.eval()
    with torch.no_grad():
        return model(tokens).logits.float()


def random_model(seed, **overrides):
    torch.manual_seed(seed)
    args = dict(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                bos_token_id=0, eos_token_id=0, pad_token_id=None)
    args.update(overrides)
    model = LlamaForCausalLM(LlamaConfig(**args))
    # Every parameter random, norms included, so that a transposed or swapped
    # tensor cannot go unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def save_reference(model, path, vocab):
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, vocab, (2, SEQ), generator=gen)
    logits = logits_of(model, tokens)
    save_file({"tokens": tokens, "logits": logits.contiguous()}, path)
    return logits


def create(out_dir):
    models = {
        "gqa": random_model(1),
        "tied": random_model(2, num_key_value_heads=4, head_dim=8, tie_word_embeddings=True),
        "llama3": random_model(3, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
        "linear": random_model(4, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    }
    for name, model in models.items():
        model.save_pretrained(f"{out_dir}/{name}", safe_serialization=True)
        save_reference(model, f"{out_dir}/{name}.reference.safetensors", 96)
    gqa = models["gqa"]
    gqa.save_pretrained(f"{out_dir}/sharded", safe_serialization=True, max_shard_size="40KB")
    save_reference(gqa, f"{out_dir}/sharded.reference.safetensors", 96)
    # The bf16 file's reference: the float32 model with its weights rounded to bf16.
    with torch.no_grad():
        for p in gqa.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    save_reference(gqa, f"{out_dir}/bf16.reference.safetensors", 96)
    gqa.to(torch.bfloat16).save_pretrained(f"{out_dir}/bf16", safe_serialization=True)
    print(f"llama_interop.py: created {', '.join(list(models) + ['sharded', 'bf16'])}")
    return 0


def check(model_dir, reference):
    ref = load_file(reference)
    model, info = LlamaForCausalLM.from_pretrained(model_dir, output_loading_info=True,
                                                   torch_dtype=torch.float32)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"llama_interop.py: from_pretrained({model_dir}) reported {problems}")
        return 1
    diff = (logits_of(model, ref["tokens"]) - ref["logits"]).abs().max().item()
    print(f"llama_interop.py: {model_dir}: max |logits - reference| = {diff:.3e}")
    return 0 if diff <= TOLERANCE else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "create":
        return create(argv[2])
    if len(argv) >= 4 and argv[1] == "check":
        status = 0
        for i in range(2, len(argv) - 1, 2):
            status = max(status, check(argv[i], argv[i + 1]))
        return status
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
