/**
 * Fills a CUDA kernel cache ahead of a GPU run (bench/gpu_pack.sh calls it), so the GPU's time goes to
 * measuring: every kernel source of the graphs bench/gpu_run.sh compiles (gpu_check's cases and BERT layer,
 * BERT-base inference, BERT-large training and inference fused and unfused) is compiled for sm_90 by the
 * NVRTC this machine has, through the runtime's own Nvrtc, cache key and KernelCache, so an entry made here
 * is the one the run looks up (same source, architecture, NVRTC version, options and header contents).
 *
 *   deno run -A bench/gpu_precompile.ts [--small] [--arch sm_90] [--cache DIR] [--shard I/N] [--only RE]
 *       [--skip RE]
 *
 * --shard I/N compiles only the kernels whose cache key falls to shard I of N, so N processes fill one cache
 * in parallel (a GPU host's 16 cores; entries are written atomically); --only / --skip choose graphs by label.
 */
import { parseFlags, runMain, UsageError } from "../cli/common.ts";
import { compileGraph } from "../compiler/driver/compile.ts";
import { buildModelGraph } from "../optimizer/model_graph.ts";
import { TARGETS } from "../compiler/targets/target.ts";
import type { Graph } from "../ir/mod.ts";
import { defineBert } from "../models/bert.ts";
import { parseBertConfig } from "../models/bert_config.ts";
import { loadModel } from "../models/load.ts";
import { KernelCache, kernelCacheKey } from "../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../runtime/cuda/nvrtc.ts";
import { headerIdentity } from "../runtime/cuda/nvrtc_files.ts";
import { layerGraph } from "../cases/layer_graph.ts";
import { FUSION_CASES, graphOf } from "../cases/fusion_cases.ts";

await runMain(async () => {
  const { values } = parseFlags(
    Deno.args,
    {
      small: { type: "boolean" },
      arch: { type: "string" },
      cache: { type: "string" },
      shard: { type: "string" },
      only: { type: "string" },
      skip: { type: "string" },
      manifest: { type: "string" },
      model: { type: "string" },
      "train-shape": { type: "string" },
    },
    "deno run -A bench/gpu_precompile.ts [--small] [--arch sm_90] [--cache DIR] [--shard I/N] [--only RE] [--skip RE]\n" +
      "  [--manifest FILE] [--model M] [--train-shape B,S,P]\n",
  );
  const shard = /^(\d+)\/(\d+)$/.exec(values.shard ?? "0/1");
  if (!shard || +shard[1] >= +shard[2]) {
    throw new UsageError(`--shard must be I/N with I < N, got ${values.shard}`);
  }
  const [shardIndex, shards] = [+shard[1], +shard[2]];
  const only = new RegExp(values.only ?? ""), skip = values.skip ? new RegExp(values.skip) : undefined;
  const wanted = (label: string) => only.test(label) && !skip?.test(label);
  const arch = values.arch ?? "sm_90";
  // NVRTC is found as the runtime finds it (LD_LIBRARY_PATH, toolkit, Python wheels); its absence is one line.
  const nvrtc = Nvrtc.open();
  const cache = new KernelCache(values.cache);
  // The shapes of bench/gpu_run.sh (its --small shapes with --small); tests/nvcc/gpu_run_rehearsal.test.ts
  // checks that a run after this compiles nothing new.
  const small = values.small === true;
  // --model / --train-shape B,S,P: another model or shape for the training and inference graphs.
  const shape = values["train-shape"]?.split(",").map(Number);
  if (shape && (shape.length !== 3 || !shape.every((n) => Number.isInteger(n) && n > 0))) {
    throw new UsageError(
      `--train-shape must be B,S,P (three positive integers), got ${values["train-shape"]}`,
    );
  }
  const [B, S, P] = shape ?? (small ? [2, 16, 4] : [64, 128, 20]);
  const large = await loadModel(values.model ?? (small ? "models/bert-tiny.ts" : "models/bert-large.ts"));
  const graphs: [string, Graph, boolean[]][] = [];
  for (const c of FUSION_CASES.filter((c) => !small || /^LayerNorm/.test(c.name))) {
    const dts = c.dtypes.flatMap((d) => (d === "f16" ? ["f16", "bf16"] : [d])).filter((d) =>
      !small || d === "f32"
    );
    for (const dt of dts) {
      graphs.push([`${c.name} [${dt}]`, graphOf(c.name, c.body, dt as "f32", c.backward), [true, false]]);
    }
  }
  graphs.push(["BERT layer", layerGraph({ batch: 2, seq: 16, dropout: true, backward: true }), [true]]);
  const py = await new Deno.Command("python3", {
    args: ["bench/peers/bert_base_check.py", "config", ...(small ? ["--small"] : [])],
    stderr: "inherit",
  }).output().catch(() => undefined);
  if (py?.success) {
    const config = parseBertConfig(
      JSON.parse(new TextDecoder().decode(py.stdout)),
      "bert_base_check.py config",
    );
    const base = defineBert("bert-base", config);
    const seq = Math.min(128, config.max_position_embeddings); // the longest of bert_base_check.py's rows
    graphs.push([
      "BERT-base infer",
      base.build({ head: "pretraining", mode: "infer", batchSize: 4, seqLen: seq }),
      [true],
    ]);
  } else console.error("BERT-base skipped: python3 bench/peers/bert_base_check.py config did not run");
  const both = [true, false];
  graphs.push([
    `${large.name} train`,
    buildModelGraph({
      model: large,
      mode: "train",
      precision: "fp16",
      batchSize: B,
      seqLen: S,
      maxPredictions: P,
    }),
    both,
  ]);
  for (const b of [small ? 2 : 64, 1]) {
    graphs.push([
      `${large.name} infer b${b}`,
      buildModelGraph({ model: large, mode: "infer", precision: "fp16", batchSize: b, seqLen: S }),
      both,
    ]);
  }
  const options = nvrtc.keyOptions(arch);
  // CUDA.compile (engine/backends.ts) compiles for the cuda-sm90 target; the same here, or the sources
  // (their grids) differ and nothing hits.
  const target = TARGETS["cuda-sm90"];
  let compiled = 0, present = 0;
  const t0 = performance.now();
  for (const [label, g, fuses] of graphs.filter(([label]) => wanted(label))) {
    for (const fuse of fuses) {
      const { plan } = compileGraph(g, { fuse, target });
      const sources = plan.kernels.flatMap((k) => [
        [k.name, k.source.code],
        ...(k.library?.epilogue ? [[k.library.epilogue.name, k.library.epilogue.source.code]] : []),
      ]);
      let fresh = 0;
      for (const [name, source] of sources) {
        const key = kernelCacheKey({ source, arch, nvrtcVersion: nvrtc.versionString, options });
        if (parseInt(key.slice(0, 8), 16) % shards !== shardIndex || cache.get(key)) continue;
        cache.put(key, nvrtc.compile(source, arch, name));
        fresh++;
      }
      compiled += fresh;
      present += sources.length - fresh;
      console.log(`${label} ${fuse ? "fused" : "unfused"}: ${sources.length} kernels, ${fresh} compiled`);
    }
  }
  if (values.manifest) {
    // What the entries' keys depend on besides the sources: bench/gpu_probe.ts compares it on the GPU.
    const manifest = {
      arch,
      nvrtc_version: nvrtc.versionString,
      header_identity: headerIdentity(nvrtc.includeDirs),
      nvrtc_path: nvrtc.path,
      include: nvrtc.includeDirs,
      entries: [...Deno.readDirSync(cache.dir)].filter((e) => e.name.endsWith(".cubin")).length,
    };
    await Deno.writeTextFile(values.manifest, JSON.stringify(manifest, null, 2) + "\n");
  }
  nvrtc.close();
  console.log(
    `${compiled} kernels compiled by NVRTC ${nvrtc.versionString} for ${arch} into ${cache.dir} ` +
      `(${present} already there) in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
});
