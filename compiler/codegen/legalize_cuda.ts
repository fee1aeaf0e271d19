/**
 * CUDA legalize rules: rewrite a kernel into the subset the CUDA emitter (cuda.ts) spells one to one, and
 * choose the launch grid. `legalizeCUDA` applies them in order: bool storage as u32 (legalize_bool.ts),
 * safe loads (cuda_bounds.ts), scalarize (cuda_scalarize.ts), wg_reduce as warp butterflies and one shared
 * slot per warp folded in a fixed order, and the grid (2-D past 2^31 - 1 blocks). Each rule in detail:
 * DESIGN.md, notes: compiler/codegen/legalize_cuda.ts.
 */
import { barrier, isVector, type Kernel, type KShared, type KStmt, type KType } from "../kernel_ir/ir.ts";
import { clampUnprovenLoads } from "./cuda_bounds.ts";
import { scalarize } from "./cuda_scalarize.ts";
import { boolStorageToU32 } from "./legalize_bool.ts";

export class CudaLegalizeError extends Error {
  override name = "CudaLegalizeError";
}

/** CUDA's limit on threads per block. */
export const MAX_BLOCK_SIZE = 1024;
/** Static shared memory per block that every CUDA GPU allows without opting in. */
export const MAX_STATIC_SHARED = 48 * 1024;
/** gridDim.x and gridDim.y limits. */
export const MAX_GRID_X = 2 ** 31 - 1;
export const MAX_GRID_Y = 65535;
export const WARP = 32;

export interface CudaLegal {
  readonly kernel: Kernel;
  readonly grid: readonly [number, number, number];
  /** Blocks whose linear id is at or past this return at once (set only for a 2-D grid). */
  readonly guard: number | null;
  /** wg_reduce output -> the shared array holding one partial result per warp (absent: one warp). */
  readonly scratch: ReadonlyMap<string, string>;
  /** Lanes that take part in a warp-level reduction: min(workgroupSize, 32). */
  readonly warpWidth: number;
  /** Load indices clamped by rule 2 (for the header). */
  readonly clampedLoads: number;
}

export function legalizeCUDA(k: Kernel): CudaLegal {
  if (!Number.isInteger(k.workgroupSize) || k.workgroupSize < 1 || k.workgroupSize > MAX_BLOCK_SIZE) {
    throw new CudaLegalizeError(
      `kernel ${k.name}: workgroup size ${k.workgroupSize} is not an integer in [1, ${MAX_BLOCK_SIZE}]`,
    );
  }
  let kernel = boolStorageToU32(k);
  const safe = clampUnprovenLoads(kernel);
  kernel = scalarize(safe.kernel);
  const reduced = planReductions(kernel);
  kernel = reduced.kernel;
  const bytes = kernel.shared.reduce((n, s) => n + s.size * bytesOf(s.t), 0);
  if (bytes > MAX_STATIC_SHARED) {
    throw new CudaLegalizeError(
      `kernel ${k.name}: needs ${bytes} bytes of shared memory, over the ${MAX_STATIC_SHARED} of a block`,
    );
  }
  const { grid, guard } = gridFor(kernel);
  return {
    kernel,
    grid,
    guard,
    scratch: reduced.scratch,
    warpWidth: Math.min(k.workgroupSize, WARP),
    clampedLoads: safe.clampedLoads,
  };
}

const bytesOf = (t: KType) => (t === "f16" || t === "bf16" ? 2 : 4) * (isVector(t) ? 4 : 1);

// ---- rule 4: wg_reduce ----------------------------------------------------------------------------------

function planReductions(k: Kernel): { kernel: Kernel; scratch: Map<string, string> } {
  const scratch = new Map<string, string>();
  let any = false;
  const scan = (body: readonly KStmt[]) => {
    for (const s of body) {
      if (s.k === "wg_reduce") any = true;
      if (s.k === "for") scan(s.body);
      if (s.k === "if") {
        scan(s.then);
        if (s.else) scan(s.else);
      }
    }
  };
  scan(k.body);
  if (!any) return { kernel: k, scratch };
  const w = k.workgroupSize;
  if ((w & (w - 1)) !== 0) {
    throw new CudaLegalizeError(`kernel ${k.name}: wg_reduce needs a power-of-two workgroup size, got ${w}`);
  }
  const warps = Math.max(1, w / WARP);
  if (warps === 1) return { kernel: k, scratch }; // one warp: the butterfly alone gives every lane the result
  const taken = new Set<string>(k.shared.map((s) => s.name));
  const shared: KShared[] = [...k.shared];
  let n = 0;
  const arrayFor = (s: Extract<KStmt, { k: "wg_reduce" }>) => {
    let name: string;
    do name = `red_${s.t}_${n++}`; while (taken.has(name));
    taken.add(name);
    shared.push({ name, t: s.t, size: warps });
    scratch.set(s.out, name);
  };
  const rewrite = (body: readonly KStmt[], inLoop: boolean): KStmt[] => {
    const out: KStmt[] = [];
    body.forEach((s, i) => {
      if (s.k === "wg_reduce") {
        arrayFor(s);
        out.push(s);
        const last = body[i + 1]?.k !== "wg_reduce";
        if (last && inLoop) out.push(barrier);
      } else if (s.k === "for") out.push({ ...s, body: rewrite(s.body, true) });
      else if (s.k === "if") {
        const then = rewrite(s.then, inLoop);
        out.push(s.else ? { ...s, then, else: rewrite(s.else, inLoop) } : { ...s, then });
      } else out.push(s);
    });
    return out;
  };
  const body = rewrite(k.body, false);
  return { kernel: { ...k, shared, body }, scratch };
}

// ---- rule 5: grid ---------------------------------------------------------------------------------------

function gridFor(k: Kernel): { grid: [number, number, number]; guard: number | null } {
  const n = k.workgroups;
  if (!Number.isInteger(n) || n < 0) {
    throw new CudaLegalizeError(`kernel ${k.name}: workgroup count ${n} is not a non-negative integer`);
  }
  if (n <= MAX_GRID_X) return { grid: [n, 1, 1], guard: null };
  const y = Math.ceil(n / MAX_GRID_X);
  if (y > MAX_GRID_Y) throw new CudaLegalizeError(`kernel ${k.name}: ${n} blocks exceed CUDA's grid`);
  const x = Math.ceil(n / y);
  return { grid: [x, y, 1], guard: x * y === n ? null : n };
}
