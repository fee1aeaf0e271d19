/**
 * The cost model (report/cost_model.ts) on hand-made plans whose predicted times are worked out by hand
 * on a round-numbered device, the GEMM FLOP counts of `--summary`, the timings-file parser, and
 * `deno task compile --measured` with a synthetic timings file.
 */
import assert from "node:assert/strict";
import { gemmFlops, parseTimings, predictKernel, predictPlan } from "../../report/cost_model.ts";
import type { DeviceRates } from "../../compiler/targets/h100.ts";
import type { Plan, PlanGemmOperand, PlanKernel } from "../../plan/plan.ts";
import { ROOT, runCli, withTemp } from "../util/cli.ts";

/** Tensor cores 50 TFLOP/s achievable, CUDA cores 5, 1 TB/s, 1 µs a launch. */
const P: DeviceRates = {
  name: "round numbers",
  target: "cuda",
  tensorPeak: 100e12,
  tensorFraction: 0.5,
  fp32Peak: 10e12,
  templateFraction: 0.5,
  bandwidth: 1e12,
  bandwidthPeak: 2e12,
  launch: 1e-6,
  saturatingThreads: 10_000,
};

const close = (a: number, b: number) =>
  assert.ok(Math.abs(a - b) <= 1e-12 + 1e-9 * Math.abs(b), `${a} vs ${b}`);

const kernel = (
  name: string,
  kind: string,
  bytesRead: number,
  bytesWritten: number,
  flops: number,
): PlanKernel => ({
  name,
  kind,
  bindings: [],
  source: { code: "", grid: [4096, 1, 1], workgroupSize: 256 },
  about: [],
  bytesRead,
  bytesWritten,
  flops,
});

const operand = (dtype: PlanGemmOperand["dtype"], batchStride: number): PlanGemmOperand => ({
  buffer: 0,
  offset: 0,
  dtype,
  ld: 1024,
  trans: false,
  batchStride,
});

/** A library GEMM 1024×1024×1024, batch 2, f16 operands, the B operand (a weight) shared by both batches. */
function libraryKernel(epilogue: boolean, bytesRead: number, bytesWritten: number): PlanKernel {
  // An epilogue launched over enough threads to saturate the device (occupancy is tested on its own).
  const code = { code: "", grid: [4096, 1, 1] as const, workgroupSize: 256 };
  return {
    ...kernel(epilogue ? "lib_ep" : "lib", "matmul", bytesRead, bytesWritten, 1),
    library: {
      call: {
        m: 1024,
        n: 1024,
        k: 1024,
        batch: 2,
        a: operand("f16", 1024 * 1024),
        b: operand("f16", 0),
        d: operand(epilogue ? "f32" : "f16", 1024 * 1024),
        compute: "32F",
      },
      ...(epilogue ? { epilogue: { name: "ep", bindings: [], source: code } } : {}),
    },
  };
}

function plan(kernels: PlanKernel[], steps: Plan["steps"], updates: Plan["updates"] = []): Plan {
  return {
    version: 2,
    graph: "hand",
    target: "cuda-sm90",
    language: "cuda",
    buffers: [{ id: 0, name: "w", dtype: "f32", shape: [1000], bytes: 4000, role: "param", slot: 0 }],
    slots: [{ id: 0, bytes: 4000 }],
    inputs: {},
    params: { w: 0 },
    outputs: {},
    kernels,
    steps,
    updates,
  };
}

Deno.test("cost model: a memory-bound kernel costs its bytes over the bandwidth plus a launch", () => {
  const r = predictKernel(kernel("ln", "layernorm", 3e6, 1e6, 4e6), P);
  // 4 MB at 1 TB/s = 4 µs; 4 MFLOP at 5 TFLOP/s = 0.8 µs; + 1 µs launch.
  close(r.seconds, 5e-6);
  assert.equal(r.bound, "memory");
  assert.equal(r.route, "kernel");
});

Deno.test("cost model: a kernel launching fewer threads than saturate the device gets their share", () => {
  const few = { code: "", grid: [4, 1, 1] as const, workgroupSize: 256 }; // 1,024 of 10,000 threads
  const many = { code: "", grid: [100, 1, 1] as const, workgroupSize: 256 };
  const k = kernel("scatter", "scatter", 3e6, 1e6, 0);
  // 4 MB at 1 TB/s × 0.1024 = 39.0625 µs, + 1 µs; saturated: 4 µs + 1 µs.
  close(predictKernel({ ...k, source: few }, P).seconds, 4e-6 / 0.1024 + 1e-6);
  close(predictKernel({ ...k, source: many }, P).seconds, 5e-6);
});

Deno.test("cost model: a template GEMM runs at the CUDA-core rate (no tensor cores)", () => {
  const r = predictKernel(kernel("mm", "matmul", 1e6, 1e6, 1e9), P);
  // 1 GFLOP at 5 TFLOP/s = 200 µs (memory 2 µs) + 1 µs.
  close(r.seconds, 201e-6);
  assert.equal(r.bound, "compute");
  assert.equal(r.route, "template GEMM");
});

Deno.test("cost model: a cuBLASLt GEMM at the tensor rate; a broadcast operand is read once", () => {
  const r = predictKernel(libraryKernel(false, 0, 0), P);
  const flops = 2 * 1024 ** 3 * 2;
  assert.equal(r.flops, flops);
  // A: 2 batches × 2 MiB; B: once, 2 MiB; D: 2 × 2 MiB (f16).
  assert.equal(r.bytes, 5 * 2 * 1024 ** 2);
  close(r.seconds, flops / 50e12 + 1e-6);
  assert.equal(r.route, "cuBLASLt");
});

Deno.test("cost model: a cuBLASLt GEMM with an epilogue adds the f32 product read back and a second launch", () => {
  const mib = 1024 ** 2;
  // The fused kernel read A and B (6 MiB) and a 1 MiB residual, and wrote 4 MiB.
  const r = predictKernel(libraryKernel(true, 7 * mib, 4 * mib), P);
  const flops = 2 * 1024 ** 3 * 2;
  const call = 4 * mib + 2 * mib + 8 * mib; // D is f32 here: 2 × 4 MiB
  const epilogue = 8 * mib + 4 * mib + 1 * mib;
  assert.equal(r.bytes, call + epilogue);
  close(r.seconds, Math.max(flops / 50e12, call / 1e12) + 1e-6 + epilogue / 1e12 + 1e-6);
  assert.equal(r.route, "cuBLASLt+epilogue");
});

Deno.test("cost model: a BIAS epilogue reads its vector in the call; an f16 scratch halves the read-back", () => {
  const mib = 1024 ** 2;
  const plain = libraryKernel(false, 0, 0);
  const withBias: PlanKernel = {
    ...plain,
    library: {
      call: {
        ...plain.library!.call,
        epilogue: { kind: "bias", bias: { buffer: 0, offset: 0, dtype: "f16", batchStride: 0 } },
      },
    },
  };
  // One 1024-element f16 vector beside the plain call's 10 MiB, and no second launch.
  const r = predictKernel(withBias, P);
  assert.equal(r.bytes, 10 * mib + 1024 * 2);
  assert.equal(r.route, "cuBLASLt");
  // The epilogue kernel of an f16 scratch reads 4 MiB back where an f32 one reads 8.
  const ep = libraryKernel(true, 7 * mib, 4 * mib);
  const f16: PlanKernel = {
    ...ep,
    library: { ...ep.library!, call: { ...ep.library!.call, d: operand("f16", 1024 * 1024) } },
  };
  const call = 4 * mib + 2 * mib + 4 * mib, epilogue = 4 * mib + 4 * mib + 1 * mib;
  assert.equal(predictKernel(f16, P).bytes, call + epilogue);
});

Deno.test("cost model: f32 operands on cuBLASLt run on CUDA cores (compute type 32F, no TF32)", () => {
  const k = libraryKernel(false, 0, 0);
  const g = k.library!.call;
  const f32 = {
    ...k,
    library: { call: { ...g, a: { ...g.a, dtype: "f32" as const }, b: { ...g.b, dtype: "f32" as const } } },
  };
  close(predictKernel(f32, P).seconds, (2 * 1024 ** 3 * 2) / (10e12 * 0.5) + 1e-6);
});

Deno.test("cost model: a step sums every launch, copy step and parameter update", () => {
  const ln = kernel("ln", "layernorm", 3e6, 1e6, 0);
  const p = plan([ln, kernel("unused", "x", 1e9, 0, 0)], [
    { op: "launch", kernel: 0 },
    { op: "copy", src: 0, dst: 0, bytes: 1e6 },
    { op: "launch", kernel: 0 },
  ], [{ param: 0, value: 0 }]);
  const pred = predictPlan(p, P);
  assert.deepEqual(pred.rows.map((r) => [r.name, r.launches]), [["ln", 2], ["(copy steps)", 1], [
    "(parameter updates)",
    1,
  ]]);
  // ln twice: 2 × 5 µs; the copy reads and writes 1 MB: 2 µs + 1 µs; the update 8000 B: 0.008 µs + 1 µs.
  close(pred.seconds, 10e-6 + 3e-6 + 8e-9 + 1e-6);
});

Deno.test("GEMM FLOPs: library calls count 2·M·N·K·batch, template kernels the plan's count, per launch", () => {
  const p = plan([
    libraryKernel(false, 0, 0),
    kernel("mm", "matmul", 0, 0, 1e9),
    kernel("ln", "layernorm", 0, 0, 5e9),
  ], [
    { op: "launch", kernel: 0 },
    { op: "launch", kernel: 1 },
    { op: "launch", kernel: 1 },
    { op: "launch", kernel: 2 },
  ]);
  const lib = 2 * 1024 ** 3 * 2;
  assert.deepEqual(gemmFlops(p), { gemm_flops: lib + 2e9, gemm_flops_library: lib });
});

Deno.test("timings file: {kernels: {name: ms}} or a flat map; bad entries are one-line errors", () => {
  const a = parseTimings('{"device": "H100", "step_ms": 2.5, "kernels": {"k1": 0.5, "k2": 1}}', "t.json");
  assert.deepEqual([...a.kernels], [["k1", 0.5], ["k2", 1]]);
  assert.equal(a.stepMs, 2.5);
  assert.equal(a.device, "H100");
  assert.deepEqual([...parseTimings('{"k1": 0.25}', "t.json").kernels], [["k1", 0.25]]);
  assert.throws(() => parseTimings("{", "t.json"), /^Error: t\.json: not JSON/);
  assert.throws(() => parseTimings("[1]", "t.json"), /t\.json: expected a JSON object/);
  assert.throws(() => parseTimings('{"k1": "fast"}', "t.json"), /t\.json: kernel k1: expected a time in ms/);
  assert.throws(() => parseTimings('{"kernels": {"k1": -1}}', "t.json"), /kernel k1: expected a time in ms/);
});

Deno.test("deno task compile --target cuda-sm90 --measured: the summary's GEMM FLOPs and prediction, a measured column", () =>
  withTemp(async (dir) => {
    const args = [
      `${ROOT}models/bert-tiny.ts`,
      "--target",
      "cuda-sm90",
      "--batch-size",
      "2",
      "--seq-len",
      "16",
    ];
    const first = await runCli("compile.ts", [...args, "--out", `${dir}/a`, "--summary", `${dir}/a.json`]);
    assert.equal(first.code, 0, first.stderr);
    const s = JSON.parse(await Deno.readTextFile(`${dir}/a.json`));
    const p: Plan = JSON.parse(await Deno.readTextFile(`${dir}/a/plan.json`));
    assert.deepEqual([s.gemm_flops, s.gemm_flops_library], Object.values(gemmFlops(p)));
    assert.ok(s.gemm_flops_library > 0 && s.gemm_flops_library <= s.gemm_flops);
    const { H100_SXM } = await import("../../compiler/targets/h100.ts");
    close(s.predicted_step_ms, Number((predictPlan(p, H100_SXM).seconds * 1e3).toFixed(4)));
    assert.equal(s.predicted_seq_per_s, Math.round(2 / (predictPlan(p, H100_SXM).seconds)));
    // Synthetic timings: kernel i took (i + 1) µs; one name the plan lacks is ignored.
    const timings = Object.fromEntries(p.kernels.map((k, i) => [k.name, (i + 1) / 1000]));
    await Deno.writeTextFile(
      `${dir}/t.json`,
      JSON.stringify({ kernels: { ...timings, nope: 9 }, step_ms: 1.5 }),
    );
    const second = await runCli("compile.ts", [...args, "--out", `${dir}/b`, "--measured", `${dir}/t.json`]);
    assert.equal(second.code, 0, second.stderr);
    const report = await Deno.readTextFile(`${dir}/b/report.md`);
    const sum = p.kernels.reduce((a, _k, i) => a + (i + 1) / 1000, 0);
    assert.match(
      report,
      new RegExp(
        `\\| step \\| [0-9.]+ ms \\| ${sum.toFixed(3)} ms \\(sum of kernels\\); 1\\.500 ms \\(step\\) \\|`,
      ),
    );
    assert.match(report, /\| sequences\/s \(batch 2\) \| \d+ \| 1333 \|/);
    const last = p.kernels.at(-1)!;
    assert.match(report, new RegExp(`\\| ${last.name} \\| [^\\n]*\\| ${p.kernels.length}\\.0 \\|\\n`));
    // Without a CUDA target, or with a bad file: one-line errors, exit 1.
    const wgsl = await runCli("compile.ts", [
      ...args.slice(0, 1),
      "--target",
      "webgpu-gpu",
      "--out",
      `${dir}/c`,
      "--measured",
      `${dir}/t.json`,
    ]);
    assert.equal(wgsl.code, 1);
    assert.match(wgsl.stderr, /--measured needs --target cuda-sm90/);
    await Deno.writeTextFile(`${dir}/bad.json`, '{"k": "x"}');
    const bad = await runCli("compile.ts", [...args, "--out", `${dir}/d`, "--measured", `${dir}/bad.json`]);
    assert.equal(bad.code, 1);
    assert.equal(bad.stderr.trim().split("\n").length, 1, bad.stderr);
  }));
