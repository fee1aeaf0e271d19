/**
 * The reference optimizers, schedule and loss scaler: hand-computed values on tiny tensors, and PyTorch
 * (when /usr/bin/python3 has torch) where its semantics are the same as ours.
 */
import assert from "node:assert/strict";
import {
  adamwStep,
  bertNoDecay,
  DynamicLossScaler,
  globalNorm,
  hasNonFinite,
  initMoments,
  lambStep,
  type Tensors,
} from "../../cases/oracles/optimizers.ts";
import { firstDecayStep, learningRate, ScheduleError } from "../../training/schedule.ts";
import { seededRandom } from "../../cases/random.ts";

const close = (a: number, b: number, rel: number, what: string) =>
  assert.ok(Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-300), `${what}: ${a} vs ${b}`);

// ---- schedule ----

Deno.test("schedule: linear warmup, then (1-p)^degree, 0 at and past the end", () => {
  const o = { base: 1e-3, warmupProportion: 0.1, totalSteps: 100, degree: 1 };
  assert.equal(learningRate(0, o), 0);
  close(learningRate(5, o), 0.5e-3, 1e-15, "mid warmup");
  close(learningRate(9, o), 0.9e-3, 1e-15, "last warmup step");
  // At p = warmup the decay branch applies: base * (1 - 0.1), not base (NVIDIA's formula; see schedule.ts).
  close(learningRate(10, o), 0.9e-3, 1e-15, "first decay step");
  close(learningRate(50, o), 0.5e-3, 1e-15, "mid decay");
  assert.equal(learningRate(100, o), 0);
  assert.equal(learningRate(150, o), 0);
  assert.equal(firstDecayStep(o), 10);
  // Default degree 0.5.
  close(learningRate(75, { ...o, degree: undefined }), 0.5e-3, 1e-15, "sqrt decay");
  // No warmup.
  assert.equal(learningRate(0, { ...o, warmupProportion: 0 }), 1e-3);
});

Deno.test("schedule: NVIDIA phase 1 numbers (6e-3, warmup 0.2843 of 7038) around the boundary", () => {
  const o = { base: 6e-3, warmupProportion: 0.2843, totalSteps: 7038 };
  const s = firstDecayStep(o);
  assert.equal(s, 2001); // 0.2843 * 7038 = 2000.90...
  close(learningRate(s - 1, o), 6e-3 * (2000 / 7038) / 0.2843, 1e-14, "last warmup step");
  close(learningRate(s, o), 6e-3 * Math.sqrt(1 - 2001 / 7038), 1e-14, "first decay step");
  assert.ok(learningRate(s - 1, o) < 6e-3 && learningRate(s - 1, o) > 5.99e-3);
});

Deno.test("schedule: bad options are named", () => {
  const o = { base: 1e-3, warmupProportion: 0.1, totalSteps: 100 };
  assert.throws(
    () => learningRate(1, { ...o, warmupProportion: 1 }),
    /warmup proportion 1 is outside \[0, 1\)/,
  );
  assert.throws(() => learningRate(1, { ...o, totalSteps: 0 }), ScheduleError);
  assert.throws(() => learningRate(-1, o), /step -1/);
  assert.throws(() => learningRate(1, { ...o, degree: 0 }), /degree 0/);
});

// ---- optimizers: hand-computed single steps ----

function tiny(): { params: Tensors; grads: Tensors } {
  return {
    params: new Map([
      ["layer.dense.weight", Float64Array.of(0.5, -1.0)],
      ["layer.dense.bias", Float64Array.of(0.25)],
    ]),
    grads: new Map([
      ["layer.dense.weight", Float64Array.of(0.3, -0.4)],
      ["layer.dense.bias", Float64Array.of(1.2)],
    ]),
  };
}

Deno.test("LAMB, one step by hand: clip by 1.3, bias-corrected moments, trust ratio only with decay", () => {
  const { params, grads } = tiny();
  const state = initMoments(params);
  const lr = 0.01, eps = 1e-6, wd = 0.01;
  const rep = lambStep(params, grads, state, { lr });
  // ||g|| = sqrt(0.09 + 0.16 + 1.44) = 1.3 > 1: every gradient is divided by 1.3.
  close(rep.gradNorm, 1.3, 1e-15, "grad norm");
  close(rep.clipFactor, 1 / 1.3, 1e-15, "clip");
  // Step 1 with bias correction: m_hat = g, v_hat = g^2, so m_hat / (sqrt(v_hat) + eps) = g / (|g| + eps).
  const g = [0.3 / 1.3, -0.4 / 1.3];
  const u = g.map((x, i) => x / (Math.abs(x) + eps) + wd * [0.5, -1.0][i]);
  const ratio = Math.hypot(0.5, -1.0) / Math.hypot(...u);
  close(rep.trustRatios!.get("layer.dense.weight")!, ratio, 1e-13, "trust ratio");
  assert.equal(rep.trustRatios!.get("layer.dense.bias"), 1);
  const w = params.get("layer.dense.weight")!;
  close(w[0], 0.5 - lr * ratio * u[0], 1e-13, "w0");
  close(w[1], -1.0 - lr * ratio * u[1], 1e-13, "w1");
  const gb = 1.2 / 1.3;
  close(params.get("layer.dense.bias")![0], 0.25 - lr * gb / (gb + eps), 1e-13, "bias: no decay, no ratio");
  close(state.m.get("layer.dense.weight")![0], 0.1 * g[0], 1e-13, "m");
  close(state.v.get("layer.dense.weight")![1], 0.001 * g[1] * g[1], 1e-13, "v");
  assert.equal(state.step, 1);
});

Deno.test("BERT's Adam, one step by hand: no bias correction (first step is ~3.16 g/|g|), decoupled decay", () => {
  const { params, grads } = tiny();
  const state = initMoments(params);
  const lr = 0.01, eps = 1e-6, wd = 0.01;
  adamwStep(params, grads, state, { lr });
  const g = [0.3 / 1.3, -0.4 / 1.3];
  const u = g.map((x, i) => 0.1 * x / (Math.sqrt(0.001) * Math.abs(x) + eps) + wd * [0.5, -1.0][i]);
  const w = params.get("layer.dense.weight")!;
  close(w[0], 0.5 - lr * u[0], 1e-13, "w0");
  close(w[1], -1.0 - lr * u[1], 1e-13, "w1");
  const gb = 1.2 / 1.3;
  close(
    params.get("layer.dense.bias")![0],
    0.25 - lr * 0.1 * gb / (Math.sqrt(0.001) * gb + eps),
    1e-13,
    "bias",
  );
});

Deno.test("no clipping below the threshold; loss scale divided out first; zero norms give ratio 1", () => {
  const { params, grads } = tiny();
  for (const g of grads.values()) g.forEach((x, i) => (g[i] = x * 0.5 * 1024)); // norm 0.65 after / 1024
  const rep = lambStep(params, grads, initMoments(params), { lr: 0.01, lossScale: 1024 });
  close(rep.gradNorm, 0.65, 1e-15, "unscaled norm");
  assert.equal(rep.clipFactor, 1);
  const zero = new Map([["x.weight", new Float64Array(3)]]);
  const rep2 = lambStep(zero, new Map([["x.weight", Float64Array.of(1, 2, 3)]]), initMoments(zero), {
    lr: 0.1,
  });
  assert.equal(rep2.trustRatios!.get("x.weight"), 1, "||w|| = 0");
  assert.throws(
    () => lambStep(zero, new Map([["x.weight", Float64Array.of(1, NaN, 3)]]), initMoments(zero), { lr: 1 }),
    /not finite/,
  );
  assert.throws(
    () => lambStep(zero, new Map(), initMoments(zero), { lr: 1 }),
    /no gradient for parameter 'x.weight'/,
  );
});

Deno.test("no-decay names: biases and LayerNorm (NVIDIA's list)", () => {
  for (
    const n of [
      "bert.encoder.layer.0.output.dense.bias",
      "bert.embeddings.LayerNorm.weight",
      "cls.predictions.bias",
      "a.gamma",
      "a.beta",
    ]
  ) {
    assert.ok(bertNoDecay(n), n);
  }
  for (const n of ["bert.encoder.layer.0.output.dense.weight", "bert.embeddings.word_embeddings.weight"]) {
    assert.ok(!bertNoDecay(n), n);
  }
});

// ---- loss scaler ----

Deno.test("loss scaler: 2^16, doubles after 2000 clean steps, halves and skips on overflow, floor 1", () => {
  const s = new DynamicLossScaler();
  assert.equal(s.scale, 65536);
  for (let i = 0; i < 1999; i++) {
    assert.deepEqual(s.update(false), { skip: false, scale: 65536, atFloor: false });
  }
  assert.equal(s.update(false).scale, 131072);
  assert.deepEqual(s.update(true), { skip: true, scale: 65536, atFloor: false });
  // The clean count restarts after an overflow.
  for (let i = 0; i < 1999; i++) s.update(false);
  const saved = s.state();
  assert.equal(saved.cleanSteps, 1999);
  const resumed = DynamicLossScaler.fromState(JSON.parse(JSON.stringify(saved)));
  assert.equal(resumed.update(false).scale, 131072, "resumed exactly one step before growth");
  assert.equal(s.update(false).scale, 131072);
  assert.equal(s.state().overflows, 1);
  const low = new DynamicLossScaler({ initScale: 2 });
  assert.deepEqual(low.update(true), { skip: true, scale: 1, atFloor: false });
  assert.deepEqual(low.update(true), { skip: true, scale: 1, atFloor: true });
  assert.equal(low.state().skippedSteps, 2);
  const capped = new DynamicLossScaler({ initScale: 4, growthInterval: 1, maxScale: 8 });
  capped.update(false);
  capped.update(false);
  assert.equal(capped.scale, 8);
});

Deno.test("loss scaler: static mode keeps the scale but still skips overflowing steps; bad state named", () => {
  const s = new DynamicLossScaler({ mode: "static", initScale: 128 });
  for (let i = 0; i < 5000; i++) s.update(false);
  assert.deepEqual(s.update(true), { skip: true, scale: 128, atFloor: false });
  assert.equal(s.scale, 128);
  assert.throws(
    () => DynamicLossScaler.fromState({ ...s.state(), scale: -1 }),
    /scale -1 is not a positive number/,
  );
  assert.throws(() => DynamicLossScaler.fromState({ ...s.state(), cleanSteps: 1.5 }), /cleanSteps 1.5/);
  assert.ok(hasNonFinite([Float32Array.of(1, 2), Float32Array.of(3, Infinity)]));
  assert.ok(hasNonFinite([Float64Array.of(NaN)]));
  assert.ok(!hasNonFinite([Float32Array.of(1e30, -3.4e38)]));
});

// ---- against PyTorch ----

const PY = "/usr/bin/python3";
const hasTorch = (() => {
  try {
    return new Deno.Command(PY, { args: ["-c", "import torch"], stdout: "null", stderr: "null" }).outputSync()
      .success;
  } catch {
    return false;
  }
})();

/**
 * AdamW: torch.optim.AdamW is the same decoupled update as BERT's Adam except for bias correction, so the
 * comparison runs our adamwStep with biasCorrection: true (torch has no switch to turn it off). Clipping
 * is done in the script with the apex/TensorFlow factor, since torch's clip_grad_norm_ adds 1e-6 to the
 * norm. LAMB: torch has no LAMB; the script writes apex's equations in torch tensor ops, an independent
 * second implementation rather than an authority. Both in float64, 3 steps, fresh random data.
 */
const TORCH_SCRIPT = `
import json, sys, torch
torch.set_default_dtype(torch.float64)
d = json.load(sys.stdin)
names = d["names"]; nodecay = d["nodecay"]; lr = d["lr"]
def clip(gs):
    n = torch.sqrt(sum((g * g).sum() for g in gs))
    return [g * (1.0 / max(1.0, float(n))) for g in gs]
# AdamW
ps = [torch.tensor(d["params"][n], requires_grad=True) for n in names]
opt = torch.optim.AdamW([
    {"params": [p for p, n in zip(ps, names) if n not in nodecay], "weight_decay": 0.01},
    {"params": [p for p, n in zip(ps, names) if n in nodecay], "weight_decay": 0.0}],
    lr=lr, betas=(0.9, 0.999), eps=1e-6)
for step in d["grads"]:
    for p, g in zip(ps, clip([torch.tensor(step[n]) for n in names])):
        p.grad = g
    opt.step()
adamw = {n: p.detach().tolist() for n, p in zip(names, ps)}
# LAMB (apex multi_tensor_lamb equations)
ws = [torch.tensor(d["params"][n]) for n in names]
ms = [torch.zeros_like(w) for w in ws]; vs = [torch.zeros_like(w) for w in ws]
for t, step in enumerate(d["grads"], start=1):
    gs = clip([torch.tensor(step[n]) for n in names])
    for i, n in enumerate(names):
        wd = 0.0 if n in nodecay else 0.01
        ms[i] = 0.9 * ms[i] + 0.1 * gs[i]
        vs[i] = 0.999 * vs[i] + 0.001 * gs[i] * gs[i]
        u = (ms[i] / (1 - 0.9 ** t)) / (torch.sqrt(vs[i] / (1 - 0.999 ** t)) + 1e-6) + wd * ws[i]
        wn, un = float(ws[i].norm()), float(u.norm())
        r = wn / un if (wd != 0 and wn != 0 and un != 0) else 1.0
        ws[i] = ws[i] - lr * r * u
lamb = {n: w.tolist() for n, w in zip(names, ws)}
json.dump({"adamw": adamw, "lamb": lamb}, sys.stdout)
`;

Deno.test({
  name: "against PyTorch (float64): AdamW with bias correction = torch.optim.AdamW; LAMB = apex's equations",
  ignore: !hasTorch,
  fn: async () => {
    const seed = crypto.getRandomValues(new Uint32Array(1))[0] || 1;
    const r = seededRandom(seed);
    const shapes: Record<string, number> = {
      "enc.dense.weight": 24,
      "enc.dense.bias": 6,
      "enc.LayerNorm.weight": 6,
      "emb.word_embeddings.weight": 40,
    };
    const names = Object.keys(shapes);
    const params: Tensors = new Map(
      names.map((n) => [n, Float64Array.from({ length: shapes[n] }, () => r.normal() * 0.5 + 0.01)]),
    );
    // Step 1 and 3 large (clipped), step 2 small (not clipped).
    const grads: Tensors[] = [2.0, 0.05, 3.0].map((s) =>
      new Map(names.map((n) => [n, Float64Array.from({ length: shapes[n] }, () => r.normal() * s + 0.001)]))
    );
    const nodecay = names.filter(bertNoDecay);
    const lr = 0.01;
    const input = {
      names,
      nodecay,
      lr,
      params: Object.fromEntries([...params].map(([k, v]) => [k, [...v]])),
      grads: grads.map((g) => Object.fromEntries([...g].map(([k, v]) => [k, [...v]]))),
    };
    const child = new Deno.Command(PY, {
      args: ["-c", TORCH_SCRIPT],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(JSON.stringify(input)));
    await w.close();
    const out = await child.output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    const torch = JSON.parse(new TextDecoder().decode(out.stdout));

    const copy = () => new Map([...params].map(([k, v]) => [k, v.slice()]));
    const pa = copy(), sa = initMoments(pa), pl = copy(), sl = initMoments(pl);
    const norms: number[] = [];
    for (const g of grads) {
      adamwStep(pa, g, sa, { lr, biasCorrection: true });
      norms.push(lambStep(pl, g, sl, { lr }).gradNorm);
    }
    assert.ok(norms[0] > 1 && norms[1] < 1 && norms[2] > 1, `clipping exercised both ways: ${norms}`);
    for (const n of names) {
      for (let i = 0; i < shapes[n]; i++) {
        close(pa.get(n)![i], torch.adamw[n][i], 1e-12, `adamw ${n}[${i}] seed ${seed}`);
        close(pl.get(n)![i], torch.lamb[n][i], 1e-12, `lamb ${n}[${i}] seed ${seed}`);
      }
    }
    // And the parameters actually moved.
    assert.ok(
      globalNorm([...pa.values()].map((v, i) => v.map((x, j) => x - [...params.values()][i][j]))) > 1e-3,
    );
  },
});
