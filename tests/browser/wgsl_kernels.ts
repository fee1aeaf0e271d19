/**
 * The WGSL kernels the checker gives Chrome: every kernel of kernels_generated/, and the kernels of a
 * BERT-tiny training step (LAMB, fp32) and of BERT-tiny inference for each head, compiled now with the
 * WGSL emitter as the runtime gets them (identical kernels share one source) for a binding budget, and
 * the kernels that bind a tensor as ranges under a small binding limit.
 */
import { target } from "../util/target.ts";
import { emitWGSL } from "../../compiler/codegen/wgsl.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { QUIET } from "../../compiler/pipeline/debug.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import type { Head } from "../../models/bert.ts";
import bertTiny from "../../models/bert-tiny.ts";
import type { WgslKernel } from "./chrome_wgsl.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

export async function generatedKernels(): Promise<WgslKernel[]> {
  const out: WgslKernel[] = [];
  // kernels_generated/<model>/<target>/: the WGSL targets' plans hold wgsl/.
  for await (const model of Deno.readDir(`${ROOT}kernels_generated`)) {
    if (!model.isDirectory) continue;
    for await (const t of Deno.readDir(`${ROOT}kernels_generated/${model.name}`)) {
      const dir = `kernels_generated/${model.name}/${t.name}/wgsl`;
      if (!t.isDirectory || !(await Deno.stat(`${ROOT}${dir}`).catch(() => undefined))) continue;
      const files = [];
      for await (const f of Deno.readDir(`${ROOT}${dir}`)) if (f.name.endsWith(".wgsl")) files.push(f.name);
      for (const f of files.sort()) {
        out.push({ name: `${dir}/${f}`, code: await Deno.readTextFile(`${ROOT}${dir}/${f}`) });
      }
    }
  }
  return out;
}

/** Distinct kernels of one compile, named after the first kernel with each source. */
function compiledKernels(
  label: string,
  mode: "train" | "infer",
  head: Head,
  maxBindings: number,
  maxBindingBytes?: number,
): WgslKernel[] {
  const g = buildModelGraph({
    model: bertTiny,
    mode,
    head,
    precision: "fp32",
    batchSize: 2,
    seqLen: 32,
    maxPredictions: 5,
  });
  const shared = (k: Parameters<typeof emitWGSL>[0]) => emitWGSL({ ...k, name: k.kind, about: [] });
  const { plan } = compileGraph(g, {
    fuse: true,
    target: { ...target("wgsl"), emit: shared },
    flags: QUIET,
    maxBindings,
    ...(maxBindingBytes ? { maxBindingBytes } : {}),
  });
  const seen = new Map<string, string>();
  for (const k of plan.kernels) {
    if (k.source && !seen.has(k.source.code)) seen.set(k.source.code, `${label}/${k.name}`);
  }
  return [...seen].map(([code, name]) => ({ name, code }));
}

/** BERT-tiny's kernels fused for an adapter that allows `maxBindings` storage buffers per stage. */
export function bertTinyKernels(maxBindings: number): WgslKernel[] {
  // A kernel of several compiles (each head's encoder, the training step's) goes to Chrome once.
  const seen = new Set<string>();
  return [
    ...compiledKernels("bert-tiny-train-fp32", "train", "pretraining", maxBindings),
    ...(["pretraining", "classification", "qa"] as const).flatMap((h) =>
      compiledKernels(`bert-tiny-infer-${h}`, "infer", h, maxBindings)
    ),
    // Under a 4 MiB binding limit the word embedding (15.6 MB) is bound as four ranges, by the gather and
    // by the tied MLM decoder's GEMM: the range accessors go through Chrome's compiler too.
    ...compiledKernels(
      "bert-tiny-infer-pretraining-4MiB-bindings",
      "infer",
      "pretraining",
      maxBindings,
      4 << 20,
    )
      .filter((k) => /@binding\(\d+\) var<storage, [a-z_]+> \w+_r1:/.test(k.code)),
  ].filter((k) => !seen.has(k.code) && seen.add(k.code));
}
