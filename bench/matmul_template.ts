/**
 * The WGSL matmul template alone: builds matmul kernels with `matmulKernel`, wraps each in a one-kernel
 * Plan, runs it with the WebGPU executor and reports GFLOP/s from the wall time of repeated dispatches.
 *
 *   DENO_WEBGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp deno run --allow-read --allow-write --allow-env \
 *     bench/matmul_template.ts [--shape B,M,N,K]... [--tiles TM,TN,TK,RM,RN]... [--reps N] [--rounds N]
 *     [--f16] [--gelu] [--direct] [--staged] [--json FILE]
 *
 * Without --tiles each shape runs with the template's own tile choice, and without --direct/--staged
 * with its own epilogue strategy (shown as /d or /s after the epilogue). Time per launch is the best over
 * `rounds` of (wall time of one submission of `reps` launches) / reps, after warm-up; rounds interleave
 * the cases. "first" is the wall time of creating the executor and running one launch, which includes
 * the pipeline compile; run with MESA_SHADER_CACHE_DISABLE=true for cold-compile figures on lavapipe.
 */
import type { Kernel } from "../compiler/kernel_ir/ir.ts";
import type { MatmulTiles } from "../compiler/lower/matmul_template.ts";
import { chooseTiles } from "../compiler/lower/matmul_tiles.ts";
import type { PlanBuffer } from "../plan/plan.ts";
import { buildCase, type MatmulCase, repeated } from "../cases/matmul_cases.ts";
import { closeWebGPU, type GpuContext, openWebGPU } from "../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../runtime/webgpu/webgpu_executor.ts";

interface Row {
  shape: string;
  dtype: string;
  epilogue: string;
  tiles: string;
  threads: number;
  workgroups: number;
  firstMs: number;
  ms: number;
  gflops: number;
}

interface Prepared {
  c: MatmulCase;
  kernel: Kernel;
  ex: WebGPUExecutor;
  firstMs: number;
  best: number;
}

/** Compiles and runs `c` once (timed: the first launch includes the pipeline compile), ready to time. */
async function prepare(ctx: GpuContext, c: MatmulCase, reps: number): Promise<Prepared> {
  const { kernel, plan } = buildCase(c);
  const fill = (b: PlanBuffer) =>
    Float32Array.from({ length: b.shape.reduce((x, y) => x * y, 1) }, (_, i) => ((i * 7919) % 17) / 17 - 0.5);
  const t0 = performance.now();
  const once = await WebGPUExecutor.create(ctx, plan);
  for (const b of plan.buffers) if (b.role === "input") once.write(b.id, fill(b));
  await once.step();
  await once.finish();
  const firstMs = performance.now() - t0;
  once.destroy();
  // A second executor for the repeated launches compiles the same source again (Mesa's shader cache
  // usually answers it), so its first step is a warm-up.
  const ex = await WebGPUExecutor.create(ctx, repeated(plan, reps));
  for (const b of plan.buffers) if (b.role === "input") ex.write(b.id, fill(b));
  await ex.step();
  await ex.finish();
  return { c, kernel, ex, firstMs, best: Infinity };
}

function rowOf(p: Prepared): Row {
  const { c } = p;
  const t = c.tiles ?? chooseTiles(c.m, c.n, c.k, c.batch);
  return {
    shape: `${c.batch}x${c.m}x${c.n}x${c.k}`,
    dtype: c.dtype,
    epilogue: (c.epilogue ?? "store") + (p.kernel.shared.some((a) => a.name === "Cs") ? "/s" : "/d"),
    tiles: `${t.tm}x${t.tn}x${t.tk}/${t.rm}x${t.rn}`,
    threads: p.kernel.workgroupSize,
    workgroups: p.kernel.workgroups,
    firstMs: p.firstMs,
    ms: p.best,
    gflops: (2 * c.batch * c.m * c.n * c.k) / p.best / 1e6,
  };
}

async function main(args: string[]) {
  const shapes: number[][] = [];
  const tiles: MatmulTiles[] = [];
  let reps = 5, rounds = 3, f16 = false, gelu = false, json = "";
  const modes: ("direct" | "staged" | undefined)[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const next = () => {
      if (i + 1 >= args.length) throw new Error(`${a} needs a value`);
      return args[++i];
    };
    const ints = (s: string, count: number, what: string) => {
      const v = s.split(",").map(Number);
      if (v.length !== count || v.some((x) => !Number.isInteger(x) || x < 1)) {
        throw new Error(`${what} wants ${count} positive integers separated by commas, got '${s}'`);
      }
      return v;
    };
    if (a === "--shape") shapes.push(ints(next(), 4, "--shape"));
    else if (a === "--tiles") {
      const [tm, tn, tk, rm, rn] = ints(next(), 5, "--tiles");
      tiles.push({ tm, tn, tk, rm, rn });
    } else if (a === "--reps") reps = ints(next(), 1, "--reps")[0];
    else if (a === "--rounds") rounds = ints(next(), 1, "--rounds")[0];
    else if (a === "--f16") f16 = true;
    else if (a === "--gelu") gelu = true;
    else if (a === "--direct") modes.push("direct");
    else if (a === "--staged") modes.push("staged");
    else if (a === "--json") json = next();
    else throw new Error(`unknown argument '${a}' (see the header of bench/matmul_template.ts)`);
  }
  if (shapes.length === 0) shapes.push([1, 512, 512, 512]);
  const ctx = await openWebGPU();
  if ("unavailable" in ctx) throw new Error(`no WebGPU device: ${ctx.unavailable}`);
  console.log(`device: ${ctx.description}`);
  const rows: Row[] = [];
  try {
    const prepared: Prepared[] = [];
    for (const [batch, m, n, k] of shapes) {
      for (const t of tiles.length ? tiles : [undefined]) {
        for (const mode of modes.length ? modes : [undefined]) {
          const dtype = f16 ? "f16" : "f32", epilogue = gelu ? "bias_gelu" : "store";
          prepared.push(await prepare(ctx, { batch, m, n, k, dtype, epilogue, tiles: t, mode }, reps));
        }
      }
    }
    // Rounds go across all cases, so a burst of load from elsewhere on the machine hits every case alike.
    for (let r = 0; r < rounds; r++) {
      for (const p of prepared) {
        const s = performance.now();
        await p.ex.step();
        await p.ex.finish();
        p.best = Math.min(p.best, (performance.now() - s) / reps);
      }
    }
    for (const p of prepared) {
      p.ex.destroy();
      const r = rowOf(p);
      rows.push(r);
      console.log(
        `${r.shape.padEnd(18)} ${r.dtype} ${r.epilogue.padEnd(11)} tiles ${r.tiles.padEnd(16)} ` +
          `${String(r.workgroups).padStart(6)} wg x ${String(r.threads).padStart(3)}  ` +
          `first ${r.firstMs.toFixed(0).padStart(5)} ms  ${r.ms.toFixed(2).padStart(8)} ms  ` +
          `${r.gflops.toFixed(2).padStart(6)} GFLOP/s`,
      );
    }
  } finally {
    closeWebGPU(ctx);
  }
  if (json) {
    const record = {
      device: ctx.description,
      date: new Date().toISOString().slice(0, 10),
      reps,
      rounds,
      rows,
    };
    await Deno.writeTextFile(json, JSON.stringify(record, null, 2) + "\n");
  }
}

if (import.meta.main) await main(Deno.args);
