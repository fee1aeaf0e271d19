#!/usr/bin/env python3
"""JAX/XLA peer for bertfuse's CPU benchmark (`deno task bench:bert` runs it after our cases, never beside
them): the training step of bench/peers/torch_bert.py — BERT forward with dropout, the MLM loss on the gathered
masked positions plus the NSP loss, backward, and LAMB (Adam's moments with bias correction, weight decay, a
per-tensor trust ratio ||w|| / ||update||) — as one jax.jit function, fp32; and the inference forward (MLM
logits at every position and NSP logits), jitted too.

  python3 bench/peers/jax_bert.py --tiny                     # a seconds-long smoke run
  python3 bench/peers/jax_bert.py --config '{"name": "bert-base", ...}' --seq 128 --masked 20 \\
      --train-batch 8 --infer-batches 8,1 --threads 2        # what bench:bert passes

XLA sizes its thread pool to the CPUs the process may run on, so --threads N keeps the process on N CPUs.
Output: peer_common.py's JSON lines, impl "jax-jit"; without jax, one line and exit status 3.
"""

import math
import sys

from peer_common import case_name, emit, log, missing, parser, pin_threads, record, settings, time_it

ARGS = parser(__doc__.split("\n")[0]).parse_args()
pin_threads(ARGS.threads)  # before XLA starts its threads

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:
    missing("jax", e)


def init(c, key):
    """Parameters as torch_bert.py initializes them: weights and embeddings N(0, 0.02²), biases 0, LayerNorm 1/0."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    keys = iter(jax.random.split(key, 8 + 8 * c["num_hidden_layers"]))

    def normal(*shape):
        return c["initializer_range"] * jax.random.normal(next(keys), shape, jnp.float32)

    def dense(n_in, n_out):
        return {"w": normal(n_in, n_out), "b": jnp.zeros(n_out, jnp.float32)}

    def norm():
        return {"g": jnp.ones(h, jnp.float32), "b": jnp.zeros(h, jnp.float32)}

    return {
        "word": normal(v, h), "pos": normal(c["max_position_embeddings"], h),
        "type": normal(c["type_vocab_size"], h), "ln": norm(),
        "layers": [{"qkv": dense(h, 3 * h), "out": dense(h, h), "ln1": norm(), "inter": dense(h, i),
                    "down": dense(i, h), "ln2": norm()} for _ in range(c["num_hidden_layers"])],
        "pooler": dense(h, h), "mlm": dense(h, h), "mlm_ln": norm(),
        "mlm_bias": jnp.zeros(v, jnp.float32), "nsp": dense(h, 2),
    }


def forward(c, p, ids, types, mask, positions, key):
    """MLM logits (at `positions`, or at every position when None) and NSP logits; dropout when `key` is set."""
    keys = iter(jax.random.split(key, 2 + 3 * c["num_hidden_layers"])) if key is not None else None
    eps, heads = c["layer_norm_eps"], c["num_attention_heads"]

    def drop(x, rate):
        if keys is None or rate == 0:
            return x
        keep = jax.random.bernoulli(next(keys), 1 - rate, x.shape)
        return jnp.where(keep, x / (1 - rate), 0)

    def ln(x, q):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + eps) * q["g"] + q["b"]

    def dense(x, q):
        return x @ q["w"] + q["b"]

    def gelu(x):  # the erf form, as BERT's
        return 0.5 * x * (1 + jax.lax.erf(x / math.sqrt(2)))

    b, s = ids.shape
    h = p["word"].shape[1]
    dh = h // heads
    x = p["word"][ids] + p["pos"][:s][None] + p["type"][types]
    x = drop(ln(x, p["ln"]), c["hidden_dropout_prob"])
    additive = (1.0 - mask[:, None, None, :].astype(jnp.float32)) * -10000.0
    for q in p["layers"]:
        qkv = dense(x, q["qkv"]).reshape(b, s, 3, heads, dh).transpose(2, 0, 3, 1, 4)
        scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2) / math.sqrt(dh) + additive
        probs = drop(jax.nn.softmax(scores, -1), c["attention_probs_dropout_prob"])
        ctx = (probs @ qkv[2]).transpose(0, 2, 1, 3).reshape(b, s, h)
        x = ln(x + drop(dense(ctx, q["out"]), c["hidden_dropout_prob"]), q["ln1"])
        y = dense(gelu(dense(x, q["inter"])), q["down"])
        x = ln(x + drop(y, c["hidden_dropout_prob"]), q["ln2"])
    pooled = jnp.tanh(dense(x[:, 0], p["pooler"]))
    if positions is not None:
        x = jnp.take_along_axis(x, positions[..., None], axis=1)
    t = ln(gelu(dense(x, p["mlm"])), p["mlm_ln"])
    return t @ p["word"].T + p["mlm_bias"], dense(pooled, p["nsp"])  # the decoder is tied to the embeddings


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.take_along_axis(logp, labels[..., None], axis=-1).mean()


def lamb(params, grads, m, v, t, lr=6e-3, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    """torch_bert.py's LAMB, per tensor."""
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)

    def update(w, m, v):
        u = (m / c1) / (jnp.sqrt(v / c2) + eps) + wd * w
        wn, un = jnp.linalg.norm(w), jnp.linalg.norm(u)
        ratio = jnp.where((wn > 0) & (un > 0), wn / un, 1.0)
        return w - lr * ratio * u

    return jax.tree_util.tree_map(update, params, m, v), m, v


def data(c, batch, seq, masked, key):
    k = jax.random.split(key, 4)
    ids = jax.random.randint(k[0], (batch, seq), 0, c["vocab_size"])
    types = jnp.broadcast_to(jnp.arange(seq) >= seq // 2, (batch, seq)).astype(jnp.int32)
    mask = jnp.ones((batch, seq), jnp.int32)
    # Distinct masked positions per row (never [CLS] at 0), sorted, as torch_bert.py makes them.
    positions = jnp.sort(jax.vmap(lambda r: jax.random.permutation(r, seq - 1)[:masked] + 1)(
        jax.random.split(k[1], batch)), axis=1)
    labels = jax.random.randint(k[2], (batch, masked), 0, c["vocab_size"])
    nsp = jax.random.randint(k[3], (batch,), 0, 2)
    return ids, types, mask, positions, labels, nsp


def run_train(c, s, common):
    batch, seq = s["train_batch"], s["seq"]
    params = init(c, jax.random.PRNGKey(0))
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    ids, types, mask, positions, labels, nsp = data(c, batch, seq, s["masked"], jax.random.PRNGKey(1234))

    def loss_fn(p, key):
        mlm, nsp_logits = forward(c, p, ids, types, mask, positions, key)
        return cross_entropy(mlm, labels) + cross_entropy(nsp_logits, nsp)

    def step(params, m, v, t, key):
        loss, grads = jax.value_and_grad(loss_fn)(params, key)
        params, m, v = lamb(params, grads, m, v, t)
        return params, m, v, loss

    # Parameters and moments are donated: updated in place where XLA can, as an optimizer step would.
    step = jax.jit(step, donate_argnums=(0, 1, 2))
    state = {"p": params, "m": m, "v": v, "t": 0, "key": jax.random.PRNGKey(7)}

    def one():
        state["t"] += 1
        state["key"], key = jax.random.split(state["key"])
        state["p"], state["m"], state["v"], loss = step(state["p"], state["m"], state["v"], float(state["t"]), key)
        loss.block_until_ready()

    t = time_it(one, s["warmup"], s["iters"])
    emit(record(case_name(c, "train", seq), "jax-jit", batch, t, optimizer="lamb", **common))


def run_infer(c, s, batch, common):
    params = init(c, jax.random.PRNGKey(0))
    ids, types, mask, _, _, _ = data(c, batch, s["seq"], 1, jax.random.PRNGKey(1234))
    fwd = jax.jit(lambda p, ids, types, mask: forward(c, p, ids, types, mask, None, None))

    def one():
        jax.block_until_ready(fwd(params, ids, types, mask))

    t = time_it(one, s["warmup"], s["iters"])
    emit(record(case_name(c, "infer", s["seq"], batch), "jax-jit", batch, t, optimizer=None, **common))


def main():
    s = settings(ARGS)
    c = s["config"]
    log(f"jax {jax.__version__} on {jax.devices()[0].platform}; {ARGS.threads or 'default'} threads; model "
        f"{c['name']}, seq {s['seq']}, {s['masked']} masked")
    common = dict(version=jax.__version__, threads=ARGS.threads or None)
    if "train" in s["what"]:
        run_train(c, s, common)
    if "infer" in s["what"]:
        for b in s["infer_batches"]:
            run_infer(c, s, b, common)


if __name__ == "__main__":
    sys.exit(main())
