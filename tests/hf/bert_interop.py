#!/usr/bin/env python3
"""transformers' side of test_hf_bert.cpp: reference BERT models and their logits.

usage: bert_interop.py create OUT_DIR
           writes tiny random BertForMaskedLM models, each in OUT_DIR/NAME with its
           logits in OUT_DIR/NAME.reference.safetensors ({"tokens": int64 [B, T],
           "mask": int64 [B, T] (1: token, 0: padding), "logits": float32 [B, T, V]}):
             base      4 heads, 2 layers
             sharded   the base model in several shards with an index
             wide      1 head, 3 layers, intermediate != 4 * hidden, pad_token_id 1
       bert_interop.py check MODEL_DIR REFERENCE [MODEL_DIR REFERENCE ...]
           loads MODEL_DIR with BertForMaskedLM.from_pretrained and compares its
           logits on REFERENCE's tokens and mask with REFERENCE's logits (the
           padded positions included).

Exits 0 when all is well, 1 on a mismatch, 3 when transformers is missing.
"""
import sys

try:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertForMaskedLM
except ImportError as e:
    print(f"bert_interop.py: cannot import torch, safetensors and transformers with "
          f"{sys.executable} ({e}); run scripts/install-deps.sh, which installs them into "
          "the virtual environment the tests use")
    sys.exit(3)

TOLERANCE = 1e-4
SEQ = 24
VOCAB = 80


def logits_of(model, tokens, mask):
    model.eval()
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask).logits.float()


def random_model(seed, **overrides):
    torch.manual_seed(seed)
    args = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, max_position_embeddings=SEQ + 8, type_vocab_size=2,
                layer_norm_eps=1e-12)
    args.update(overrides)
    model = BertForMaskedLM(BertConfig(**args))
    # Every parameter random, LayerNorms and biases included, so that a
    # transposed or swapped tensor cannot go unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def save_reference(model, path):
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (3, SEQ), generator=gen)
    mask = torch.ones_like(tokens)
    mask[1, SEQ - 5:] = 0  # the second sequence padded at its end
    mask[2, SEQ // 2:] = 0
    logits = logits_of(model, tokens, mask)
    save_file({"tokens": tokens, "mask": mask, "logits": logits.contiguous()}, path)


def create(out_dir):
    models = {
        "base": random_model(1),
        "wide": random_model(2, num_hidden_layers=3, num_attention_heads=1,
                             intermediate_size=72, pad_token_id=1, layer_norm_eps=1e-5),
    }
    for name, model in models.items():
        model.save_pretrained(f"{out_dir}/{name}", safe_serialization=True)
        save_reference(model, f"{out_dir}/{name}.reference.safetensors")
    models["base"].save_pretrained(f"{out_dir}/sharded", safe_serialization=True,
                                   max_shard_size="30KB")
    save_reference(models["base"], f"{out_dir}/sharded.reference.safetensors")
    print(f"bert_interop.py: created {', '.join(list(models) + ['sharded'])}")
    return 0


def check(model_dir, reference):
    ref = load_file(reference)
    model, info = BertForMaskedLM.from_pretrained(model_dir, output_loading_info=True,
                                                  torch_dtype=torch.float32)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"bert_interop.py: from_pretrained({model_dir}) reported {problems}")
        return 1
    diff = (logits_of(model, ref["tokens"], ref["mask"]) - ref["logits"]).abs().max().item()
    print(f"bert_interop.py: {model_dir}: max |logits - reference| = {diff:.3e}")
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
