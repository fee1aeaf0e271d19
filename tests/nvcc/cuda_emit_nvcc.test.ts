/**
 * Every distinct CUDA kernel the compiler emits for the fusion cases (cases/fusion_cases.ts, each dtype)
 * and for BERT-tiny (training step and inference; fp32, fp16 and bf16; two sizes)
 * compiles with `nvcc -arch=sm_90 -Werror all-warnings`. Kernels are batched many to a translation unit
 * (each renamed by a macro, the prelude's include guards keep helpers single) and at most two nvcc
 * processes run at once. A `#line` directive before each kernel makes nvcc's messages name the kernel.
 * Without nvcc the test is reported as ignored, with the reason.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { FUSION_CASES, graphOf } from "../../cases/fusion_cases.ts";
import { loadModel } from "../../models/load.ts";
import { NVCC, NVCC_STRICT, nvccVersion } from "../util/nvcc.ts";

const FLAGS = [...NVCC_STRICT, "-c"];
/** Translation units per nvcc call are sized so that about this many kernels go into each. */
const KERNELS_PER_TU = 120;
const PARALLEL = 2;

const version = await nvccVersion();
if (!version) {
  console.log(`CUDA compile test ignored: ${NVCC} not found (set NVCC or install the CUDA toolkit)`);
}

/** Distinct kernel sources, each with the first kernel (graph and name) that produced it. */
function collectKernels(): Map<string, string> {
  const sources = new Map<string, string>();
  // Unfused graphs are left out: their one-op kernels are the fused ones' building blocks, and their ~500
  // shape variants would double the nvcc time.
  for (const c of FUSION_CASES) {
    for (const dt of c.dtypes) {
      const compiled = compileGraph(graphOf(c.name, c.body, dt, c.backward), {
        fuse: true,
        target: target("cuda"),
      });
      for (const k of compiled.plan.kernels) {
        const code = k.source!.code;
        if (!sources.has(code)) sources.set(code, `${c.name} (${dt}): ${k.name}`);
        // The epilogue kernel of a cuBLASLt GEMM.
        const e = k.library?.epilogue;
        if (e && !sources.has(e.source.code)) sources.set(e.source.code, `${c.name} (${dt}): ${e.name}`);
      }
    }
  }
  return sources;
}

async function collectBert(sources: Map<string, string>): Promise<void> {
  const model = await loadModel("models/bert-tiny.ts");
  const sizes = [{ batchSize: 2, seqLen: 16, maxPredictions: 3 }, {
    batchSize: 8,
    seqLen: 128,
    maxPredictions: 20,
  }];
  for (const precision of ["fp32", "fp16", "bf16"] as Precision[]) {
    for (const mode of ["train", "infer"] as const) {
      for (const size of sizes) {
        const g = buildModelGraph({ model, mode, precision, ...size });
        const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
        for (const k of compiled.plan.kernels) {
          const code = k.source!.code;
          const label = `bert-tiny ${mode} ${precision} b${size.batchSize} s${size.seqLen}: ${k.name}`;
          if (!sources.has(code)) sources.set(code, label);
          const e = k.library?.epilogue;
          if (e && !sources.has(e.source.code)) sources.set(e.source.code, `${label} (GEMM epilogue)`);
        }
      }
    }
  }
}

/** One translation unit: every kernel renamed to bf_kernel_<i>, and a #line naming it for messages. */
function translationUnit(kernels: readonly [string, string][], first: number): string {
  return kernels.map(([code, label], i) => {
    const file = `kernel ${first + i} (${label.replaceAll('"', "'")})`;
    return `#define bf_kernel bf_kernel_${first + i}\n#line 1 "${file}"\n${code}#undef bf_kernel\n`;
  }).join("\n");
}

async function compileUnit(dir: string, name: string, text: string): Promise<{ ok: boolean; log: string }> {
  const path = `${dir}/${name}.cu`;
  await Deno.writeTextFile(path, text);
  const out = await new Deno.Command(NVCC, {
    args: [...FLAGS, path, "-o", `${dir}/${name}.o`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const log = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return { ok: out.success && log.trim() === "", log };
}

Deno.test({
  name: `CUDA: every distinct emitted kernel compiles with nvcc -arch=sm_90${
    version ? "" : " (nvcc not found)"
  }`,
  ignore: !version,
  sanitizeResources: false,
  async fn() {
    const t0 = performance.now();
    const sources = collectKernels();
    await collectBert(sources);
    const all = [...sources];
    const t1 = performance.now();
    const units: { name: string; text: string }[] = [];
    for (let i = 0; i < all.length; i += KERNELS_PER_TU) {
      units.push({ name: `tu${units.length}`, text: translationUnit(all.slice(i, i + KERNELS_PER_TU), i) });
    }
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-nvcc-" });
    const failures: string[] = [];
    try {
      let next = 0;
      const worker = async () => {
        while (next < units.length) {
          const u = units[next++];
          const r = await compileUnit(dir, u.name, u.text);
          if (!r.ok) failures.push(`${u.name}.cu:\n${r.log}`);
        }
      };
      await Promise.all(Array.from({ length: PARALLEL }, worker));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
    const t2 = performance.now();
    console.log(
      `${all.length} distinct kernels in ${units.length} translation units (${version}): emitted in ${
        ((t1 - t0) / 1000).toFixed(1)
      } s, nvcc ${((t2 - t1) / 1000).toFixed(1)} s`,
    );
    // nvcc names the kernel (the #line file name) beside each message.
    assert.equal(failures.length, 0, `nvcc rejected emitted CUDA:\n${failures.join("\n").slice(0, 20000)}`);
  },
});
