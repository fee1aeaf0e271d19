#!/usr/bin/env python3
"""PyTorch peer for bertfuse's benchmarks: BERT pretraining steps and inference, eager with AMP and
torch.compile, on the same GPU in the same session as our own runs (DESIGN.md, "Peers to run beside us").

  python3 bench/peers/torch_bert.py                      # BERT-large on CUDA: fp16 and bf16, eager and compile
  python3 bench/peers/torch_bert.py --device cpu --tiny  # a seconds-long smoke run (CI)
  python3 bench/peers/torch_bert.py --device cpu --config '{"name": "bert-tiny", ...}' --seq 64 --masked 10 \
      --train-batch 8 --infer-batches 8,1              # CPU mode: fp32, eager and torch.compile, the
                                                     # shapes `deno task bench:bert --backend cpu` runs

What is timed:
  train   one training step at sequence 128 with 20 masked positions per sequence (NVIDIA's phase-1
          setting): forward, MLM loss on the gathered masked positions + NSP loss, backward, and a LAMB
          optimizer step (our own LAMB written with torch._foreach ops: Adam moments, bias correction,
          weight decay, a per-tensor trust ratio ||w|| / ||update||), with a dynamic loss scaler for fp16.
  infer   the pretraining forward (MLM logits over all positions and NSP logits) at sequence 128: batch 64
          (throughput) and batch 1 (latency), under torch.inference_mode.
Each measurement: warm-up iterations (which include torch.compile's compilation), then N timed iterations
with CUDA events (perf_counter on the CPU), the median, min and max reported with the load average read just
before them. Peak memory is torch.cuda.max_memory_allocated over the measurement (null on the CPU).

Output: one JSON line per measurement on stdout,
  {"name": "bert-large-train-s128-fp16", "impl": "torch-eager", "seq_per_s": ..., "ms": ..., "min_ms": ...,
   "max_ms": ..., "load": [1m, 5m, 15m], "peak_bytes": ..., plus "device", "torch", "version", "precision",
   "batch", "model", "optimizer"}
and progress and skipped measurements (with the reason) on stderr; without torch, one line and exit status 3
(bench/peers/peer_common.py).

The model: Hugging Face's BertForPreTraining when `transformers` imports (--model hf), else a plain-PyTorch
BERT written here from the paper's equations (--model plain), with the same parameter shapes; the MLM head
runs on the gathered masked positions only in both. The configuration is models/bert-large.ts's.
"""

import argparse
import json
import math
import statistics
import sys
import time

from peer_common import BERT_LARGE, TINY, load_average, missing

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    missing("torch", e)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- the plain-PyTorch BERT (the architecture of models/bert.ts and Hugging Face's BertForPreTraining) ---

class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.qkv = nn.Linear(h, 3 * h)
        self.attn_out = nn.Linear(h, h)
        self.ln1 = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.inter = nn.Linear(h, c["intermediate_size"])
        self.out = nn.Linear(c["intermediate_size"], h)
        self.ln2 = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.p_hidden = c["hidden_dropout_prob"]
        self.p_attn = c["attention_probs_dropout_prob"]

    def forward(self, x, additive_mask):
        b, s, h = x.shape
        dh = h // self.heads
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh) + additive_mask
        p = F.dropout(scores.softmax(-1), self.p_attn, self.training)
        ctx = (p @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + F.dropout(self.attn_out(ctx), self.p_hidden, self.training))
        y = self.out(F.gelu(self.inter(x)))
        return self.ln2(x + F.dropout(y, self.p_hidden, self.training))


class PlainBert(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.word = nn.Embedding(c["vocab_size"], h)
        self.pos = nn.Embedding(c["max_position_embeddings"], h)
        self.token_type = nn.Embedding(c["type_vocab_size"], h)
        self.ln = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.p_hidden = c["hidden_dropout_prob"]
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.pooler = nn.Linear(h, h)
        self.mlm_dense = nn.Linear(h, h)
        self.mlm_ln = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.mlm_bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        self.nsp = nn.Linear(h, 2)
        std = c["initializer_range"]
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def encode(self, ids, types, mask):
        s = ids.shape[1]
        pos = torch.arange(s, device=ids.device)
        x = self.ln(self.word(ids) + self.pos(pos)[None] + self.token_type(types))
        x = F.dropout(x, self.p_hidden, self.training)
        additive = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, additive)
        return x, torch.tanh(self.pooler(x[:, 0]))

    def mlm(self, hidden):
        t = self.mlm_ln(F.gelu(self.mlm_dense(hidden)))
        return t @ self.word.weight.t() + self.mlm_bias  # the decoder is tied to the word embeddings

    def forward(self, ids, types, mask, positions=None):
        seq, pooled = self.encode(ids, types, mask)
        if positions is not None:
            seq = seq.gather(1, positions[..., None].expand(-1, -1, seq.shape[-1]))
        return self.mlm(seq), self.nsp(pooled)


class HfBert(nn.Module):
    """BertForPreTraining with the MLM head applied to the gathered masked positions only."""

    def __init__(self, c):
        super().__init__()
        from transformers import BertConfig, BertForPreTraining

        cfg = BertConfig(**{k: v for k, v in c.items() if k != "name"}, hidden_act="gelu")
        self.model = BertForPreTraining(cfg)

    def forward(self, ids, types, mask, positions=None):
        seq, pooled = self.model.bert(input_ids=ids, token_type_ids=types, attention_mask=mask,
                                      return_dict=False)[:2]
        if positions is not None:
            seq = seq.gather(1, positions[..., None].expand(-1, -1, seq.shape[-1]))
        return self.model.cls.predictions(seq), self.model.cls.seq_relationship(pooled)


# --- LAMB ---

class Lamb:
    """LAMB (You et al. 2019) with Adam's bias correction, as NVIDIA's BERT uses it; foreach ops when present."""

    def __init__(self, params, lr=6e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
        self.params = [p for p in params if p.requires_grad]
        self.lr, (self.b1, self.b2), self.eps, self.wd = lr, betas, eps, weight_decay
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0
        self.foreach = all(hasattr(torch, f) for f in ("_foreach_mul_", "_foreach_addcmul_", "_foreach_norm"))

    @torch.no_grad()
    def step(self):
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        ps = [p for p in self.params if p.grad is not None]
        idx = [i for i, p in enumerate(self.params) if p.grad is not None]
        gs = [p.grad for p in ps]
        ms, vs = [self.m[i] for i in idx], [self.v[i] for i in idx]
        if self.foreach:
            torch._foreach_mul_(ms, self.b1)
            torch._foreach_add_(ms, gs, alpha=1 - self.b1)
            torch._foreach_mul_(vs, self.b2)
            torch._foreach_addcmul_(vs, gs, gs, value=1 - self.b2)
            denom = torch._foreach_sqrt(torch._foreach_div(vs, c2))
            torch._foreach_add_(denom, self.eps)
            upd = torch._foreach_div(torch._foreach_div(ms, c1), denom)
            torch._foreach_add_(upd, ps, alpha=self.wd)
            wn = torch.stack(torch._foreach_norm(ps))
            un = torch.stack(torch._foreach_norm(upd))
            ratio = torch.where((wn > 0) & (un > 0), wn / un, torch.ones_like(wn))
            torch._foreach_mul_(upd, list((-self.lr * ratio).unbind()))
            torch._foreach_add_(ps, upd)
        else:
            for p, g, m, v in zip(ps, gs, ms, vs):
                m.mul_(self.b1).add_(g, alpha=1 - self.b1)
                v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
                u = (m / c1) / ((v / c2).sqrt() + self.eps) + self.wd * p
                wn, un = p.norm(), u.norm()
                ratio = (wn / un) if (wn > 0 and un > 0) else 1.0
                p.add_(u, alpha=-self.lr * float(ratio))

    def zero_grad(self):
        for p in self.params:
            p.grad = None


# --- timing ---

class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def time(self, fn, warmup, iters):
        """Median, min and max of `iters` timed calls after `warmup`, and the load average read before them."""
        for _ in range(warmup):
            fn()
        self.sync()
        load = load_average()
        times = []
        for _ in range(iters):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1000)
        return dict(ms=statistics.median(times), min_ms=min(times), max_ms=max(times), load=load)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def batch_data(c, batch, seq, masked, device, gen):
    v = c["vocab_size"]
    ids = torch.randint(0, v, (batch, seq), generator=gen)
    types = (torch.arange(seq)[None] >= seq // 2).long().expand(batch, seq).contiguous()
    mask = torch.ones(batch, seq, dtype=torch.long)
    # Distinct masked positions per row (never [CLS] at 0), as the data pipeline makes them.
    positions = torch.stack([torch.randperm(seq - 1, generator=gen)[:masked].sort().values + 1 for _ in range(batch)])
    labels = torch.randint(0, v, (batch, masked), generator=gen)
    nsp = torch.randint(0, 2, (batch,), generator=gen)
    return [t.to(device) for t in (ids, types, mask, positions, labels, nsp)]


def autocast(device, precision):
    if precision == "fp32":
        return torch.autocast(device.type, enabled=False)
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype)


def make_model(c, kind, device):
    torch.manual_seed(0)
    model = (HfBert(c) if kind == "hf" else PlainBert(c)).to(device)
    return model


def emit(record):
    print(json.dumps(record), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--tiny", action="store_true", help="a tiny model and sizes, for a smoke test")
    ap.add_argument("--precision", default=None, help="comma list of fp16,bf16,fp32 (default: fp16,bf16 on "
                    "CUDA; fp32 on the CPU)")
    ap.add_argument("--impl", default="eager,compile", help="comma list of eager,compile")
    ap.add_argument("--what", default="train,infer", help="comma list of train,infer")
    ap.add_argument("--model", default="auto", choices=["auto", "hf", "plain"])
    ap.add_argument("--train-batch", type=int, default=None, help="training batch (default 64; tiny 2)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default 5; tiny 1)")
    ap.add_argument("--iters", type=int, default=None, help="timed iterations (default 20; tiny 2)")
    ap.add_argument("--config", default=None, help="the model's configuration as JSON (Hugging Face keys and a "
                    "\"name\"), instead of BERT-large's; bench/bert.ts passes its model's")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default 128; tiny 32)")
    ap.add_argument("--masked", type=int, default=None, help="masked positions per sequence (default 20; tiny 5)")
    ap.add_argument("--infer-batches", default=None, help="comma list of inference batches (default 64,1)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's own choice)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        log("error: --device cuda but torch.cuda.is_available() is False")
        sys.exit(1)
    c = TINY if a.tiny else BERT_LARGE
    if a.config:
        # Only the keys the peer's models read (a model file's config also holds e.g. hidden_act, num_labels).
        c = dict(BERT_LARGE, **{k: v for k, v in json.loads(a.config).items() if k in BERT_LARGE})
    seq, masked = (32, 5) if a.tiny else (128, 20)
    seq = a.seq or seq
    masked = a.masked or masked
    infer_batches = (2, 1) if a.tiny else (64, 1)
    if a.infer_batches:
        infer_batches = tuple(int(b) for b in a.infer_batches.split(","))
    train_batch = a.train_batch or (2 if a.tiny else 64)
    warmup = a.warmup if a.warmup is not None else (1 if a.tiny else 5)
    iters = a.iters or (2 if a.tiny else 20)
    precisions = (a.precision or ("fp16,bf16" if device.type == "cuda" else "fp32")).split(",")
    impls = a.impl.split(",")
    whats = a.what.split(",")
    kind = a.model
    if kind == "auto":
        try:
            import transformers  # noqa: F401

            kind = "hf"
        except ImportError:
            kind = "plain"
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    log(f"torch {torch.__version__} on {dev_name}; model {c['name']} ({kind}); seq {seq}, {masked} masked")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    timer = Timer(device)
    gen = torch.Generator().manual_seed(1234)
    common = dict(device=dev_name, torch=torch.__version__, version=torch.__version__, model=kind)

    for impl in impls:
        if impl == "compile" and not hasattr(torch, "compile"):
            log(f"skipped torch-compile: torch {torch.__version__} has no torch.compile")
            continue
        for precision in precisions:
            if device.type == "cpu" and precision == "fp16":
                log("skipped fp16 on the CPU: autocast has no fp16 there")
                continue
            # torch.compile may not work everywhere (Inductor needs a working C++ toolchain on the CPU): a
            # failure skips that measurement, with the reason, and the others still run.
            if "train" in whats:
                guarded(impl, lambda: run_train(c, kind, device, impl, precision, train_batch, seq, masked, warmup,
                                                iters, timer, gen, common))
            if "infer" in whats:
                for b in infer_batches:
                    guarded(impl, lambda: run_infer(c, kind, device, impl, precision, b, seq, warmup, iters, timer,
                                                    gen, common))


def guarded(impl, run):
    if impl != "compile":
        return run()
    try:
        run()
    except Exception as e:  # noqa: BLE001 - any compile failure is reported and skipped
        log(f"skipped a torch-compile measurement: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def reset_peak(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak(device):
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def run_train(c, kind, device, impl, precision, batch, seq, masked, warmup, iters, timer, gen, common):
    name = f"{c['name']}-train-s{seq}-{precision}"
    model = make_model(c, kind, device).train()
    fwd = torch.compile(model) if impl == "compile" else model
    opt = Lamb(model.parameters())
    scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16" and device.type == "cuda")
    ids, types, mask, positions, labels, nsp = batch_data(c, batch, seq, masked, device, gen)
    reset_peak(device)

    def step():
        with autocast(device, precision):
            mlm, nsp_logits = fwd(ids, types, mask, positions)
            loss = F.cross_entropy(mlm.float().flatten(0, 1), labels.flatten()) + F.cross_entropy(nsp_logits.float(), nsp)
        scaler.scale(loss).backward()
        if scaler.is_enabled():
            scaler.unscale_(opt_shim)
            # The scaler's own inf/NaN check of the unscaled gradients (one device-to-host sync).
            if sum(v.item() for v in scaler._found_inf_per_device(opt_shim).values()):
                scaler.update()
                opt.zero_grad()
                return
        opt.step()
        if scaler.is_enabled():
            scaler.update()
        opt.zero_grad()

    # GradScaler.unscale_ wants a torch optimizer; a shim exposing our parameters as one group does.
    opt_shim = torch.optim.SGD(opt.params, lr=0.0)
    try:
        t = timer.time(step, warmup, iters)
    except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError as e:
        log(f"skipped {name} {impl}: {str(e).splitlines()[0]}")
        return
    emit(dict(name=name, impl=f"torch-{impl}", seq_per_s=batch / (t["ms"] / 1000), **t, peak_bytes=peak(device),
              precision=precision, batch=batch, optimizer="lamb", **common))
    del model, fwd, opt, opt_shim


def run_infer(c, kind, device, impl, precision, batch, seq, warmup, iters, timer, gen, common):
    name = f"{c['name']}-infer-s{seq}-b{batch}-{precision}"
    model = make_model(c, kind, device).eval()
    fwd = torch.compile(model) if impl == "compile" else model
    ids, types, mask, _, _, _ = batch_data(c, batch, seq, 1, device, gen)
    reset_peak(device)

    def step():
        with torch.inference_mode(), autocast(device, precision):
            fwd(ids, types, mask)

    t = timer.time(step, warmup, iters)
    emit(dict(name=name, impl=f"torch-{impl}", seq_per_s=batch / (t["ms"] / 1000), **t, peak_bytes=peak(device),
              precision=precision, batch=batch, optimizer=None, **common))
    del model, fwd


if __name__ == "__main__":
    main()
