#!/usr/bin/python3
"""Generate independent reference fixtures for a tiny random BERT in Hugging Face layout.

Run with Debian's interpreter, which has torch (CPU) and numpy:

    /usr/bin/python3 tools/make_hf_fixtures.py [--out tests/fixtures/hf-tiny]

(The pyenv `python3` on PATH has no torch; use /usr/bin/python3 explicitly.)

BERT is implemented here directly from its equations (Devlin et al. 2018,
Vaswani et al. 2017) in PyTorch, in float64; results are stored as float32.
No `transformers` / `safetensors` package is used: the safetensors format is
written by hand. All randomness comes from fixed-seed torch.Generators, so
rerunning the script produces byte-identical files.

Outputs (under --out):
  pretraining/{config.json,model.safetensors}        BertForPreTraining names, tied decoder omitted
  pretraining-gamma/{config.json,model.safetensors}  same weights, LayerNorm.gamma/.beta, decoder included
  classification/{config.json,model.safetensors}     BertForSequenceClassification (num_labels 3)
  qa/{config.json,model.safetensors}                 BertForQuestionAnswering (no pooler)
  inputs.jsonl                                       4 unpadded rows (lengths 7, 12, 5, 12)
  expected.safetensors                               logits, training batch, losses, gradients
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

DT = torch.float64

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

BASE_CONFIG = {
    "architectures": ["BertForPreTraining"],
    "model_type": "bert",
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
}
NUM_LABELS = 3
V = BASE_CONFIG["vocab_size"]
H = BASE_CONFIG["hidden_size"]
L = BASE_CONFIG["num_hidden_layers"]
NH = BASE_CONFIG["num_attention_heads"]
HD = H // NH
I = BASE_CONFIG["intermediate_size"]
P = BASE_CONFIG["max_position_embeddings"]
T = BASE_CONFIG["type_vocab_size"]
EPS = BASE_CONFIG["layer_norm_eps"]
MASK_VALUE = -10000.0

SEED_ENCODER = 20240601
SEED_CLASSIFIER = 20240602
SEED_QA = 20240603
SEED_INPUTS = 20240604
SEED_FD = 20240605

MATRIX_STD = 0.5
BIAS_STD = 0.1
LN_STD = 0.1

# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------


def draw(gen, shape, kind):
    """kind: 'matrix' N(0,0.5^2), 'bias' N(0,0.1^2), 'ln_weight' 1+N(0,0.1^2).

    Values are rounded to float32 (then held in float64) because the checkpoint stores float32: the
    expected outputs must be those of the weights a reader actually gets."""
    x = torch.randn(*shape, generator=gen, dtype=DT)
    if kind == "matrix":
        x = x * MATRIX_STD
    elif kind == "bias":
        x = x * BIAS_STD
    elif kind == "ln_weight":
        x = 1.0 + x * LN_STD
    else:
        raise ValueError(kind)
    return x.to(torch.float32).to(DT)


def linear_specs(prefix, out_f, in_f):
    return [(prefix + ".weight", (out_f, in_f), "matrix"), (prefix + ".bias", (out_f,), "bias")]


def ln_specs(prefix):
    return [(prefix + ".weight", (H,), "ln_weight"), (prefix + ".bias", (H,), "bias")]


def pretraining_specs():
    """(name, shape, kind) in a fixed drawing order."""
    s = [
        ("bert.embeddings.word_embeddings.weight", (V, H), "matrix"),
        ("bert.embeddings.position_embeddings.weight", (P, H), "matrix"),
        ("bert.embeddings.token_type_embeddings.weight", (T, H), "matrix"),
    ]
    s += ln_specs("bert.embeddings.LayerNorm")
    for i in range(L):
        p = "bert.encoder.layer.%d." % i
        s += linear_specs(p + "attention.self.query", H, H)
        s += linear_specs(p + "attention.self.key", H, H)
        s += linear_specs(p + "attention.self.value", H, H)
        s += linear_specs(p + "attention.output.dense", H, H)
        s += ln_specs(p + "attention.output.LayerNorm")
        s += linear_specs(p + "intermediate.dense", I, H)
        s += linear_specs(p + "output.dense", H, I)
        s += ln_specs(p + "output.LayerNorm")
    s += linear_specs("bert.pooler.dense", H, H)
    s += linear_specs("cls.predictions.transform.dense", H, H)
    s += ln_specs("cls.predictions.transform.LayerNorm")
    s += [("cls.predictions.bias", (V,), "bias")]
    s += linear_specs("cls.seq_relationship", 2, H)
    return s


def make_weights():
    g = torch.Generator().manual_seed(SEED_ENCODER)
    pre = {}
    for name, shape, kind in pretraining_specs():
        pre[name] = draw(g, shape, kind)
    g = torch.Generator().manual_seed(SEED_CLASSIFIER)
    cls_head = {}
    for name, shape, kind in linear_specs("classifier", NUM_LABELS, H):
        cls_head[name] = draw(g, shape, kind)
    g = torch.Generator().manual_seed(SEED_QA)
    qa_head = {}
    for name, shape, kind in linear_specs("qa_outputs", 2, H):
        qa_head[name] = draw(g, shape, kind)
    for d in (pre, cls_head, qa_head):
        for k, v in d.items():
            assert torch.count_nonzero(v).item() == v.numel(), k
    return pre, cls_head, qa_head


# --------------------------------------------------------------------------
# Model (equations)
# --------------------------------------------------------------------------


def linear(x, w, b):
    return x @ w.transpose(0, 1) + b


def layer_norm(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
    return (x - mean) / torch.sqrt(var + EPS) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def encoder(W, input_ids, token_type_ids, attention_mask):
    """Returns the sequence output [N,S,H]."""
    n, s = input_ids.shape
    pos = torch.arange(s)
    x = (
        W["bert.embeddings.word_embeddings.weight"][input_ids]
        + W["bert.embeddings.position_embeddings.weight"][pos][None, :, :]
        + W["bert.embeddings.token_type_embeddings.weight"][token_type_ids]
    )
    x = layer_norm(x, W["bert.embeddings.LayerNorm.weight"], W["bert.embeddings.LayerNorm.bias"])
    ext = (1.0 - attention_mask.to(DT)) * MASK_VALUE  # [N,S]
    ext = ext[:, None, None, :]  # broadcast over heads and queries
    for i in range(L):
        p = "bert.encoder.layer.%d." % i

        def heads(t):
            return t.reshape(n, s, NH, HD).permute(0, 2, 1, 3)  # [N,NH,S,HD]

        q = heads(linear(x, W[p + "attention.self.query.weight"], W[p + "attention.self.query.bias"]))
        k = heads(linear(x, W[p + "attention.self.key.weight"], W[p + "attention.self.key.bias"]))
        v = heads(linear(x, W[p + "attention.self.value.weight"], W[p + "attention.self.value.bias"]))
        scores = q @ k.transpose(-1, -2) / math.sqrt(HD) + ext
        probs = torch.softmax(scores, dim=-1)
        ctx = (probs @ v).permute(0, 2, 1, 3).reshape(n, s, H)
        a = linear(ctx, W[p + "attention.output.dense.weight"], W[p + "attention.output.dense.bias"])
        x = layer_norm(a + x, W[p + "attention.output.LayerNorm.weight"], W[p + "attention.output.LayerNorm.bias"])
        f = gelu(linear(x, W[p + "intermediate.dense.weight"], W[p + "intermediate.dense.bias"]))
        f = linear(f, W[p + "output.dense.weight"], W[p + "output.dense.bias"])
        x = layer_norm(f + x, W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"])
    return x


def pooler(W, seq):
    return torch.tanh(linear(seq[:, 0], W["bert.pooler.dense.weight"], W["bert.pooler.dense.bias"]))


def mlm_head(W, h):
    h = gelu(linear(h, W["cls.predictions.transform.dense.weight"], W["cls.predictions.transform.dense.bias"]))
    h = layer_norm(h, W["cls.predictions.transform.LayerNorm.weight"], W["cls.predictions.transform.LayerNorm.bias"])
    return h @ W["bert.embeddings.word_embeddings.weight"].transpose(0, 1) + W["cls.predictions.bias"]


def nsp_head(W, pooled):
    return linear(pooled, W["cls.seq_relationship.weight"], W["cls.seq_relationship.bias"])


def cross_entropy_rows(logits, labels):
    """Per-row cross entropy, logits [M,C], labels [M] (all valid)."""
    return torch.logsumexp(logits, dim=-1) - logits.gather(1, labels[:, None])[:, 0]


def pretraining_loss(W, batch):
    seq = encoder(W, batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    pos = batch["masked_lm_positions"]  # [N,M]
    gathered = seq.gather(1, pos[:, :, None].expand(-1, -1, H))  # [N,M,H]
    logits = mlm_head(W, gathered).reshape(-1, V)
    labels = batch["masked_lm_ids"].reshape(-1)
    valid = labels != -1
    mlm_loss = cross_entropy_rows(logits[valid], labels[valid]).mean()
    nsp_logits = nsp_head(W, pooler(W, seq))
    nsp_loss = cross_entropy_rows(nsp_logits, batch["next_sentence_labels"]).mean()
    return mlm_loss + nsp_loss, mlm_loss, nsp_loss


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

ROW_LENGTHS = [7, 12, 5, 12]
SEGMENT_B_START = {1: 7, 3: 6}  # rows with a second segment (token_type 1 from this index)
USER_MASKED_TAIL = {3: 2}  # row 3: last two tokens have attention_mask 0
CLS_ID = 2
S = 12
NUM_MASKED = 3
IGNORED_SLOTS = [(2, 2), (0, 2)]  # (row, slot) with label -1 / position 0
NSP_LABELS = [0, 1, 1, 0]


def make_inputs():
    g = torch.Generator().manual_seed(SEED_INPUTS)
    rows = []
    for r, n in enumerate(ROW_LENGTHS):
        ids = torch.randint(1, 99, (n,), generator=g).tolist()  # [1, 98]
        ids[0] = CLS_ID
        tt = [0] * n
        if r in SEGMENT_B_START:
            for j in range(SEGMENT_B_START[r], n):
                tt[j] = 1
        am = [1] * n
        for j in range(n - USER_MASKED_TAIL.get(r, 0), n):
            am[j] = 0
        rows.append({"input_ids": ids, "token_type_ids": tt, "attention_mask": am})

    def pad(key):
        return torch.tensor([row[key] + [0] * (S - len(row[key])) for row in rows], dtype=torch.long)

    batch = {k: pad(k) for k in ("input_ids", "token_type_ids", "attention_mask")}

    positions = torch.zeros(len(rows), NUM_MASKED, dtype=torch.long)
    labels = torch.full((len(rows), NUM_MASKED), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        n_attended = sum(row["attention_mask"])
        n_valid = NUM_MASKED - sum(1 for (rr, _) in IGNORED_SLOTS if rr == r)
        # distinct positions among attended tokens, excluding the CLS position 0
        perm = torch.randperm(n_attended - 1, generator=g)[:n_valid] + 1
        perm, _ = torch.sort(perm)
        positions[r, :n_valid] = perm
        labels[r, :n_valid] = torch.randint(1, 99, (n_valid,), generator=g)
    for r, sl in IGNORED_SLOTS:
        assert labels[r, sl].item() == -1 and positions[r, sl].item() == 0
    batch["masked_lm_positions"] = positions
    batch["masked_lm_ids"] = labels
    batch["next_sentence_labels"] = torch.tensor(NSP_LABELS, dtype=torch.long)
    return rows, batch


# --------------------------------------------------------------------------
# safetensors writer
# --------------------------------------------------------------------------

_DTYPES = {"F32": "<f4", "I32": "<i4"}


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype_str, numpy array). Written sorted by name."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        data = np.ascontiguousarray(np.asarray(arr).astype(_DTYPES[dtype])).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.asarray(arr).shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def f32(t):
    return ("F32", t.detach().to(torch.float64).numpy().astype(np.float32))


def i32(t):
    a = t.detach().numpy()
    assert a.min() >= -(2**31) and a.max() < 2**31
    return ("I32", a.astype(np.int32))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2) + "\n")


# --------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------


def finite_difference_check(W, batch, grads):
    g = torch.Generator().manual_seed(SEED_FD)
    names = [
        "bert.embeddings.word_embeddings.weight",
        "bert.encoder.layer.0.attention.self.key.weight",
        "cls.predictions.transform.LayerNorm.weight",
    ]
    h = 1e-5
    worst = 0.0
    for name in names:
        flat_n = W[name].numel()
        # only coordinates with a non-negligible gradient (word embeddings rows of
        # unused tokens only receive the tied-decoder gradient, which is fine too)
        idxs = torch.randperm(flat_n, generator=g)[:4].tolist()
        for idx in idxs:
            base = W[name].detach().clone()
            Wp = dict(W)
            plus = base.clone().reshape(-1)
            plus[idx] += h
            Wp[name] = plus.reshape(base.shape)
            lp = pretraining_loss(Wp, batch)[0].item()
            minus = base.clone().reshape(-1)
            minus[idx] -= h
            Wp[name] = minus.reshape(base.shape)
            lm = pretraining_loss(Wp, batch)[0].item()
            fd = (lp - lm) / (2 * h)
            ad = grads[name].reshape(-1)[idx].item()
            rel = abs(fd - ad) / max(abs(fd), abs(ad), 1e-3)
            worst = max(worst, rel)
            assert rel < 1e-6, "finite-difference mismatch %s[%d]: fd=%r autograd=%r rel=%g" % (name, idx, fd, ad, rel)
    return worst


def functional_cross_check(W, cls_head, qa_head, batch, seq_ref, loss, mlm_loss, nsp_loss, grads):
    """Recompute everything with torch.nn.functional building blocks (F.layer_norm,
    F.gelu, F.softmax, F.cross_entropy with ignore_index=-1, F.embedding) as a
    second, differently written implementation; assert float64 agreement."""
    import torch.nn.functional as F

    Wg = {n: t.clone().requires_grad_(True) for n, t in W.items()}
    ids, tt, am = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    n, s = ids.shape

    def ln(x, prefix):
        return F.layer_norm(x, (H,), Wg[prefix + ".weight"], Wg[prefix + ".bias"], eps=EPS)

    def lin(x, prefix):
        return F.linear(x, Wg[prefix + ".weight"], Wg[prefix + ".bias"])

    x = F.embedding(ids, Wg["bert.embeddings.word_embeddings.weight"])
    x = x + F.embedding(torch.arange(s).expand(n, s), Wg["bert.embeddings.position_embeddings.weight"])
    x = x + F.embedding(tt, Wg["bert.embeddings.token_type_embeddings.weight"])
    x = ln(x, "bert.embeddings.LayerNorm")
    bias = torch.where(am.bool(), 0.0, MASK_VALUE).to(DT).view(n, 1, 1, s)
    for i in range(L):
        p = "bert.encoder.layer.%d." % i
        q, k, v = (lin(x, p + "attention.self." + w).view(n, s, NH, HD).transpose(1, 2) for w in ("query", "key", "value"))
        probs = F.softmax(torch.einsum("nhqd,nhkd->nhqk", q, k) / math.sqrt(HD) + bias, dim=-1)
        ctx = torch.einsum("nhqk,nhkd->nqhd", probs, v).reshape(n, s, H)
        x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        f = lin(F.gelu(lin(x, p + "intermediate.dense"), approximate="none"), p + "output.dense")
        x = ln(f + x, p + "output.LayerNorm")
    seq = x
    pooled = torch.tanh(lin(seq[:, 0], "bert.pooler.dense"))
    pos = batch["masked_lm_positions"]
    g = seq[torch.arange(n)[:, None], pos]  # [N,M,H]
    t = ln(F.gelu(lin(g, "cls.predictions.transform.dense"), approximate="none"), "cls.predictions.transform.LayerNorm")
    logits = F.linear(t, Wg["bert.embeddings.word_embeddings.weight"], Wg["cls.predictions.bias"])
    mlm = F.cross_entropy(logits.reshape(-1, V), batch["masked_lm_ids"].reshape(-1), ignore_index=-1)
    nsp = F.cross_entropy(lin(pooled, "cls.seq_relationship"), batch["next_sentence_labels"])
    total = mlm + nsp
    gs = torch.autograd.grad(total, [Wg[k] for k in W])
    diffs = [
        (seq.detach() - seq_ref).abs().max().item(),
        abs(total.item() - loss.item()),
        abs(mlm.item() - mlm_loss.item()),
        abs(nsp.item() - nsp_loss.item()),
    ]
    for name, gr in zip(W, gs):
        diffs.append((gr - grads[name]).abs().max().item())
    worst = max(diffs)
    assert worst < 1e-10, "functional cross-check mismatch: %g" % worst
    return worst


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "hf-tiny"))
    args = ap.parse_args()
    out = args.out

    pre, cls_head, qa_head = make_weights()
    rows, batch = make_inputs()
    written = []

    def path(*parts):
        p = os.path.join(out, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        written.append(p)
        return p

    # ---- configs and weights
    encoder_names = [n for n in pre if n.startswith("bert.") and not n.startswith("bert.pooler.")]
    pooler_names = [n for n in pre if n.startswith("bert.pooler.")]
    model_meta = {"format": "pt"}

    write_json(path("pretraining", "config.json"), dict(BASE_CONFIG))
    write_safetensors(path("pretraining", "model.safetensors"), {n: f32(t) for n, t in pre.items()}, model_meta)

    gamma = {}
    for n, t in pre.items():
        if n.endswith("LayerNorm.weight"):
            n = n[: -len("weight")] + "gamma"
        elif n.endswith("LayerNorm.bias"):
            n = n[: -len("bias")] + "beta"
        gamma[n] = f32(t)
    gamma["cls.predictions.decoder.weight"] = f32(pre["bert.embeddings.word_embeddings.weight"])
    write_json(path("pretraining-gamma", "config.json"), dict(BASE_CONFIG))
    write_safetensors(path("pretraining-gamma", "model.safetensors"), gamma, model_meta)

    cls_cfg = dict(BASE_CONFIG)
    cls_cfg["architectures"] = ["BertForSequenceClassification"]
    cls_cfg["num_labels"] = NUM_LABELS
    # Names of our own, not Hugging Face's LABEL_<i> defaults, so a reader that drops them shows.
    names = ["negative", "neutral", "positive"][:NUM_LABELS]
    cls_cfg["id2label"] = {str(i): n for i, n in enumerate(names)}
    cls_cfg["label2id"] = {n: i for i, n in enumerate(names)}
    cls_w = {n: pre[n] for n in encoder_names + pooler_names}
    cls_w.update(cls_head)
    write_json(path("classification", "config.json"), cls_cfg)
    write_safetensors(path("classification", "model.safetensors"), {n: f32(t) for n, t in cls_w.items()}, model_meta)

    qa_cfg = dict(BASE_CONFIG)
    qa_cfg["architectures"] = ["BertForQuestionAnswering"]
    qa_w = {n: pre[n] for n in encoder_names}
    qa_w.update(qa_head)
    write_json(path("qa", "config.json"), qa_cfg)
    write_safetensors(path("qa", "model.safetensors"), {n: f32(t) for n, t in qa_w.items()}, model_meta)

    with open(path("inputs.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")

    # ---- forward passes (float64)
    lengths = torch.tensor(ROW_LENGTHS)
    in_row = (torch.arange(S)[None, :] < lengths[:, None]).to(DT)  # [N,S], 0 on batching padding
    with torch.no_grad():
        seq = encoder(pre, batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        pooled = pooler(pre, seq)
        zero = torch.zeros((), dtype=DT)
        prediction_logits = torch.where(in_row[:, :, None] > 0, mlm_head(pre, seq), zero)
        seq_rel_logits = nsp_head(pre, pooled)
        cls_logits = linear(pooled, cls_head["classifier.weight"], cls_head["classifier.bias"])
        qa_logits = linear(seq, qa_head["qa_outputs.weight"], qa_head["qa_outputs.bias"])
        start_logits = torch.where(in_row > 0, qa_logits[:, :, 0], zero)  # +0.0, never -0.0
        end_logits = torch.where(in_row > 0, qa_logits[:, :, 1], zero)

    # ---- loss and gradients
    Wg = {n: t.clone().requires_grad_(True) for n, t in pre.items()}
    loss, mlm_loss, nsp_loss = pretraining_loss(Wg, batch)
    names = list(pre)
    gs = torch.autograd.grad(loss, [Wg[n] for n in names])
    grads = {n: gr.detach() for n, gr in zip(names, gs)}

    # The key bias adds q.b_k to every score of a query, which softmax ignores: its
    # gradient is exactly 0 analytically; autograd leaves ~1e-16 rounding noise.
    for i in range(L):
        n = "bert.encoder.layer.%d.attention.self.key.bias" % i
        assert grads[n].abs().max().item() < 1e-12, n
        grads[n] = torch.zeros_like(grads[n])

    worst = finite_difference_check(pre, batch, grads)
    xdiff = functional_cross_check(pre, cls_head, qa_head, batch, seq, loss, mlm_loss, nsp_loss, grads)

    expected = {
        "pretraining.prediction_logits": f32(prediction_logits),
        "pretraining.seq_relationship_logits": f32(seq_rel_logits),
        "classification.logits": f32(cls_logits),
        "qa.start_logits": f32(start_logits),
        "qa.end_logits": f32(end_logits),
        "train.input_ids": i32(batch["input_ids"]),
        "train.token_type_ids": i32(batch["token_type_ids"]),
        "train.attention_mask": i32(batch["attention_mask"]),
        "train.masked_lm_positions": i32(batch["masked_lm_positions"]),
        "train.masked_lm_ids": i32(batch["masked_lm_ids"]),
        "train.next_sentence_labels": i32(batch["next_sentence_labels"]),
        "train.loss": f32(loss),
        "train.mlm_loss": f32(mlm_loss),
        "train.nsp_loss": f32(nsp_loss),
    }
    for n in names:
        expected["grad." + n] = f32(grads[n])
    write_safetensors(
        path("expected.safetensors"),
        expected,
        {"format": "bertfuse-fixture-1", "generator": "tools/make_hf_fixtures.py"},
    )

    print("loss      = %.10f" % loss.item())
    print("mlm_loss  = %.10f" % mlm_loss.item())
    print("nsp_loss  = %.10f" % nsp_loss.item())
    print("finite-difference check: 12 coordinates of 3 parameters, worst relative error %.3g" % worst)
    print("cross-check against torch.nn.functional primitives: max abs difference %.3g" % xdiff)
    print("files written:")
    for p in written:
        print("  %s (%d bytes)" % (p, os.path.getsize(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
