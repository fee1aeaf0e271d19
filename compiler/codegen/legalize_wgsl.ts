/**
 * WGSL legalize rules: rewrite a kernel into the subset the WGSL emitter spells one to one, and choose
 * the launch grid. Each rule is a function of its own; `legalizeWGSL` applies them in order: bf16 is an
 * error (WGSL has none), bool storage becomes u32 (legalize_bool.ts), wg_reduce a shared-memory tree with
 * barriers (fixed combination order), and past 65,535 workgroups the grid is 2-D (DESIGN.md, notes:
 * compiler/codegen/legalize_wgsl.ts).
 */
import {
  barrier,
  bin,
  type Kernel,
  type KExpr,
  type KShared,
  type KStmt,
  type KType,
  lid,
  lit,
  sload,
} from "../kernel_ir/ir.ts";
import { visitExprs, visitStmts } from "../kernel_ir/walk.ts";
import { boolStorageToU32 } from "./legalize_bool.ts";

export class WgslLegalizeError extends Error {
  override name = "WgslLegalizeError";
}

/** WebGPU's guaranteed maxComputeWorkgroupsPerDimension; compiled output must run on any adapter. */
export const MAX_WORKGROUPS_PER_DIM = 65535;
/** WebGPU's guaranteed maxComputeInvocationsPerWorkgroup. */
export const MAX_WORKGROUP_SIZE = 256;
/** WebGPU's guaranteed maxComputeWorkgroupStorageSize, in bytes. */
export const MAX_WORKGROUP_STORAGE = 16384;

export interface WgslLegal {
  readonly kernel: Kernel;
  readonly grid: readonly [number, number, number];
  /**
   * Set when the grid covers more workgroups than the kernel has: workgroups whose linear id is at or
   * past this count return at once. Their id depends only on workgroup_id, which is uniform, so the
   * return is legal before barriers.
   */
  readonly guard: number | null;
}

export function legalizeWGSL(k: Kernel): WgslLegal {
  if (!Number.isInteger(k.workgroupSize) || k.workgroupSize < 1 || k.workgroupSize > MAX_WORKGROUP_SIZE) {
    throw new WgslLegalizeError(
      `kernel ${k.name}: workgroup size ${k.workgroupSize} is not an integer in [1, ${MAX_WORKGROUP_SIZE}]`,
    );
  }
  rejectBF16(k);
  let kernel = boolStorageToU32(k);
  kernel = expandWgReduce(kernel);
  const { grid, guard } = gridFor(kernel);
  return { kernel, grid, guard };
}

// ---- rule 1: bf16 -----------------------------------------------------------------------------------

function rejectBF16(k: Kernel): void {
  const fail = (what: string): never => {
    throw new WgslLegalizeError(`kernel ${k.name}: bf16 needs the CUDA backend (${what} is bf16)`);
  };
  for (const b of k.bindings) if (b.t === "bf16") fail(`binding ${b.name}`);
  for (const s of k.shared) if (s.t === "bf16") fail(`shared array ${s.name}`);
  visitStmts(k.body, (s) => {
    if ((s.k === "let" || s.k === "wg_reduce") && s.t === "bf16") {
      fail(`local ${s.k === "let" ? s.name : s.out}`);
    }
  });
  visitExprs(k.body, (e) => {
    if (e.t === "bf16") fail(`a ${e.k} expression`);
  });
}

// ---- rule 2: bool storage is legalize_bool.ts ---------------------------------------------------------

// ---- rule 3: wg_reduce ----------------------------------------------------------------------------------

type Reduce = Extract<KStmt, { k: "wg_reduce" }>;

const bytesOf = (t: KType) => (t === "f16" ? 2 : 4);

/**
 * Adjacent wg_reduce statements form one group and share the tree's barriers (LayerNorm's sum and sum of
 * squares, say). Each reduction gets a shared array of its own, so consecutive groups never race on one
 * array; only inside a loop body, where the same group runs again, a trailing barrier keeps the next
 * iteration's writes from overtaking threads still reading the result. When distinct arrays would not
 * fit the workgroup storage limit, groups reuse arrays and every group ends with that barrier.
 */
function expandWgReduce(k: Kernel): Kernel {
  const groups: Reduce[][] = [];
  collectGroups(k.body, groups);
  if (groups.length === 0) return k;
  const w = k.workgroupSize;
  if ((w & (w - 1)) !== 0) {
    throw new WgslLegalizeError(`kernel ${k.name}: wg_reduce needs a power-of-two workgroup size, got ${w}`);
  }
  const taken = new Set<string>(k.shared.map((s) => s.name));
  const fresh = (base: string) => {
    let n = 0;
    while (taken.has(`${base}${n}`)) n++;
    taken.add(`${base}${n}`);
    return `${base}${n}`;
  };
  const baseBytes = k.shared.reduce((n, s) => n + s.size * bytesOf(s.t), 0);
  const distinctBytes = groups.flat().reduce((n, r) => n + w * bytesOf(r.t), 0);
  const reuse = baseBytes + distinctBytes > MAX_WORKGROUP_STORAGE;
  const shared: KShared[] = [...k.shared];
  // With reuse, the i-th reduction of every group uses the i-th array of its type.
  const pool = new Map<string, string>();
  const arrayFor = (r: Reduce, i: number): string => {
    const key = `${r.t}:${i}`;
    const have = reuse ? pool.get(key) : undefined;
    if (have) return have;
    const name = fresh(`red_${r.t}_`);
    shared.push({ name, t: r.t, size: w });
    if (reuse) pool.set(key, name);
    return name;
  };
  const body = expandIn(k.body, w, arrayFor, reuse, false);
  const total = shared.reduce((n, s) => n + s.size * bytesOf(s.t), 0);
  if (total > MAX_WORKGROUP_STORAGE) {
    throw new WgslLegalizeError(
      `kernel ${k.name}: needs ${total} bytes of workgroup memory, over WebGPU's ${MAX_WORKGROUP_STORAGE}`,
    );
  }
  return { ...k, shared, body };
}

function collectGroups(body: readonly KStmt[], out: Reduce[][]): void {
  let run: Reduce[] = [];
  const flush = () => {
    if (run.length) out.push(run);
    run = [];
  };
  for (const s of body) {
    if (s.k === "wg_reduce") {
      run.push(s);
      continue;
    }
    flush();
    if (s.k === "for") collectGroups(s.body, out);
    if (s.k === "if") {
      collectGroups(s.then, out);
      if (s.else) collectGroups(s.else, out);
    }
  }
  flush();
}

function expandIn(
  body: readonly KStmt[],
  w: number,
  arrayFor: (r: Reduce, i: number) => string,
  reuse: boolean,
  inLoop: boolean,
): KStmt[] {
  const out: KStmt[] = [];
  let run: Reduce[] = [];
  const flush = () => {
    if (run.length) out.push(...treeReduce(run, w, w > 1 ? run.map(arrayFor) : [], reuse || inLoop));
    run = [];
  };
  for (const s of body) {
    if (s.k === "wg_reduce") {
      run.push(s);
      continue;
    }
    flush();
    if (s.k === "for") out.push({ ...s, body: expandIn(s.body, w, arrayFor, reuse, true) });
    else if (s.k === "if") {
      const then = expandIn(s.then, w, arrayFor, reuse, inLoop);
      out.push(s.else ? { ...s, then, else: expandIn(s.else, w, arrayFor, reuse, inLoop) } : { ...s, then });
    } else out.push(s);
  }
  flush();
  return out;
}

const combine = (r: Reduce, a: KExpr, b: KExpr): KExpr => bin(r.op === "sum" ? "add" : "max", a, b);

/**
 * Thread i stores its value at [i]; then for s = w/2 ... 2, threads i < s fold [i + s] into [i]; finally
 * every thread reads [0] op [1]. The order depends only on w, so results are identical run to run.
 */
function treeReduce(
  run: readonly Reduce[],
  w: number,
  arrays: readonly string[],
  trailing: boolean,
): KStmt[] {
  const what = run.map((r) => `${r.op} -> ${r.out}`).join(", ");
  if (w === 1) {
    const out: KStmt[] = [{ k: "comment", text: `wg_reduce (${what}): one thread, its own value` }];
    for (const r of run) out.push({ k: "let", name: r.out, t: r.t, init: r.value, mutable: false });
    return out;
  }
  const out: KStmt[] = [{
    k: "comment",
    text: `wg_reduce (${what}): tree over ${w} threads in workgroup memory`,
  }];
  run.forEach((r, i) => out.push({ k: "sstore", arr: arrays[i], index: lid, value: r.value }));
  out.push(barrier);
  for (let s = w / 2; s >= 2; s /= 2) {
    const folds: KStmt[] = run.map((r, i) => ({
      k: "sstore",
      arr: arrays[i],
      index: lid,
      value: combine(r, sload(arrays[i], lid, r.t), sload(arrays[i], bin("add", lid, lit(s)), r.t)),
    }));
    out.push({ k: "if", cond: bin("lt", lid, lit(s)), then: folds });
    out.push(barrier);
  }
  run.forEach((r, i) => {
    const v = combine(r, sload(arrays[i], lit(0), r.t), sload(arrays[i], lit(1), r.t));
    out.push({ k: "let", name: r.out, t: r.t, init: v, mutable: false });
  });
  if (trailing) out.push(barrier);
  return out;
}

// ---- rule 4: grid -------------------------------------------------------------------------------------

function gridFor(k: Kernel): { grid: [number, number, number]; guard: number | null } {
  const n = k.workgroups;
  if (!Number.isInteger(n) || n < 0) {
    throw new WgslLegalizeError(`kernel ${k.name}: workgroup count ${n} is not a non-negative integer`);
  }
  if (n <= MAX_WORKGROUPS_PER_DIM) return { grid: [n, 1, 1], guard: null };
  const y = Math.ceil(n / MAX_WORKGROUPS_PER_DIM);
  if (y > MAX_WORKGROUPS_PER_DIM) {
    throw new WgslLegalizeError(`kernel ${k.name}: ${n} workgroups exceed a ${MAX_WORKGROUPS_PER_DIM}² grid`);
  }
  // The smallest x for this y keeps the over-covering workgroups (which return at once) few.
  const x = Math.ceil(n / y);
  return { grid: [x, y, 1], guard: x * y === n ? null : n };
}
