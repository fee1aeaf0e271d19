/**
 * Column sums on GPU profiles (issue 16): as many threads per column as fill the device (lower_kernel.ts
 * columnGroups), as few parts as fill it in the first pass (column_sums.ts partsFor), and reductions that
 * read only what one kernel wrote merged into one kernel (fusion/siblings.ts mergeSameWriter). The choices
 * themselves, then each case of tests/util/column_sum_cases.ts lowered for cuda-sm90 (webgpu-gpu lowers
 * column sums alike: tests/webgpu/column_groups.test.ts) but emitted as C and run on the CPU backend (a
 * workgroup as phases between barriers, codegen/c.ts), against the reference interpreter on fresh random
 * inputs.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { partsFor } from "../../compiler/passes/split_column_sums.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { blockRows, columnGroups, SPLIT_GROUPS } from "../../compiler/targets/shapes.ts";
import { PROFILES, type TargetProfile } from "../../compiler/targets/profiles.ts";
import type { Graph } from "../../ir/mod.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { CpuExecutor } from "../../runtime/cpu/cpu_executor.ts";
import { testCpu } from "../util/cpu_check.ts";
import { caseProfile, columnSumCases } from "../util/column_sum_cases.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";

const cpu = await testCpu();
const sm90 = PROFILES["cuda-sm90"];

/** `g` compiled to C under `profile` with the named stages skipped. */
const compileSkipping = (g: Graph, skip: string[], profile: TargetProfile = sm90) =>
  compileGraph(g, {
    fuse: true,
    target: target("c", profile),
    flags: { level: 0, skipPasses: new Set(skip) },
  });

Deno.test("column sums: threads per column fill a GPU, lavapipe keeps 16 and the CPU one", () => {
  // BERT-large's second pass, 1,024 columns × 256 parts: 128 threads a column, each adding two parts.
  assert.equal(columnGroups(sm90, 1024, 256), 128);
  assert.equal(columnGroups(PROFILES["webgpu-gpu"], 1024, 256), 128);
  // Its first pass, 262,144 outputs of 32 rows: a thread each already fills the device.
  assert.equal(columnGroups(sm90, 262144, 32), 1);
  // Few outputs: a workgroup's 256 threads at most; short columns: two terms a thread at least.
  assert.equal(columnGroups(sm90, 1, 100000), 256);
  assert.equal(columnGroups(sm90, 1024, 20), 8);
  assert.equal(columnGroups(sm90, 1024, 3), 1);
  assert.equal(columnGroups(PROFILES.lavapipe, 1024, 256), SPLIT_GROUPS);
  assert.equal(columnGroups(PROFILES.lavapipe, 1024, 255), 1);
  assert.equal(columnGroups(PROFILES.cpu, 4, 100000), 1);
});

Deno.test("column sums: parts stop where the first pass fills the device", () => {
  const fill = sm90.columnFillThreads;
  // 8,192 tokens of 1,024 columns: 256 parts (128 × 1,024 is just short of the fill); of 4,096: 64.
  assert.equal(partsFor(8192, sm90.columnSumParts, 1024, fill), 256);
  assert.equal(partsFor(8192, sm90.columnSumParts, 4096, fill), 64);
  // Without a fill, the cap and the rows decide (16 rows a part at least).
  assert.equal(partsFor(8192, 256), 256);
  assert.equal(partsFor(1280, 256, 1024, fill), 64);
});

Deno.test("column sums: a row kernel walks as many rows a workgroup as still (nearly) fill the device", () => {
  // BERT-large's LayerNorm backward at batch 64: 16 rows (512 workgroups of 256 threads, 97% of the
  // 135,168 threads that fill an H100); 32 would launch half of them.
  assert.equal(blockRows(sm90, 8192, 1024), 16);
  assert.equal(blockRows(PROFILES["webgpu-gpu"], 8192, 1024), 16);
  // Batch 8: 1,024 rows, two a workgroup (131,072 threads).
  assert.equal(blockRows(sm90, 1024, 1024), 2);
  // Fewer rows than a workgroup each fills: no block.
  assert.equal(blockRows(sm90, 256, 1024), 1);
  // A row that does not split evenly over its workgroup (96 of 128 threads), or a thread per row.
  assert.equal(blockRows(sm90, 8192, 96), 1);
  assert.equal(blockRows(PROFILES.lavapipe, 8192, 1024), 1);
  assert.equal(blockRows(PROFILES.cpu, 8192, 1024), 1);
});

Deno.test("column sums: a LayerNorm backward's dγ and dβ second passes merge (fusion-same-writer)", () => {
  const c = columnSumCases()[0];
  const compile = (skip: string[]) => compileSkipping(c.graph, skip);
  const merged = compile([]);
  assert.equal(c.expect(merged), undefined);
  // Small reductions side by side would merge them too (fusion-small-reductions): both skipped.
  const apart = compile(["fusion-same-writer", "fusion-small-reductions"]);
  assert.equal(apart.kernels.length, merged.kernels.length + 1);
  assert.match(c.expect(apart) ?? "", /no second pass sums both/);
  // On lavapipe (one pass), nothing for it to merge: the stage changes nothing.
  const serial = (skip: string[]) => compileSkipping(c.graph, skip, PROFILES.lavapipe).kernels.length;
  assert.equal(serial([]), serial(["fusion-same-writer"]));
});

Deno.test("column sums: two LayerNorms' second passes merge side by side (fusion-small-reductions)", () => {
  const c = columnSumCases().find((x) => x.name.startsWith("two LayerNorm"))!;
  const compile = (skip: string[]) => compileSkipping(c.graph, skip);
  const merged = compile([]);
  assert.equal(c.expect(merged), undefined);
  const apart = compile(["fusion-small-reductions"]);
  assert.ok(apart.kernels.length > merged.kernels.length);
  assert.match(c.expect(apart) ?? "", /no kernel sums both/);
  // Profiles without a launch worth merging for (lavapipe, the CPU) keep them apart.
  assert.equal(PROFILES.lavapipe.smallReductionBytes, 0);
  assert.equal(PROFILES.cpu.smallReductionBytes, 0);
});

for (const [i, c] of columnSumCases().entries()) {
  Deno.test({
    name: `column sums: ${c.name}, lowered for cuda-sm90, on the CPU backend`,
    ignore: !cpu.ctx,
    async fn() {
      const compiled = compileGraph(c.graph, { fuse: true, target: target("c", caseProfile(c, sm90)) });
      assert.equal(c.expect(compiled), undefined);
      const feeds = randomFeeds(c.graph, 900 + i);
      const ref = evaluate(c.graph, feeds, { precision: "f32" });
      const ex = await CpuExecutor.create(cpu.ctx!, compiled.plan);
      try {
        assertMatchesReference(ref, await ex.run(feeds), {
          tol: F32_TOL,
          device: "cpu (cuda-sm90 layout)",
          plan: compiled.plan.kernels.map((k) => k.name).join(","),
        });
      } finally {
        ex.destroy();
      }
    },
  });
}
