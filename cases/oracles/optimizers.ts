/**
 * Plain reference implementations of the two optimizers and the dynamic loss scaler, in f64, written
 * from the equations so the fused device step can be checked against them. Obvious rather than fast.
 *
 * LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
 * Algorithm 2) with the choices of NVIDIA's BERT, i.e. apex `FusedLAMB` (apex/optimizers/fused_lamb.py)
 * and its kernel `multi_tensor_lamb` (csrc/multi_tensor_lamb.cu), checked against that source:
 *   - one global L2 norm over all gradients; when it exceeds maxGradNorm (1.0) every gradient is divided
 *     by norm / maxGradNorm, before the moments (stage 1: `scaled_grad = g / clipped_global_grad_norm`);
 *   - m = β1 m + (1-β1) g, v = β2 v + (1-β2) g² (grad_averaging on), bias correction on:
 *     m̂ = m / (1-β1^t), v̂ = v / (1-β2^t), with t the optimizer step (1 on the first update);
 *   - update u = m̂ / (√v̂ + ε) + λ w (decoupled decay, adam_w_mode; ε outside the square root);
 *   - per tensor, trust ratio r = ‖w‖ / ‖u‖ with ‖w‖ taken before the update, applied only when the
 *     tensor's weight decay λ ≠ 0 (use_nvlamb off), and r = 1 when either norm is 0 (stage 2);
 *   - w ← w − lr · r · u.
 *   Defaults β1 0.9, β2 0.999, ε 1e-6, λ 0.01, max norm 1.0 (FusedLAMB's defaults, which run_pretraining
 *   keeps); biases and LayerNorm get λ = 0 (run_pretraining's no_decay list: bias, gamma, beta, LayerNorm).
 *
 * AdamW as BERT's Adam: google-research/bert optimization.py, `AdamWeightDecayOptimizer` and
 * `create_optimizer`, checked against that source:
 *   - gradients clipped by global norm 1.0 first (`tf.clip_by_global_norm`: g · c / max(‖g‖, c), the same
 *     factor as apex's);
 *   - m, v as above with NO bias correction;
 *   - u = m / (√v + ε) + λ w for parameters not excluded ("LayerNorm", "layer_norm", "bias");
 *   - w ← w − lr · u. Defaults β1 0.9, β2 0.999, ε 1e-6, λ 0.01.
 *   `biasCorrection: true` turns it into torch.optim.AdamW's update (used to compare against PyTorch).
 *
 * Loss scaling: gradients arrive multiplied by the loss scale; `lossScale` divides them out before the
 * norm, as the trainer must. Non-finite gradients are a caller error here: the loss scaler decides to
 * skip such steps before any optimizer runs.
 */

export type Tensors = Map<string, Float64Array>;

export interface MomentState {
  /** Updates applied so far; the next update is step + 1. */
  step: number;
  m: Tensors;
  v: Tensors;
}

interface CommonOptions {
  lr: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
  /** Global gradient-norm clip; Infinity disables. Default 1.0. */
  maxGradNorm?: number;
  /** Parameters without weight decay (default: bertNoDecay). */
  noDecay?: (name: string) => boolean;
  /** Gradients are divided by this first (the loss scale of mixed precision). Default 1. */
  lossScale?: number;
}

export type LambOptions = CommonOptions;
export interface AdamWOptions extends CommonOptions {
  /** Default false (BERT's Adam); true gives torch.optim.AdamW's update. */
  biasCorrection?: boolean;
}

export interface StepReport {
  /** Global L2 norm of the (unscaled) gradients, before clipping. */
  gradNorm: number;
  /** The factor the gradients were multiplied by (1 when not clipped). */
  clipFactor: number;
  /** LAMB only: the per-tensor factor applied to lr (1 for tensors without decay). */
  trustRatios?: Map<string, number>;
}

/**
 * NVIDIA's no_decay list (bias, gamma, beta, LayerNorm), matched as substrings of the name as
 * run_pretraining.py does (optimizer/flat_layout.ts uses the same list). Google's list (LayerNorm,
 * layer_norm, bias) selects the same tensors of our graphs.
 */
export function bertNoDecay(name: string): boolean {
  return /bias|gamma|beta|LayerNorm/.test(name);
}

/** Zero moments shaped like the parameters. */
export function initMoments(params: Tensors): MomentState {
  const zeros = () => new Map([...params].map(([k, w]) => [k, new Float64Array(w.length)]));
  return { step: 0, m: zeros(), v: zeros() };
}

function l2(x: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return Math.sqrt(s);
}

/** L2 norm over every element of every tensor. */
export function globalNorm(tensors: Iterable<ArrayLike<number>>): number {
  let s = 0;
  for (const t of tensors) s += l2(t) ** 2;
  return Math.sqrt(s);
}

/** Unscaled, clipped gradients; checks names, lengths and finiteness. */
function prepareGrads(params: Tensors, grads: Tensors, state: MomentState, o: CommonOptions) {
  const lossScale = o.lossScale ?? 1;
  if (!(lossScale > 0) || !Number.isFinite(lossScale)) throw new RangeError(`loss scale ${lossScale}`);
  const out: Tensors = new Map();
  for (const [name, w] of params) {
    const g = grads.get(name);
    if (!g) throw new RangeError(`no gradient for parameter '${name}'`);
    if (g.length !== w.length) {
      throw new RangeError(`gradient of '${name}' has ${g.length} elements, the parameter ${w.length}`);
    }
    if (state.m.get(name)?.length !== w.length || state.v.get(name)?.length !== w.length) {
      throw new RangeError(`moments of '${name}' are missing or mis-sized`);
    }
    const u = g.map((x) => x / lossScale);
    if (!u.every(Number.isFinite)) throw new RangeError(`gradient of '${name}' is not finite`);
    out.set(name, u);
  }
  for (const name of grads.keys()) {
    if (!params.has(name)) throw new RangeError(`gradient for unknown parameter '${name}'`);
  }
  const gradNorm = globalNorm(out.values());
  const max = o.maxGradNorm ?? 1.0;
  // apex divides by norm/max; TensorFlow multiplies by max/max(norm, max): the same factor.
  const clipFactor = gradNorm > max ? max / gradNorm : 1;
  if (clipFactor !== 1) {
    for (const g of out.values()) {
      for (let i = 0; i < g.length; i++) g[i] *= clipFactor;
    }
  }
  return { g: out, gradNorm, clipFactor };
}

/** One LAMB update, in place on params and state. */
export function lambStep(params: Tensors, grads: Tensors, state: MomentState, o: LambOptions): StepReport {
  const b1 = o.beta1 ?? 0.9, b2 = o.beta2 ?? 0.999, eps = o.eps ?? 1e-6, wd = o.weightDecay ?? 0.01;
  const noDecay = o.noDecay ?? bertNoDecay;
  const { g, gradNorm, clipFactor } = prepareGrads(params, grads, state, o);
  const t = state.step + 1;
  const c1 = 1 - b1 ** t, c2 = 1 - b2 ** t;
  const trustRatios = new Map<string, number>();
  for (const [name, w] of params) {
    const gi = g.get(name)!, m = state.m.get(name)!, v = state.v.get(name)!;
    const decay = noDecay(name) ? 0 : wd;
    const u = new Float64Array(w.length);
    for (let i = 0; i < w.length; i++) {
      m[i] = b1 * m[i] + (1 - b1) * gi[i];
      v[i] = b2 * v[i] + (1 - b2) * gi[i] * gi[i];
      u[i] = (m[i] / c1) / (Math.sqrt(v[i] / c2) + eps) + decay * w[i];
    }
    let ratio = 1;
    if (decay !== 0) {
      const wn = l2(w), un = l2(u);
      ratio = wn !== 0 && un !== 0 ? wn / un : 1;
    }
    trustRatios.set(name, ratio);
    for (let i = 0; i < w.length; i++) w[i] -= o.lr * ratio * u[i];
  }
  state.step = t;
  return { gradNorm, clipFactor, trustRatios };
}

/** One update of BERT's Adam (AdamWeightDecayOptimizer), in place on params and state. */
export function adamwStep(params: Tensors, grads: Tensors, state: MomentState, o: AdamWOptions): StepReport {
  const b1 = o.beta1 ?? 0.9, b2 = o.beta2 ?? 0.999, eps = o.eps ?? 1e-6, wd = o.weightDecay ?? 0.01;
  const noDecay = o.noDecay ?? bertNoDecay;
  const { g, gradNorm, clipFactor } = prepareGrads(params, grads, state, o);
  const t = state.step + 1;
  const c1 = o.biasCorrection ? 1 - b1 ** t : 1, c2 = o.biasCorrection ? 1 - b2 ** t : 1;
  for (const [name, w] of params) {
    const gi = g.get(name)!, m = state.m.get(name)!, v = state.v.get(name)!;
    const decay = noDecay(name) ? 0 : wd;
    for (let i = 0; i < w.length; i++) {
      m[i] = b1 * m[i] + (1 - b1) * gi[i];
      v[i] = b2 * v[i] + (1 - b2) * gi[i] * gi[i];
      const u = (m[i] / c1) / (Math.sqrt(v[i] / c2) + eps) + decay * w[i];
      w[i] -= o.lr * u;
    }
  }
  state.step = t;
  return { gradNorm, clipFactor };
}

// ---------------------------------------------------------------------------------------------------
// Loss scaling

export interface LossScalerOptions {
  /** "dynamic" (default) adapts the scale; "static" keeps it fixed (overflowing steps are still skipped). */
  mode?: "dynamic" | "static";
  /** Default 2^16. */
  initScale?: number;
  /** Default 2. */
  growthFactor?: number;
  /** Default 0.5. */
  backoffFactor?: number;
  /** Clean steps in a row before the scale grows; default 2000. */
  growthInterval?: number;
  /** The scale never goes below this; default 1. */
  minScale?: number;
  /** The scale never goes above this; default Infinity (no cap, like torch's GradScaler). */
  maxScale?: number;
}

/** Everything needed to continue exactly; plain JSON for trainer_state.json. */
export interface LossScalerState {
  version: 1;
  mode: "dynamic" | "static";
  scale: number;
  /** Clean steps since the scale last changed (or since the last overflow). */
  cleanSteps: number;
  growthFactor: number;
  backoffFactor: number;
  growthInterval: number;
  minScale: number;
  /** null stands for Infinity (JSON has no Infinity). */
  maxScale: number | null;
  /** Totals over the run, for logs. */
  overflows: number;
  skippedSteps: number;
}

export interface ScalerDecision {
  /** Do not apply this step's update (its gradients overflowed). */
  skip: boolean;
  /** The scale to use for the next step. */
  scale: number;
  /** An overflow happened with the scale already at its floor: training is probably diverging. */
  atFloor: boolean;
}

/**
 * True if any element of any gradient is Inf or NaN, the overflow test of dynamic loss scaling. (A device
 * that tests "is the global norm finite" agrees except when the sum of squares alone overflows, i.e.
 * finite gradients whose norm is beyond the float range.)
 */
export function hasNonFinite(grads: Iterable<ArrayLike<number>>): boolean {
  for (const g of grads) for (let i = 0; i < g.length; i++) if (!Number.isFinite(g[i])) return true;
  return false;
}

/**
 * The loss-scale state machine (as in apex amp and torch.cuda.amp.GradScaler): multiply the loss by
 * `scale`; after a step whose gradients hold any non-finite value, skip the update and multiply the
 * scale by backoffFactor (not below minScale); after growthInterval clean steps in a row, multiply it by
 * growthFactor and start counting again.
 */
export class DynamicLossScaler {
  #s: LossScalerState;

  constructor(o: LossScalerOptions = {}) {
    const s: LossScalerState = {
      version: 1,
      mode: o.mode ?? "dynamic",
      scale: o.initScale ?? 2 ** 16,
      cleanSteps: 0,
      growthFactor: o.growthFactor ?? 2,
      backoffFactor: o.backoffFactor ?? 0.5,
      growthInterval: o.growthInterval ?? 2000,
      minScale: o.minScale ?? 1,
      maxScale: o.maxScale === undefined || o.maxScale === Infinity ? null : o.maxScale,
      overflows: 0,
      skippedSteps: 0,
    };
    DynamicLossScaler.check(s);
    this.#s = s;
  }

  /** Continues from a state() saved earlier; throws RangeError naming a bad field. */
  static fromState(state: LossScalerState): DynamicLossScaler {
    DynamicLossScaler.check(state);
    const x = new DynamicLossScaler();
    x.#s = { ...state };
    return x;
  }

  private static check(s: LossScalerState): void {
    const bad = (what: string) => {
      throw new RangeError(`loss scaler state: ${what}`);
    };
    if (s?.version !== 1) bad("not a version 1 state");
    if (s.mode !== "dynamic" && s.mode !== "static") bad(`mode ${JSON.stringify(s.mode)}`);
    const pos = (k: keyof LossScalerState) => {
      const v = s[k] as number;
      if (!(Number.isFinite(v) && v > 0)) bad(`${k} ${v} is not a positive number`);
    };
    pos("scale");
    pos("growthFactor");
    pos("backoffFactor");
    pos("minScale");
    if (s.maxScale !== null) pos("maxScale");
    if (!(s.growthFactor >= 1)) bad(`growthFactor ${s.growthFactor} is below 1`);
    if (!(s.backoffFactor < 1)) bad(`backoffFactor ${s.backoffFactor} is not below 1`);
    for (const k of ["growthInterval", "cleanSteps", "overflows", "skippedSteps"] as const) {
      if (!Number.isSafeInteger(s[k]) || s[k] < 0) bad(`${k} ${s[k]} is not a count`);
    }
    if (s.growthInterval < 1) bad("growthInterval is 0");
    if (s.mode === "dynamic" && s.scale < s.minScale) bad(`scale ${s.scale} is below minScale ${s.minScale}`);
  }

  get scale(): number {
    return this.#s.scale;
  }

  /** Records the outcome of one step (overflow = hasNonFinite(grads)) and returns what to do. */
  update(overflow: boolean): ScalerDecision {
    const s = this.#s;
    if (overflow) {
      s.overflows++;
      s.skippedSteps++;
      s.cleanSteps = 0;
      const atFloor = s.mode === "dynamic" ? s.scale <= s.minScale : false;
      if (s.mode === "dynamic") s.scale = Math.max(s.scale * s.backoffFactor, s.minScale);
      return { skip: true, scale: s.scale, atFloor };
    }
    if (s.mode === "dynamic") {
      s.cleanSteps++;
      if (s.cleanSteps >= s.growthInterval) {
        s.scale = Math.min(s.scale * s.growthFactor, s.maxScale ?? Infinity);
        s.cleanSteps = 0;
      }
    }
    return { skip: false, scale: s.scale, atFloor: false };
  }

  state(): LossScalerState {
    return { ...this.#s };
  }
}
