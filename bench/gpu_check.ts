/**
 * The CUDA backend's correctness check, for a session with an NVIDIA GPU (it cannot run in CI):
 *
 *   deno run -A bench/gpu_check.ts [--dtypes f32,f16,bf16] [--seed N] [--json FILE] [--no-cublaslt] [--only RE]
 *
 * 1. every fusion case of cases/fusion_cases.ts (the graphs tests/webgpu/webgpu_fused.test.ts runs on WebGPU),
 *    in f32, f16 and bf16, fused and unfused, on CUDA against the reference interpreter with fresh random
 *    inputs; outputs are poisoned (NaN / -12345) before the step, so an output a kernel never writes fails;
 * 2. one BERT encoder layer forward and backward (f32), fused, with CUDA graphs on and off (they must
 *    agree bit for bit: the same kernels in the same order);
 * 3. cuBLASLt GEMMs through LtCall as plans run them (plain, bias; f32, f16, bf16; transposes) against a CPU
 *    product.
 *
 * Prints one line per check and a summary; exits 1 if any check fails. Tolerance per output tensor:
 * |cuda - ref| <= atol + rtol * max|ref|.
 */
import { parseFlags, positiveInt, runMain, UsageError } from "../cli/common.ts";
import { compileGraph } from "../compiler/driver/compile.ts";
import { TARGETS } from "../compiler/targets/target.ts";
import { CUDA } from "../engine/backends.ts";
import { openRow } from "../engine/choose_backend.ts";
import { type DType, type Graph, isFloat } from "../ir/mod.ts";
import type { CudaContext } from "../runtime/cuda/cuda_context.ts";
import { CublasLt, type GemmDType, LtCall } from "../runtime/cuda/cublaslt.ts";
import { CudaExecutor } from "../runtime/cuda/cuda_executor.ts";
import { decodeStored, encodeStored } from "../runtime/host.ts";
import type { PlanBuffer } from "../plan/plan.ts";
import { evaluate } from "../runtime/reference/interpreter.ts";
import { randomFeeds } from "../cases/random_feeds.ts";
import { layerGraph } from "../cases/layer_graph.ts";
import { seededRandom } from "../cases/random.ts";
import { FUSION_CASES, graphOf, type Tolerance } from "../cases/fusion_cases.ts";

/**
 * Copies `v`, stored as buffer `b` is, to a fresh device allocation of at least 256 bytes (cuBLASLt's
 * alignment), whose pointer also goes into `ptrs` for the caller to free.
 */
export function uploader(
  ctx: CudaContext,
  ptrs: bigint[],
  label: string,
): (b: PlanBuffer, v: ArrayLike<number>) => bigint {
  return (b, v) => {
    const bytes = encodeStored(b, v);
    const p = ctx.driver.alloc(Math.max(bytes.byteLength, 256), label);
    ptrs.push(p);
    ctx.driver.copyHtoD(p, bytes, `${label} ${b.name}`);
    return p;
  };
}

const HELP = `
deno run -A bench/gpu_check.ts [--dtypes f32,f16,bf16] [--seed N] [--json FILE] [--no-cublaslt] [--only RE]

--only RE runs only the fusion cases whose name matches the regular expression RE (a quick check).
Runs every fusion case on CUDA (fused and unfused) against the reference interpreter on fresh random
inputs, one BERT layer with and without CUDA graphs, and cuBLASLt GEMMs against the CPU. Needs an NVIDIA
GPU with its driver, NVRTC and cuBLASLt (found through LD_LIBRARY_PATH, the CUDA toolkit or Python wheels).
`;

/** Per storage dtype: f16 keeps ~3 decimal digits, bf16 ~2; fused kernels round once where the reference rounds per op. */
const TOL: Record<string, Tolerance> = {
  f32: { rtol: 2e-5, atol: 1e-6 },
  f16: { rtol: 4e-3, atol: 1e-3 },
  bf16: { rtol: 3e-2, atol: 1e-2 },
};

interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

const checks: Check[] = [];
function report(name: string, ok: boolean, detail: string): void {
  checks.push({ name, ok, detail });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}  ${detail}`);
}

/** Worst error of `got` against `want` per tensor, as a fraction of the allowed error (<= 1 passes). */
function compare(
  want: ArrayLike<number>,
  got: ArrayLike<number>,
  tol: Tolerance,
): { ratio: number; maxErr: number; maxRef: number } {
  let maxRef = 0, maxErr = 0;
  for (let i = 0; i < want.length; i++) {
    maxRef = Math.max(maxRef, Math.abs(want[i]));
    const e = Math.abs(got[i] - want[i]);
    if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
  }
  if (got.length !== want.length) maxErr = Infinity;
  const limit = tol.atol + tol.rtol * maxRef;
  return { ratio: maxErr / limit, maxErr, maxRef };
}

/** Runs `g` on CUDA with poisoned outputs and compares with the reference. */
async function checkGraph(
  ctx: CudaContext,
  label: string,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  tol: Tolerance,
  fuse: boolean,
  skip: (output: string) => boolean = () => false,
): Promise<void> {
  let executor: CudaExecutor | undefined;
  try {
    const ref = evaluate(g, feeds, { precision: "f32" });
    const compiled = await CUDA.compile(ctx, g, fuse);
    executor = compiled.executor;
    for (const name of Object.keys(executor.plan.outputs)) poison(executor, name);
    const out = await executor.run(feeds);
    let worst = { name: "", ratio: 0, maxErr: 0, maxRef: 0 };
    for (const [name, want] of ref) {
      if (skip(name)) continue;
      const got = out[name];
      if (!got) throw new Error(`output ${name} missing`);
      const c = compare(want, got, tol);
      if (!(c.ratio <= worst.ratio)) worst = { name, ...c };
    }
    report(
      `${label} ${fuse ? "fused" : "unfused"}`,
      worst.ratio <= 1,
      `${compiled.compiled.plan.kernels.length} kernels, ${executor.moduleCount} modules, worst ${worst.name}: ` +
        `max err ${worst.maxErr.toExponential(2)} (${
          (worst.ratio * 100).toFixed(1)
        }% of tolerance, max |ref| ` +
        `${worst.maxRef.toExponential(2)})`,
    );
  } catch (e) {
    report(`${label} ${fuse ? "fused" : "unfused"}`, false, `threw: ${(e as Error).message.split("\n")[0]}`);
    if (Deno.env.get("DEBUG")) console.error(e);
  } finally {
    executor?.destroy();
  }
}

/** Fills an output with a value no correct kernel leaves behind. */
function poison(ex: CudaExecutor, name: string): void {
  const b = ex.buffer(name);
  const n = b.shape.reduce((a, c) => a * c, 1);
  ex.write(name, new Float64Array(n).fill(isFloat(b.dtype as DType) ? NaN : -12345));
}

async function fusionCases(ctx: CudaContext, dtypes: readonly string[], seed: number, only: RegExp) {
  for (const c of FUSION_CASES.filter((c) => only.test(c.name))) {
    // Each case lists the dtypes its body takes; bf16 is added wherever f16 is (same code path, CUDA only).
    const caseDtypes = c.dtypes.flatMap((d) => (d === "f16" ? ["f16", "bf16"] : [d])) as DType[];
    for (const dt of caseDtypes.filter((d) => dtypes.includes(d))) {
      const g = graphOf(c.name, c.body, dt, c.backward);
      const feeds = randomFeeds(g, seed++, c.ints);
      const tol = c.tol?.[dt] ?? TOL[dt];
      for (const fuse of [true, false]) await checkGraph(ctx, `${c.name} [${dt}]`, g, feeds, tol, fuse);
    }
  }
}

/** A BERT layer, fused: graph replay and direct launches must give identical bytes. */
async function layerCheck(ctx: CudaContext, seed: number): Promise<void> {
  const g = layerGraph({ batch: 2, seq: 16, dropout: true, backward: true });
  const feeds = randomFeeds(g, seed, {
    attention_mask: (_r, i) => (i % 16 < 12 ? 1 : 0),
    rng_key: (r) => r.u32(),
  });
  await checkGraph(ctx, "BERT layer fwd+bwd [f32]", g, feeds, TOL.f32, true);
  // Compiled as CUDA.compile compiles (the cuda-sm90 target), so replay checks the plan that runs, and its
  // kernels are the ones bench/gpu_precompile.ts put in the cache.
  const { plan } = compileGraph(g, { fuse: true, target: TARGETS["cuda-sm90"] });
  const outs: Record<string, ArrayLike<number>>[] = [];
  for (const graphs of [true, false]) {
    const ex = await CudaExecutor.create(ctx, plan, { graphs });
    try {
      outs.push(await ex.run(feeds));
      if (graphs && !ex.usesGraph) {
        report("CUDA graph capture", false, "capture fell back to direct launches");
      }
    } finally {
      ex.destroy();
    }
  }
  const differing = Object.keys(outs[0]).filter((n) => {
    const a = outs[0][n], b = outs[1][n];
    for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return true;
    return false;
  });
  report(
    "CUDA graph replay = direct launches",
    differing.length === 0,
    differing.length ? `differ: ${differing.join(", ")}` : "bit-identical",
  );
}

/** cuBLASLt through LtCall, as the plans' GEMMs run, against a CPU product on the same rounded inputs. */
function cublasLtCheck(ctx: CudaContext, seed: number): void {
  let lt: CublasLt;
  try {
    lt = CublasLt.open(ctx.driver);
  } catch (e) {
    report("cuBLASLt open", false, (e as Error).message);
    return;
  }
  const { driver } = ctx;
  const stream = driver.createStream();
  const r = seededRandom(seed);
  const dims = { m: 96, n: 80, k: 72 };
  try {
    for (const dtype of ["f32", "f16", "bf16"] as GemmDType[]) {
      for (const [transA, transB] of [[false, false], [false, true], [true, false]]) {
        for (const epilogue of ["none", "bias"] as const) {
          const { m, n, k } = dims;
          const label = `cuBLASLt ${dtype} ${transA ? "T" : "N"}${transB ? "T" : "N"} ${epilogue}`;
          const buf = (name: string, shape: number[]): PlanBuffer => ({
            id: 0,
            name,
            dtype,
            shape,
            bytes: 0,
            role: "input",
            slot: 0,
          });
          const A = buf("A", transA ? [k, m] : [m, k]), B = buf("B", transB ? [n, k] : [k, n]);
          const D = buf("D", [m, n]), bias = buf("bias", [n]);
          // Round inputs to the storage type first, so the CPU product sees what the GPU sees.
          const round = (b: PlanBuffer, v: Float64Array) => decodeStored(b, encodeStored(b, v));
          const a = round(A, Float64Array.from({ length: m * k }, () => r.normal()));
          const bv = round(B, Float64Array.from({ length: k * n }, () => r.normal()));
          const biasV = round(bias, Float64Array.from({ length: n }, () => r.normal()));
          const want = new Float64Array(m * n);
          for (let i = 0; i < m; i++) {
            for (let j = 0; j < n; j++) {
              let s = 0;
              for (let p = 0; p < k; p++) {
                s += a[transA ? p * m + i : i * k + p] * bv[transB ? j * k + p : p * n + j];
              }
              want[i * n + j] = epilogue === "bias" ? s + biasV[j] : s;
            }
          }
          const ptrs: bigint[] = [];
          try {
            const up = uploader(ctx, ptrs, label);
            const pa = up(A, a), pb = up(B, bv), pbias = up(bias, biasV);
            const pd = up(D, new Float64Array(m * n).fill(NaN));
            const op = (trans: boolean, ld: number) => ({ dtype, ld, trans, batchStride: 0 });
            const gemm = new LtCall(lt, {
              m,
              n,
              k,
              batch: 1,
              a: op(transA, transA ? m : k),
              b: op(transB, transB ? k : n),
              d: op(false, n),
              ...(epilogue === "bias" ? { epilogue: { kind: "bias", bias: { dtype, batchStride: 0 } } } : {}),
              align: { a: 256, b: 256, d: 256, bias: 256 },
            }, label);
            gemm.run(pa, pb, pd, stream, label, epilogue === "none" ? undefined : pbias);
            driver.synchronize(stream);
            const bytes = new Uint8Array(encodeStored(D, want).byteLength);
            driver.copyDtoH(bytes, pd, label);
            gemm.destroy();
            const got = decodeStored(D, bytes);
            const tol = dtype === "f32" ? { rtol: 1e-3, atol: 1e-4 } : TOL[dtype];
            const c = compare(want, got, tol);
            report(
              label,
              c.ratio <= 1,
              `max err ${c.maxErr.toExponential(2)} (max |ref| ${c.maxRef.toExponential(2)})`,
            );
          } catch (e) {
            report(label, false, `threw: ${(e as Error).message}`);
          } finally {
            for (const p of ptrs) driver.free(p);
          }
        }
      }
    }
  } finally {
    driver.destroyStream(stream);
    lt.close();
  }
}

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    dtypes: { type: "string" },
    seed: { type: "string" },
    json: { type: "string" },
    "no-cublaslt": { type: "boolean" },
    only: { type: "string" },
  }, HELP);
  let only = /./;
  try {
    if (values.only) only = new RegExp(values.only);
  } catch (e) {
    throw new UsageError(`--only: ${(e as Error).message}`);
  }
  const dtypes = (values.dtypes ?? "f32,f16,bf16").split(",").map((s) => s.trim());
  for (const d of dtypes) {
    if (!(d in TOL)) throw new UsageError(`--dtypes: unknown dtype '${d}' (f32, f16, bf16)`);
  }
  const seed = positiveInt("seed", values.seed, 20261121);
  // A missing driver or GPU is one line (BackendUnavailableError, a user error for runMain).
  const ctx = await openRow(CUDA);
  console.log(`device: ${ctx.description}; kernel cache ${ctx.cache.dir}`);
  const t0 = performance.now();
  await fusionCases(ctx, dtypes, seed, only);
  await layerCheck(ctx, seed + 1000);
  if (!values["no-cublaslt"]) cublasLtCheck(ctx, seed + 2000);
  const failed = checks.filter((c) => !c.ok);
  console.log(
    `${checks.length - failed.length}/${checks.length} checks passed in ${
      ((performance.now() - t0) / 1000).toFixed(1)
    } s ` +
      `(kernel cache: ${ctx.cache.hits} hits, ${ctx.cache.misses} misses)`,
  );
  if (values.json) {
    await Deno.writeTextFile(
      values.json,
      JSON.stringify({ device: ctx.description, date: new Date().toISOString(), checks }, null, 2) + "\n",
    );
  }
  if (failed.length) Deno.exit(1);
});
