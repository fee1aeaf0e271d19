/**
 * Rematerialization: which values fusion recomputes in every kernel that reads them instead of writing
 * them once (XLA's choice for cheap elementwise producers): a short elementwise chain over exactly one
 * tensor stored anyway, read only elementwise or by reductions (REMAT_MAX_OPS, REMAT_MAX_TRANSCENDENTALS).
 * The case that pays is erf-GELU's backward (the case and the rule: DESIGN.md, notes:
 * compiler/fusion/remat.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { isElementwise, isMovement } from "../../ir/ops.ts";

/**
 * Ops recomputed per element, at most. A reader of a stored f16 value pays a 2-byte load, which at an
 * H100's 3.35 TB/s against ~60 TFLOP/s of f32 (non-tensor) is the time of ~35 f32 operations; a CPU
 * core's ~10 GB/s against ~50 GFLOP/s f32 makes a 4-byte load ~20. Eight ops plus one transcendental
 * (a libdevice/polynomial erf, tanh or exp: ~10-20 operations) stay under both, and cover both GELU
 * forms: erf's intermediates take 3 ops, the tanh form's 7 (x + 0.044715x³, scaled, tanh, plus one).
 */
export const REMAT_MAX_OPS = 8;
/** Transcendentals recomputed per element, at most (each costs ~10-20 plain operations). */
export const REMAT_MAX_TRANSCENDENTALS = 1;
/** A buffer this small beside the chain (a scalar, a loss scale) is read from cache in every reader. */
const SMALL = 64;
/** Rows at least this long make a per-row value beside the chain cheap to read (isRowStatistic). */
const ROW_STATISTIC_MIN = 32;

const TRANSCENDENTAL: ReadonlySet<string> = new Set(["exp", "log", "tanh", "erf"]);
/** Ops whose operands must be buffers, or that index them by data: a chain never flows into one. */
const NEEDS_BUFFER: ReadonlySet<string> = new Set(["matmul", "gather", "scatter_add", "concat", "pad"]);

export interface RematGraph {
  readonly g: Graph;
  readonly users: readonly (readonly NodeId[])[];
  /** Computable anywhere from constants and buffers (fuse.ts `inlineNodes`). */
  readonly inline: Uint8Array;
  /** Written to a buffer whatever fusion decides: inputs, params, outputs, forced roots, in-place parts. */
  readonly stored: (id: NodeId) => boolean;
  /**
   * The matmuls that write their raw product (library calls: cuBLASLt takes no f32 bias on an f16 product,
   * and no erf-GELU), so an op on such a product costs as much in the GEMM's kernel (a scratch product
   * written and read back by an epilogue kernel) as in its readers, and a chain may start at the product.
   */
  readonly rawCalls?: ReadonlySet<NodeId>;
}

/**
 * An elementwise op on a GEMM's result (directly or through a cast: a linear layer's bias add) is that
 * GEMM's epilogue where the GEMM kernel computes it (the template): storing it costs what storing the raw
 * product would, so a chain never recomputes it. Not so where the GEMM writes its raw product.
 */
function onGemm(r: RematGraph, id: NodeId): boolean {
  const g = r.g;
  const template = (mm: NodeId) => g.nodes[mm].op === "matmul" && !r.rawCalls?.has(mm);
  return g.nodes[id].inputs.some((i) =>
    template(i) || (g.nodes[i].op === "cast" && template(g.nodes[i].inputs[0]))
  );
}

export type RematVerdict =
  | {
    readonly ok: true;
    /** The stored tensor it is recomputed from (below any reshapes). */
    readonly from: NodeId;
    readonly ops: number;
    readonly transcendentals: number;
  }
  | { readonly ok: false; readonly reason: string };

/** Does every read of `id` (looking through movement ops) happen elementwise or in a reduction? */
function readElementwise(r: RematGraph, id: NodeId, seen = new Set<NodeId>()): boolean {
  if (seen.has(id)) return true;
  seen.add(id);
  return r.users[id].every((u) => {
    const op = r.g.nodes[u].op;
    if (NEEDS_BUFFER.has(op)) return false;
    // A GEMM reads its operands through movement and casts (rounded on load): look through both.
    return isMovement(op) || op === "cast" ? readElementwise(r, u, seen) : true;
  });
}

/**
 * Is `x` a tensor read element for element where stored: not a reduction (never recomputed across), not a
 * broadcast, permute or slice (whose source is another tensor); a reshape (a linear layer's output split
 * into batch and sequence) keeps the linear index, so look through it.
 */
function storedAsIs(g: Graph, x: NodeId): boolean {
  const op = g.nodes[belowReshapes(g, x)].op;
  return !isMovement(op) && op !== "reduce_sum" && op !== "reduce_max";
}

function belowReshapes(g: Graph, x: NodeId): NodeId {
  while (g.nodes[x].op === "reshape") x = g.nodes[x].inputs[0];
  return x;
}

/**
 * A value broadcast along rows at least ROW_STATISTIC_MIN long: LayerNorm's mean or 1/σ beside its
 * centred input. A reader loads it once per row, so recomputing `xhat = (x - μ)·(1/σ)` from the stored
 * `x - μ` costs a reader one multiply, and the forward kernel one tensor write less.
 */
function isRowStatistic(g: Graph, x: NodeId, size: number): boolean {
  const n = g.nodes[x];
  if (n.op !== "broadcast" || numel(n.type.shape) !== size) return false;
  const src = g.nodes[belowReshapes(g, n.inputs[0])];
  return !isMovement(src.op) && numel(src.type.shape) * ROW_STATISTIC_MIN <= size;
}

const verdicts = new WeakMap<RematGraph, Map<NodeId, RematVerdict>>();

/** rematVerdict, asked once per node of a fusion's graph. */
function verdictOf(r: RematGraph, id: NodeId): RematVerdict {
  let memo = verdicts.get(r);
  if (!memo) verdicts.set(r, memo = new Map());
  let v = memo.get(id);
  if (!v) memo.set(id, v = rematVerdict(r, id));
  return v;
}

/** May `id` be recomputed where it is read, and from which stored tensor? */
export function rematVerdict(r: RematGraph, id: NodeId): RematVerdict {
  const { g, inline } = r;
  const no = (reason: string): RematVerdict => ({ ok: false, reason });
  const n = g.nodes[id];
  if (!isElementwise(n.op)) return no(`${n.op} is not elementwise`);
  if (r.stored(id) || onGemm(r, id)) return no("it is stored anyway");
  if (!readElementwise(r, id)) return no("a GEMM, gather or scatter reads it from a buffer");
  const size = numel(n.type.shape);
  if (size <= SMALL) return no("it is small: storing it costs nothing");
  // Continue the chain through an operand that would itself be recomputed: elementwise, not stored anyway,
  // read only elementwise. Anything else ends the chain and must then be the one stored tensor.
  const chainable = (x: NodeId) =>
    isElementwise(g.nodes[x].op) && !r.stored(x) && !onGemm(r, x) && readElementwise(r, x);
  const seen = new Set<NodeId>();
  const big = new Set<NodeId>();
  let ops = 0, transcendentals = 0;
  let why: string | undefined;
  const visitInline = (x: NodeId): void => {
    if (seen.has(x)) return;
    seen.add(x);
    const src = g.nodes[x];
    if (src.op === "random_uniform") transcendentals++; // Philox costs more than any transcendental
    // A buffer read through inline movement at the chain's size is a stored tensor like any other.
    if ((src.op === "input" || src.op === "param") && numel(src.type.shape) === size) big.add(x);
    src.inputs.forEach(visitInline);
  };
  const visit = (x: NodeId): void => {
    if (seen.has(x) || why) return;
    seen.add(x);
    const op = g.nodes[x].op;
    if (op !== "cast" && op !== "stop_gradient") ops++; // conversions and identities are free
    if (TRANSCENDENTAL.has(op)) transcendentals++;
    if (ops > REMAT_MAX_OPS) why = `recomputing it takes ${ops} ops, over ${REMAT_MAX_OPS}`; // stop walking
    for (const i of g.nodes[x].inputs) {
      const src = g.nodes[i];
      if (inline[i] && src.op !== "input" && src.op !== "param") visitInline(i);
      else if (chainable(i) && verdictOf(r, i).ok) visit(i);
      // An operand that cannot be recomputed itself is stored once the chain is recomputed in several
      // readers: the chain reads it there (LayerNorm's x̂ = (x - μ)·(1/σ) from the stored x - μ, which
      // adds a residual and a GEMM's output, two tensors).
      else if (chainable(i)) big.add(i);
      else if (numel(src.type.shape) === size && storedAsIs(g, i)) big.add(i);
      else if (isRowStatistic(g, i, size)) continue;
      else if (!(r.stored(i) && numel(src.type.shape) <= SMALL)) {
        why = `it also reads %${i} (${src.op} [${src.type.shape}]), neither small nor its one stored tensor`;
      }
    }
  };
  visit(id);
  if (why) return no(why);
  if (big.size !== 1) return no(`it reads ${big.size} stored tensors of its size, not one`);
  if (transcendentals > REMAT_MAX_TRANSCENDENTALS) {
    return no(`recomputing it takes ${transcendentals} transcendentals, over ${REMAT_MAX_TRANSCENDENTALS}`);
  }
  return { ok: true, from: belowReshapes(g, [...big][0]), ops, transcendentals };
}
