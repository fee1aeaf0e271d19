#!/usr/bin/env python3
"""BERT-base inference checked against PyTorch (Hugging Face transformers, float64), for bench/gpu_run.sh.

  python3 bench/peers/bert_base_check.py make DIR [--small]         # random BertForPreTraining + inputs
  deno task infer --backend cuda --checkpoint DIR/checkpoint --input DIR/inputs.jsonl --output DIR/ours.safetensors
  python3 bench/peers/bert_base_check.py compare DIR                 # ours vs transformers in float64
  python3 bench/peers/bert_base_check.py config [--small]           # the configuration as JSON (for
                                                                    # bench/gpu_precompile.ts)

`make` writes a randomly initialised BertForPreTraining (BERT-base's configuration; --small: a 2-layer
one of hidden size 64 for a rehearsal; seed 0; LayerNorm weights and all biases drawn too, so no term hides) in Hugging Face layout, and
4 token-id rows of lengths 128, 100, 77 and 128 (BERT-base's sequence length, ragged so padding and the
attention mask are exercised). `compare` runs the same checkpoint in float64 on the CPU and compares
prediction_logits and seq_relationship_logits at the valid positions: max |ours - ref| / max |ref| must stay
under --rtol (default 1e-3: float32 kernels against a float64 reference over 12 layers). Prints one JSON
line {"ok", "worst", per output "rel_err"}; exits 1 when over.
"""

import argparse
import json
import os
import sys

import torch

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
                 hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
SMALL = dict(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64)
LENGTHS = [128, 100, 77, 128]


def make(d, config):
    from transformers import BertConfig, BertForPreTraining
    torch.manual_seed(0)
    cfg = BertConfig(**{**BERT_BASE, **config})
    model = BertForPreTraining(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(os.path.join(d, "checkpoint"), safe_serialization=True)
    lengths = [min(n, cfg.max_position_embeddings) for n in LENGTHS]
    g = torch.Generator().manual_seed(1)
    with open(os.path.join(d, "inputs.jsonl"), "w") as f:
        for n in lengths:
            ids = torch.randint(min(1000, cfg.vocab_size // 2), cfg.vocab_size, (n,), generator=g).tolist()
            ids[0], ids[-1] = 101, 102
            split = n // 2
            f.write(json.dumps({"input_ids": ids, "token_type_ids": [0] * split + [1] * (n - split),
                                "attention_mask": [1] * n}) + "\n")
    print(f"wrote {d}/checkpoint ({sum(p.numel() for p in model.parameters())} parameters) and {d}/inputs.jsonl",
          file=sys.stderr)


def compare(d, rtol):
    from safetensors.torch import load_file
    from transformers import BertForPreTraining
    model = BertForPreTraining.from_pretrained(os.path.join(d, "checkpoint"), torch_dtype=torch.float64).eval()
    rows = [json.loads(line) for line in open(os.path.join(d, "inputs.jsonl"))]
    S = max(len(r["input_ids"]) for r in rows)
    pad = lambda key: torch.tensor([r[key] + [0] * (S - len(r[key])) for r in rows])
    mask = pad("attention_mask")
    with torch.no_grad():
        ref = model(input_ids=pad("input_ids"), token_type_ids=pad("token_type_ids"), attention_mask=mask)
    ours = load_file(os.path.join(d, "ours.safetensors"))
    valid = mask.bool()
    errs = {}
    for name, want in [("prediction_logits", ref.prediction_logits[valid]),
                       ("seq_relationship_logits", ref.seq_relationship_logits)]:
        got = ours[name].double()
        got = got[valid] if name == "prediction_logits" else got
        if got.shape != want.shape:
            errs[name] = float("inf")
            continue
        errs[name] = float(((got - want).abs().max() / want.abs().max()).nan_to_num(float("inf")))
    worst = max(errs.values())
    print(json.dumps({"ok": worst <= rtol, "worst": worst, "rtol": rtol, "rel_err": errs}))
    return worst <= rtol


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["make", "compare", "config"])
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--small", action="store_true", help="a 2-layer model of hidden size 64 (a rehearsal)")
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args()
    config = SMALL if a.small else {}
    if a.what == "config":
        print(json.dumps({**BERT_BASE, **config}))
        return
    if not a.dir:
        ap.error(f"{a.what} needs a folder")
    os.makedirs(a.dir, exist_ok=True)
    if a.what == "make":
        make(a.dir, config)
    elif not compare(a.dir, a.rtol):
        sys.exit(1)


if __name__ == "__main__":
    main()
