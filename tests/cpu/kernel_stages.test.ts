/**
 * The kernel-level stages answer to the pipeline's hooks: SKIP_PASSES of a kernel stage (and an error for
 * one that cannot be skipped), a DUMP_DIR file per stage numbered after the graph passes' dumps, an
 * invalid state blamed on the stage that left it, and DEBUG=1 timings; fusion decisions change nothing.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { layerGraph } from "../../cases/layer_graph.ts";
import { emitCUDA } from "../../compiler/codegen/cuda.ts";
import { emitWGSL } from "../../compiler/codegen/wgsl.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import tiny from "../../models/bert-tiny.ts";
import { COMPILE_STAGES, compileGraph, runKernelStages } from "../../compiler/driver/compile.ts";
import { DebugFlagError, type DebugFlags } from "../../compiler/pipeline/debug.ts";
import { decideJoin } from "../../compiler/fusion/join.ts";
import { ELEM } from "../../compiler/fusion/needs.ts";
import { isVectorized } from "../../compiler/lower/vectorize.ts";
import {
  makePassContext,
  PassError,
  quietContext,
  type Stage,
} from "../../compiler/pipeline/stage_runner.ts";
import { KERNEL_STAGES } from "../../compiler/stages/stage_list.ts";
import { fusionStage } from "../../compiler/stages/fusion.ts";
import type { KernelState } from "../../compiler/stages/state.ts";
import { Graph } from "../../ir/mod.ts";

const flags = (f: Partial<DebugFlags>): DebugFlags => ({ level: 0, skipPasses: new Set(), ...f });
const layer = () => layerGraph({ batch: 2, seq: 8, dropout: true, backward: true });
const compile = (f: Partial<DebugFlags>) =>
  compileGraph(layer(), { fuse: true, target: target("wgsl"), flags: flags(f) });

Deno.test("kernel stages: SKIP_PASSES skips a kernel stage; a stage that cannot be skipped is a one-line error", () => {
  const full = compile({});
  // Loop kernels vectorize in the vectorize stage (row kernels may as they are lowered); a fused layer has
  // none, the unfused one many.
  const unfused = compile({ skipPasses: new Set(["fusion"]) });
  assert.ok(
    unfused.kernels.length > 2 * full.kernels.length,
    `${unfused.kernels.length} vs ${full.kernels.length}`,
  );
  const vectorLoops = (c: typeof full) =>
    c.kernels.filter((k) => k.kind === "loop" && isVectorized(k)).length;
  assert.ok(vectorLoops(unfused) > 0, "some loop kernel of an unfused BERT layer vectorizes");
  const plain = compile({ skipPasses: new Set(["fusion", "vectorize"]) });
  assert.equal(plain.kernels.length, unfused.kernels.length);
  assert.equal(vectorLoops(plain), 0);
  const siblings = compile({ skipPasses: new Set(["fusion-siblings", "fusion-consumers"]) });
  assert.ok(siblings.kernels.length > full.kernels.length);
  assert.throws(
    () => compile({ skipPasses: new Set(["memory-plan"]) }),
    (e: Error) =>
      e instanceof DebugFlagError && !e.message.includes("\n") &&
      /^SKIP_PASSES names 'memory-plan', which cannot be skipped; the passes that can: simplify, cse, dce, column-sums, weight-copies, gemm-calls, flash-attention, fusion/
        .test(e.message),
  );
  assert.throws(
    () => compile({ skipPasses: new Set(["lowr"]) }),
    /'lowr', which is not a pass; the passes are: /,
  );
});

Deno.test("kernel stages: DUMP_DIR gets one file per stage, numbered after the graph passes' dumps", () => {
  const dir = Deno.makeTempDirSync({ prefix: "bertfuse-stage-dumps-" });
  try {
    const c = compile({ dumpDir: dir, skipPasses: new Set(["vectorize"]) });
    const files = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
    const ran = COMPILE_STAGES.filter((s) => s.name !== "vectorize");
    const graph = ran.slice(0, 4).flatMap((
      s,
      i,
    ) => [`0${i + 1}-after-${s.name}.ir`, `0${i + 1}-before-${s.name}.ir`]);
    const kernel = ran.slice(4).map((s, i) => `${String(i + 5).padStart(2, "0")}-after-${s.name}.kernels`);
    assert.deepEqual(files, [...graph, ...kernel].sort());
    const lowered = Deno.readTextFileSync(`${dir}/${kernel.find((f) => f.endsWith("-lower.kernels"))}`);
    for (const k of c.kernels) assert.ok(lowered.includes(`kernel ${k.name} (${k.kind})`), k.name);
    const last = Deno.readTextFileSync(`${dir}/${kernel.at(-1)}`);
    assert.match(last, new RegExp(`shared sources: \\d+ for ${c.plan.kernels.length} kernels`));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("kernel stages: a stage that leaves an invalid state is blamed, and its state dumped", () => {
  // A stage that binds a kernel to a buffer the plan does not have.
  const breaker: Stage<KernelState> = {
    name: "breaker",
    run: (s) => ({
      ...s,
      kernels: s.kernels!.map((k, i) =>
        i === 0 ? { ...k, bindings: k.bindings.map((b) => ({ ...b, buffer: 10_000 })) } : k
      ),
    }),
  };
  const at = KERNEL_STAGES.findIndex((s) => s.name === "lower") + 1;
  const stages = [...KERNEL_STAGES.slice(0, at), breaker, ...KERNEL_STAGES.slice(at)];
  const dir = Deno.makeTempDirSync({ prefix: "bertfuse-stage-dumps-" });
  try {
    assert.throws(
      () =>
        runKernelStages(
          layer(),
          { fuse: true, target: target("wgsl") },
          makePassContext(flags({ dumpDir: dir })),
          stages,
        ),
      (e: Error) =>
        e instanceof PassError && e.pass === "breaker" &&
        /^after stage 'breaker': kernel k000_\w+ binds \w+ to buffer 10000, which does not exist$/.test(
          e.message,
        ),
    );
    assert.ok([...Deno.readDirSync(dir)].some((f) => f.name.endsWith("-after-breaker.kernels")));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
  // A broken fusion is blamed on the fusion stage that made it.
  const mixUp: Stage<KernelState> = {
    name: "mix-up",
    run: (s) => ({ ...s, fusion: { ...s.fusion!, kernels: [...s.fusion!.kernels].reverse() } }),
  };
  assert.throws(
    () =>
      runKernelStages(layer(), { fuse: true, target: target("wgsl") }, quietContext(), [fusionStage, mixUp]),
    (e: Error) =>
      e instanceof PassError && e.pass === "mix-up" &&
      /after stage 'mix-up': fused kernel 0 has id/.test(e.message),
  );
});

Deno.test("kernel stages: DEBUG=1 times every stage", () => {
  const lines: string[] = [];
  const orig = console.error;
  console.error = (...a: unknown[]) => lines.push(a.join(" "));
  try {
    compile({ level: 1 });
  } finally {
    console.error = orig;
  }
  for (const s of COMPILE_STAGES) {
    assert.ok(lines.some((l) => new RegExp(`^\\[pass\\] ${s.name}: [0-9.]+ ms, `).test(l)), s.name);
  }
  assert.ok(lines.some((l) => /^\[pass\] kernel stages: [0-9.]+ ms$/.test(l)));
});

Deno.test("fusion decisions are questions: deciding changes neither the kernel nor the needs", () => {
  // y = sum(x) broadcast back and added to x: the reduction joins the loop kernel, which becomes a row kernel.
  const g = new Graph("row");
  const x = g.add("input", [], { name: "x" }, { dtype: "f32", shape: [4, 8] });
  const s = g.add("reduce_sum", [x], { axes: [1] });
  const b = g.add("broadcast", [s], { shape: [4, 8] });
  g.setOutput("y", g.add("add", [x, b]));
  const k = { id: 0, kind: "loop" as const, roots: [4], members: new Set([3, 4]), space: [4, 8] };
  const needs = new Map([[3, new Set([ELEM])], [4, new Set([ELEM])]]);
  const before = JSON.stringify([k, [...k.members], [...needs].map(([n, v]) => [n, [...v]])]);
  const need = new Set([`rowcand:1:4x8`]);
  const v = decideJoin(g, s, k, need, needs, false);
  assert.ok(v.ok && v.adapt?.kernel?.kind === "reduce", JSON.stringify(v));
  assert.deepEqual(v.ok && v.adapt?.kernel?.axes, [1]);
  assert.equal(JSON.stringify([k, [...k.members], [...needs].map(([n, v]) => [n, [...v]])]), before);
  assert.deepEqual([...need], ["rowcand:1:4x8"]);
});

Deno.test("share-sources: the same fusion in every layer has one source, the one it would have alone", () => {
  const g = buildModelGraph({ model: tiny, mode: "train", precision: "fp16", batchSize: 2, seqLen: 16 });
  for (const t of ["wgsl", "cuda"] as const) {
    const c = compileGraph(g, { fuse: true, target: target(t), flags: flags({}) });
    const byCode = new Map<string, object>();
    for (const [i, k] of c.plan.kernels.entries()) {
      const tk = k.source;
      // Shared by object, so every consumer sees one source per group.
      if (!byCode.has(tk.code)) byCode.set(tk.code, tk);
      assert.equal(byCode.get(tk.code), tk, `${t} ${k.name}`);
      // The source is what the kernel would get alone, without its description.
      const alone = (t === "wgsl" ? emitWGSL : emitCUDA)({ ...c.kernels[i], about: [] });
      assert.equal(tk.code, alone.code, `${t} ${k.name}`);
      assert.ok(!tk.code.includes(k.about[0]), `${t} ${k.name}: the description is not in the source`);
    }
    const layers = tiny.config.num_hidden_layers;
    assert.ok(layers > 1 && byCode.size < c.plan.kernels.length / 1.5, `${byCode.size} ${t} sources`);
  }
});
