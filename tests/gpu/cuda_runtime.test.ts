/**
 * The CUDA runtime without a GPU (CI): library discovery and its error, the NVRTC cache key, the arena
 * layout of a real compiled plan, host encoding, `--backend cuda` failing cleanly and `auto` falling back.
 * What needs a GPU (the executor actually running kernels) is bench/gpu_check.ts.
 */
import { target } from "../util/target.ts";
import { QUIET } from "../../compiler/pipeline/debug.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { describeChoice, openBackend, type Probes } from "../../engine/choose_backend.ts";
import type { CudaContext } from "../../runtime/cuda/cuda_context.ts";
import { CudaDriver } from "../../runtime/cuda/driver.ts";
import { CudaError, CudaUnavailableError } from "../../runtime/cuda/cuda_errors.ts";
import { CudaExecutor } from "../../runtime/cuda/cuda_executor.ts";
import { decodeStored, encodeStored } from "../../runtime/host.ts";
import { kernelCacheKey } from "../../runtime/cuda/kernel_cache.ts";
import { ARENA_ALIGN, arenaOffsets, zeroRegions } from "../../runtime/arena.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { loadModel } from "../../models/load.ts";
import { discover, searchDirs } from "../../runtime/cuda/libs.ts";
import { type Plan, type PlanBuffer, storedSize } from "../../plan/plan.ts";
import type { GpuContext } from "../../runtime/webgpu/device.ts";
import { runCli, withTemp } from "../util/cli.ts";
import { layerGraph } from "../../cases/layer_graph.ts";

/** Whether this machine has a real driver; the absence tests only make sense without one. */
const hasDriver = discover("cuda").path !== null;
const FFI_PERMS = ["--allow-read", "--allow-write", "--allow-env", "--allow-ffi"];

function touch(path: string): void {
  Deno.writeFileSync(path, new Uint8Array(0));
}

Deno.test({
  name:
    "without a driver, opening CUDA fails with CudaUnavailableError naming libcuda and the folders searched",
  ignore: hasDriver,
  fn: () =>
    withTemp((dir) => {
      const env = (n: string) => (n === "LD_LIBRARY_PATH" ? `${dir}/nothing-here` : undefined);
      let caught: unknown;
      try {
        CudaDriver.open(0, { env, systemDirs: [dir] });
      } catch (e) {
        caught = e;
      }
      assert.ok(caught instanceof CudaUnavailableError, String(caught));
      const msg = caught.message;
      assert.match(msg, /libcuda\.so\.1/);
      assert.ok(msg.includes(`${dir}/nothing-here`), msg);
      assert.ok(msg.includes(`, ${dir};`) || msg.includes(` ${dir};`), msg);
      assert.ok(!msg.includes("\n"), "one line");
      assert.deepEqual(caught.searched, [`${dir}/nothing-here`, dir]);
      return Promise.resolve();
    }),
});

Deno.test({
  name: "without a driver, the real search reports the standard places (toolkit, /usr/lib/x86_64-linux-gnu)",
  ignore: hasDriver,
  fn: () => {
    try {
      CudaDriver.open();
      assert.fail("expected CudaUnavailableError");
    } catch (e) {
      assert.ok(e instanceof CudaUnavailableError, String(e));
      assert.match(e.message, /libcuda\.so\.1/);
      assert.ok(e.searched.includes("/usr/lib/x86_64-linux-gnu"), e.searched.join(", "));
      assert.ok(e.searched.some((d) => d.startsWith("/usr/local/cuda")), e.searched.join(", "));
    }
  },
});

Deno.test("discovery honours LD_LIBRARY_PATH, in order, before everything else", () =>
  withTemp((dir) => {
    for (const d of ["a", "b", "sys"]) Deno.mkdirSync(`${dir}/${d}`);
    touch(`${dir}/b/libcuda.so.1`);
    touch(`${dir}/sys/libcuda.so.1`);
    touch(`${dir}/b/libnvrtc.so.13`);
    const env = (n: string) => (n === "LD_LIBRARY_PATH" ? `${dir}/a::${dir}/b/` : undefined);
    const opts = { env, systemDirs: [`${dir}/sys`] };
    assert.deepEqual(searchDirs(opts), [`${dir}/a`, `${dir}/b`, `${dir}/sys`]);
    assert.equal(discover("cuda", opts).path, `${dir}/b/libcuda.so.1`);
    assert.equal(discover("nvrtc", opts).path, `${dir}/b/libnvrtc.so.13`);
    const none = discover("cublasLt", opts);
    assert.equal(none.path, null);
    assert.deepEqual(none.searched, [`${dir}/a`, `${dir}/b`, `${dir}/sys`]);
    // Without LD_LIBRARY_PATH the system folder's copy is found.
    assert.equal(
      discover("cuda", { env: () => undefined, systemDirs: [`${dir}/sys`] }).path,
      `${dir}/sys/libcuda.so.1`,
    );
    return Promise.resolve();
  }));

Deno.test("discovery: CUDA_HOME, the newest soname in a folder, and no builtins or dangling links", () =>
  withTemp((dir) => {
    Deno.mkdirSync(`${dir}/cuda/lib64`, { recursive: true });
    for (
      const f of [
        "libnvrtc-builtins.so.13.0",
        "libnvrtc.so.12",
        "libnvrtc.so.13.0.48",
        "libnvrtc.so.13",
        "libnvrtc.so",
      ]
    ) {
      touch(`${dir}/cuda/lib64/${f}`);
    }
    Deno.symlinkSync(`${dir}/missing`, `${dir}/cuda/lib64/libcublasLt.so.13`);
    const env = (n: string) => (n === "CUDA_HOME" ? `${dir}/cuda` : undefined);
    const opts = { env, systemDirs: [] };
    assert.equal(discover("nvrtc", opts).path, `${dir}/cuda/lib64/libnvrtc.so.13`);
    assert.equal(discover("cublasLt", opts).path, null);
    return Promise.resolve();
  }));

Deno.test("discovery: Python wheels' nvidia/<pkg>/lib folders", () =>
  withTemp((dir) => {
    const sp = `${dir}/lib/python3.12/site-packages`;
    Deno.mkdirSync(`${sp}/nvidia/cu13/lib`, { recursive: true });
    touch(`${sp}/nvidia/cu13/lib/libnvrtc.so.13`);
    touch(`${sp}/nvidia/cu13/lib/libcublasLt.so.13`);
    const env = (n: string) => (n === "VIRTUAL_ENV" ? dir : undefined);
    // The wheel folders are part of the system list; keep the real machine's other folders out of the way
    // by checking only that the wheel folder is searched and yields the library when nothing precedes it.
    const dirs = searchDirs({ env });
    assert.ok(dirs.includes(`${sp}/nvidia/cu13/lib`), dirs.join(", "));
    const onlyWheels = dirs.filter((d) => d.startsWith(dir));
    assert.equal(
      discover("cublasLt", { env, systemDirs: onlyWheels }).path,
      `${sp}/nvidia/cu13/lib/libcublasLt.so.13`,
    );
    return Promise.resolve();
  }));

Deno.test("the NVRTC cache key is stable and covers source, arch, NVRTC version and options", () => {
  const base = {
    source: 'extern "C" __global__ void bf_kernel(float* b0) {}',
    arch: "sm_90",
    nvrtcVersion: "13.0",
    options: ["--gpu-architecture=sm_90"],
  };
  const key = kernelCacheKey(base);
  assert.match(key, /^[0-9a-f]{64}$/);
  assert.equal(kernelCacheKey({ ...base }), key);
  // Pinned: a change of the key's composition must be deliberate (it invalidates every user's cache).
  assert.equal(key, PINNED_KEY);
  const variants = [
    { ...base, source: base.source + " " },
    { ...base, arch: "sm_80" },
    { ...base, nvrtcVersion: "12.8" },
    { ...base, options: [...base.options, "--std=c++17"] },
    // Moving a boundary between parts must not collide.
    { ...base, arch: "sm_9", nvrtcVersion: "013.0" },
  ];
  const keys = new Set([key, ...variants.map(kernelCacheKey)]);
  assert.equal(keys.size, variants.length + 1);
});

const PINNED_KEY = kernelCacheKey({
  source: 'extern "C" __global__ void bf_kernel(float* b0) {}',
  arch: "sm_90",
  nvrtcVersion: "13.0",
  options: ["--gpu-architecture=sm_90"],
});

/** The layout's invariants for any plan: aligned, in bounds, slots disjoint, buffers inside their slot. */
function checkLayout(plan: Pick<Plan, "graph" | "buffers" | "slots">): void {
  const l = arenaOffsets(plan);
  const ranges = l.slotOffsets.map((o, i) => [o, o + l.slotBytes[i]] as const);
  ranges.forEach(([o], i) => {
    assert.equal(o % ARENA_ALIGN, 0, `slot ${i} at ${o}`);
    if (i > 0) assert.ok(o >= ranges[i - 1][1], `slot ${i} overlaps slot ${i - 1}`);
    assert.ok(l.slotBytes[i] >= plan.slots[i].bytes);
  });
  assert.ok(l.totalBytes >= ranges.at(-1)![1]);
  for (const b of plan.buffers) {
    const at = l.bufferOffsets[b.id];
    assert.equal(at % ARENA_ALIGN, 0, `buffer ${b.name} at ${at}`);
    assert.equal(at, l.slotOffsets[b.slot] + (b.offset ?? 0));
    assert.ok(at + storedSize(b) <= ranges[b.slot][1], `buffer ${b.name} runs past its slot`);
  }
}

Deno.test("arena layout of a real compiled plan (one BERT layer, forward and backward)", () => {
  const g = layerGraph({ batch: 2, seq: 8, dropout: true, backward: true });
  const { plan } = compileGraph(g, { fuse: true, target: target("wgsl") });
  assert.ok(plan.buffers.length > 10);
  assert.ok(plan.slots.length < plan.buffers.length, "the memory plan shares slots");
  checkLayout(plan);
});

Deno.test("zero regions of a BERT-tiny training plan: none updated in place; with a copy, the vector's padding", async () => {
  const model = await loadModel("models/bert-tiny.ts");
  const g = buildModelGraph({
    model,
    mode: "train",
    precision: "fp32",
    batchSize: 2,
    seqLen: 8,
    maxPredictions: 2,
  });
  // Updated in place (compiler/stages/in_place_updates.ts), the vector's padding is computed by the update
  // itself (zero weights, gradients and moments give a zero update): nothing to re-zero.
  const inPlace = compileGraph(g, { fuse: true, target: target("wgsl") }).plan;
  assert.equal(inPlace.updates.filter((u) => inPlace.buffers[u.param].name === "flat.params").length, 0);
  assert.deepEqual(zeroRegions(inPlace, arenaOffsets(inPlace)), []);
  // Updated by a copy after the step, the copy overwrites the padding too.
  const flags = { ...QUIET, skipPasses: new Set(["in-place-updates"]) };
  const { plan } = compileGraph(g, { fuse: true, target: target("wgsl"), flags });
  const layout = arenaOffsets(plan);
  const regions = zeroRegions(plan, layout);
  assert.ok(regions.length > 0);
  // flat.params is replaced by the update each step; the gradient vector's padding is never written.
  assert.deepEqual([...new Set(regions.map((r) => r.buffer))], ["flat.params"]);
  const vector = plan.buffers[plan.outputs["flat.params"] ?? plan.params["flat.params"]];
  const start = layout.bufferOffsets[vector.id], end = start + storedSize(vector);
  const parts = plan.buffers.filter((b) => b.slot === vector.slot && b !== vector);
  for (const r of regions) {
    assert.ok(r.bytes > 0 && r.offset >= start && r.offset + r.bytes <= end, `${r.offset}+${r.bytes}`);
    for (const p of parts) {
      const ps = layout.bufferOffsets[p.id], pe = ps + storedSize(p);
      assert.ok(r.offset + r.bytes <= ps || r.offset >= pe, `region ${r.offset} overlaps ${p.name}`);
    }
  }
  // Parts and regions together cover the vector exactly.
  const covered = parts.reduce((a, p) => a + storedSize(p), 0) + regions.reduce((a, r) => a + r.bytes, 0);
  assert.equal(covered, storedSize(vector));
});

Deno.test("arena layout: pieces at offsets inside a slot, bool widened to 4 bytes, 256-byte alignment", () => {
  const buf = (
    id: number,
    slot: number,
    dtype: PlanBuffer["dtype"],
    n: number,
    offset?: number,
  ): PlanBuffer => ({
    id,
    name: `b${id}`,
    dtype,
    shape: [n],
    bytes: n * (dtype === "bool" ? 1 : dtype === "f16" || dtype === "bf16" ? 2 : 4),
    role: "activation",
    slot,
    ...(offset !== undefined ? { offset } : {}),
  });
  const plan = {
    graph: "synthetic",
    // Slot 0 is a flat vector of two pieces; slot 1 is a bool mask whose plan size counts 1 byte each.
    buffers: [buf(0, 0, "f32", 100), buf(1, 0, "f32", 30, 512), buf(2, 1, "bool", 10), buf(3, 2, "bf16", 3)],
    slots: [{ id: 0, bytes: 400 }, { id: 1, bytes: 16 }, { id: 2, bytes: 16 }],
  };
  const l = arenaOffsets(plan);
  assert.deepEqual(l.slotBytes, [512 + 120, 40, 16]);
  assert.deepEqual(l.slotOffsets, [0, 768, 1024]);
  assert.deepEqual(l.bufferOffsets, [0, 512, 768, 1024]);
  assert.equal(l.totalBytes, 1280);
  checkLayout(plan);
  assert.throws(
    () => arenaOffsets({ ...plan, buffers: [buf(0, 0, "f32", 4, 100)] }),
    /offset 100 in slot 0, not a non-negative multiple of 256/,
  );
  assert.throws(
    () => arenaOffsets({ ...plan, buffers: [buf(0, 7, "f32", 4)] }),
    /slot 7, which the plan lacks/,
  );
});

Deno.test("host encoding round-trips every dtype in its stored form", () => {
  const mk = (dtype: PlanBuffer["dtype"]): PlanBuffer => ({
    id: 0,
    name: "x",
    dtype,
    shape: [4],
    bytes: 0,
    role: "input",
    slot: 0,
  });
  const cases: [PlanBuffer["dtype"], number[], number[]][] = [
    ["f32", [1.5, -2, 0.1, 3e38], [1.5, -2, Math.fround(0.1), Math.fround(3e38)]],
    ["f16", [1.5, -2, 0.1, 65504], [1.5, -2, 0.0999755859375, 65504]],
    ["bf16", [1.5, -2, 0.1, 3], [1.5, -2, 0.10009765625, 3]],
    ["i32", [1, -2, 3, -4], [1, -2, 3, -4]],
    ["u32", [1, 2, 3, 4294967295], [1, 2, 3, 4294967295]],
    ["bool", [0, 1, 5, 0], [0, 1, 1, 0]],
  ];
  for (const [dtype, input, want] of cases) {
    const b = mk(dtype);
    const bytes = encodeStored(b, input);
    assert.equal(bytes.byteLength, storedSize(b), dtype);
    assert.deepEqual([...decodeStored(b, bytes)], want, dtype);
  }
  assert.throws(() => encodeStored(mk("f32"), [1, 2]), /has 4 elements/);
});

Deno.test("the executor checks the plan's CUDA kernels before touching the device", async () => {
  const { plan } = compileGraph(layerGraph({ batch: 1, seq: 4, dropout: false, backward: false }), {
    fuse: true,
    target: target("wgsl"),
  });
  const noDevice = {} as CudaContext; // any device use would throw a TypeError instead
  await assert.rejects(
    () => CudaExecutor.create(noDevice, plan),
    (e: unknown) =>
      e instanceof CudaError &&
      /compiled for lavapipe \(wgsl\); the CUDA backend runs cuda plans/.test(e.message),
  );
});

const fakeWebGPU = { description: "fake adapter" } as GpuContext;
const probes = (cuda: string | null, webgpu: boolean): Probes => ({
  cuda: () => cuda === null ? ({ description: "fake GPU" } as CudaContext) : { unavailable: cuda },
  webgpu: () => Promise.resolve(webgpu ? fakeWebGPU : { unavailable: "no adapter" }),
  cpu: () => ({ unavailable: "no C compiler" }),
});

Deno.test("auto picks CUDA, then WebGPU, then (without a C compiler) the reference interpreter, and says why", async () => {
  const missing = "libcuda.so.1 (the NVIDIA driver) not found; searched LD_LIBRARY_PATH, /a, /b";
  assert.equal((await openBackend("auto", probes(null, true))).kind, "cuda");
  const w = await openBackend("auto", probes(missing, true));
  assert.equal(w.kind, "webgpu");
  assert.equal(
    describeChoice(w),
    "backend: webgpu (auto: no CUDA (libcuda.so.1 (the NVIDIA driver) not found); WebGPU adapter 'fake adapter')",
  );
  const r = await openBackend("auto", probes(missing, false));
  assert.equal(r.kind, "reference");
  assert.match(
    describeChoice(r),
    /^backend: reference \(auto: no CUDA \(.*not found\); no WebGPU \(no adapter\); no CPU \(no C compiler\)\)$/,
  );
  await assert.rejects(
    () => openBackend("cuda", probes(missing, true)),
    /^CudaBackendError: --backend cuda: libcuda\.so\.1/,
  );
  assert.equal((await openBackend("reference", probes(null, true))).kind, "reference");
});

Deno.test({
  name: "infer --backend cuda without a GPU: one-line error, exit code 1",
  ignore: hasDriver,
  fn: async () => {
    const r = await runCli("infer.ts", ["--backend", "cuda"], FFI_PERMS);
    assert.equal(r.code, 1, r.stderr);
    const lines = r.stderr.trim().split("\n").filter((l) => l.startsWith("error:"));
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /^error: --backend cuda: libcuda\.so\.1 \(the NVIDIA driver\) not found/);
    assert.ok(!/\n\s+at /.test(r.stderr), `no stack trace: ${r.stderr}`);
  },
});

Deno.test("infer --backend cuda without --allow-ffi says the permission is missing", async () => {
  const r = await runCli("infer.ts", ["--backend", "cuda"], ["--allow-read", "--allow-write", "--allow-env"]);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /^error: --backend cuda: .*needs the FFI permission \(deno run --allow-ffi\)/m);
});

Deno.test({
  name: "infer --backend auto falls back to webgpu or the reference interpreter and says which on stderr",
  ignore: hasDriver,
  fn: () =>
    withTemp(async (dir) => {
      const r = await runCli(
        "infer.ts",
        ["--backend", "auto", "--output", `${dir}/out.safetensors`],
        FFI_PERMS,
      );
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /^backend: (webgpu|reference) \(auto: no CUDA \(libcuda\.so\.1/m);
      assert.match(r.stdout, /backend (webgpu|reference)/);
      assert.ok(Deno.statSync(`${dir}/out.safetensors`).size > 0);
    }),
});
