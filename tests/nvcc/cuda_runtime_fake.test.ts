/**
 * The CUDA runtime's FFI layer and executor against a fake driver and a fake NVRTC, so CI (no GPU)
 * exercises the real call paths: the fake libcuda is C compiled here against the toolkit's cuda.h, so each
 * fake function has the real prototype (a mismatch is a compile error) and the Deno bindings are called
 * across the same ABI as on a GPU. Device memory is host memory; kernels do not run — the fake records
 * each launch (grid, block, the pointer arguments) so the tests can check what the executor asked for.
 * Graph capture is emulated: captured launches and copies run at cuGraphLaunch.
 *
 * Needs gcc and cuda.h ($CUDA_HOME/include or /usr/local/cuda*); ignored without them.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { FUSION_CASES, graphOf } from "../../cases/fusion_cases.ts";
import type { CudaContext } from "../../runtime/cuda/cuda_context.ts";
import { CudaDriver } from "../../runtime/cuda/driver.ts";
import { CudaError, CudaUnavailableError } from "../../runtime/cuda/cuda_errors.ts";
import { CudaExecutor } from "../../runtime/cuda/cuda_executor.ts";
import { KernelCache } from "../../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import type { Plan, PlanBuffer } from "../../plan/plan.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { buildFakeLibs, FAKE_DRIVER, FAKE_NVRTC } from "../util/fake_cuda.ts";

/** Builds the fakes into a temp dir: libcuda.so.1 and libnvrtc.so.13. */
async function buildFakes(): Promise<{ dir?: string; why: string }> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-fake-cuda-" });
  const why = await buildFakeLibs(dir, { "libcuda.so.1": FAKE_DRIVER, "libnvrtc.so.13": FAKE_NVRTC });
  return why ? { why } : { dir, why: "" };
}

const fakes = await buildFakes();
if (!fakes.dir) console.log(`fake-driver tests skipped: ${fakes.why}`);
const dir = fakes.dir ?? "";
/** Discovery confined to the fake folder. */
const discoverOpts = { env: (n: string) => (n === "LD_LIBRARY_PATH" ? dir : undefined), systemDirs: [] };

const FAKE_SYMBOLS = {
  fake_launch_count: { parameters: [], result: "i32" },
  fake_capture_began_at: { parameters: [], result: "i32" },
  fake_memset_count: { parameters: [], result: "i32" },
  fake_reset: { parameters: [], result: "void" },
  fake_launch: { parameters: ["i32", "buffer"], result: "void" },
} as const;
const NVRTC_FAKE_SYMBOLS = { fake_compile_count: { parameters: [], result: "i32" } } as const;

interface LaunchRecord {
  grid: number[];
  block: number[];
  shared: number;
  params: bigint[];
}

let ctx: CudaContext | undefined;
let fake: Deno.DynamicLibrary<typeof FAKE_SYMBOLS> | undefined;
let fakeNvrtc: Deno.DynamicLibrary<typeof NVRTC_FAKE_SYMBOLS> | undefined;

function open(): { ctx: CudaContext; fake: NonNullable<typeof fake>; compiles: () => number } {
  if (!ctx) {
    const driver = CudaDriver.open(0, discoverOpts);
    const nvrtc = Nvrtc.open(discoverOpts);
    ctx = { driver, nvrtc, cache: new KernelCache(`${dir}/cache`), description: "fake" };
    // The same files, opened again for the fakes' own inspection functions (dlopen shares the library).
    fake = Deno.dlopen(`${dir}/libcuda.so.1`, FAKE_SYMBOLS);
    fakeNvrtc = Deno.dlopen(`${dir}/libnvrtc.so.13`, NVRTC_FAKE_SYMBOLS);
  }
  return { ctx, fake: fake!, compiles: () => fakeNvrtc!.symbols.fake_compile_count() };
}

function launchesSince(f: NonNullable<typeof fake>, from = 0): LaunchRecord[] {
  const out: LaunchRecord[] = [];
  const n = f.symbols.fake_launch_count();
  for (let i = from; i < n; i++) {
    const buf = new BigUint64Array(8 + 64);
    f.symbols.fake_launch(i, buf);
    out.push({
      grid: [0, 1, 2].map((k) => Number(buf[k])),
      block: [3, 4, 5].map((k) => Number(buf[k])),
      shared: Number(buf[6]),
      params: [...buf.subarray(8, 8 + Number(buf[7]))],
    });
  }
  return out;
}

const ignore = !fakes.dir;

Deno.test({
  name: "fake driver: open reads the device (name, sm_90, SM count, driver version)",
  ignore,
  fn: () => {
    const { ctx } = open();
    assert.equal(ctx.driver.info.name, "Fake GPU");
    assert.deepEqual(ctx.driver.info.capability, [9, 0]);
    assert.equal(ctx.driver.arch, "sm_90");
    assert.equal(ctx.driver.info.smCount, 132);
    assert.equal(ctx.driver.info.driverVersion, 13000);
    assert.equal(ctx.nvrtc.versionString, "13.0");
    assert.equal(ctx.driver.path, `${dir}/libcuda.so.1`);
  },
});

Deno.test({
  name: "fake driver: a cuInit failure is CudaUnavailableError with the status name",
  ignore,
  fn: () => {
    Deno.env.set("FAKE_CUDA_INIT_ERROR", "100");
    try {
      assert.throws(
        () => CudaDriver.open(0, discoverOpts),
        (e: unknown) =>
          e instanceof CudaUnavailableError &&
          /cuInit failed with CUDA_ERROR_NO_DEVICE \(100\)/.test(e.message),
      );
    } finally {
      Deno.env.delete("FAKE_CUDA_INIT_ERROR");
    }
  },
});

/** A fused plan of real emitted CUDA kernels (a backward pass: several kernels, shared modules). */
function realPlan(): { plan: Plan; feeds: Record<string, Float64Array> } {
  const c = FUSION_CASES.find((c) => c.name.startsWith("LayerNorm backward"))!;
  const g = graphOf(c.name, c.body, "f32", c.backward);
  const { plan } = compileGraph(g, { fuse: true, target: target("cuda") });
  return { plan, feeds: randomFeeds(g, 7) };
}

for (const graphs of [true, false]) {
  const onOff = graphs ? "on" : "off";
  Deno.test({
    name:
      `fake driver: a real plan launches every kernel with its grid, block and binding addresses (graphs ${onOff})`,
    ignore,
    fn: async () => {
      const { ctx, fake } = open();
      const { plan, feeds } = realPlan();
      const ex = await CudaExecutor.create(ctx, plan, { graphs });
      try {
        assert.equal(ex.usesGraph, graphs);
        const before = fake.symbols.fake_launch_count();
        // Capture records; nothing runs before the first step.
        assert.equal(launchesSince(fake, before).length, 0);
        for (const [name, data] of Object.entries(feeds)) ex.write(name, data);
        await ex.step();
        await ex.finish();
        const got = launchesSince(fake, before);
        const launchSteps = plan.steps.filter((s) => s.op === "launch");
        assert.equal(got.length, launchSteps.length);
        launchSteps.forEach((s, i) => {
          const k = plan.kernels[(s as { kernel: number }).kernel];
          assert.deepEqual(got[i].grid, [...k.source!.grid], k.name);
          assert.deepEqual(got[i].block, [k.source!.workgroupSize, 1, 1], k.name);
          assert.equal(got[i].shared, 0);
          const want = [...k.bindings].sort((a, b) => a.index - b.index).map((b) => ex.address(b.buffer));
          assert.deepEqual(got[i].params, want, k.name);
          for (const p of got[i].params) assert.equal(p % 256n, 0n, "256-byte aligned");
        });
        // Inputs written are read back exactly (through cuMemcpyHtoD/DtoH and the arena addresses).
        for (const [name, data] of Object.entries(feeds)) {
          assert.deepEqual([...await ex.read(name)], [...Float32Array.from(data)], name);
        }
      } finally {
        ex.destroy();
      }
    },
  });
}

/** A hand-made plan: two kernels, a copy step and a parameter update, f16 and bool buffers. */
function handPlan(code: (i: number) => string): Plan {
  const buf = (
    id: number,
    name: string,
    dtype: PlanBuffer["dtype"],
    role: PlanBuffer["role"],
    offset?: number,
  ): PlanBuffer => ({
    id,
    name,
    dtype,
    shape: [5],
    bytes: 5 * (dtype === "f16" ? 2 : dtype === "bool" ? 1 : 4),
    role,
    slot: id === 4 ? 3 : id,
    ...(offset ? { offset } : {}),
  });
  const kernel = (i: number, bindings: number[]) => ({
    name: `k${i}`,
    kind: "test",
    bindings: bindings.map((buffer, index) => ({
      index,
      name: `b${index}`,
      buffer,
      access: index === 0 ? "write" as const : "read" as const,
    })),
    source: { code: code(i), grid: [2, 1, 1] as const, workgroupSize: 128 },
    about: [],
    bytesRead: 0,
    bytesWritten: 0,
    flops: 0,
  });
  return {
    version: 2,
    graph: "hand",
    target: "cuda-sm90",
    language: "cuda",
    buffers: [
      buf(0, "w", "f32", "param"),
      buf(1, "x", "f16", "input"),
      buf(2, "m", "bool", "input"),
      buf(3, "y", "f32", "output"),
      buf(4, "w_new", "f32", "activation", 256),
    ],
    slots: [{ id: 0, bytes: 32 }, { id: 1, bytes: 16 }, { id: 2, bytes: 32 }, { id: 3, bytes: 512 }],
    inputs: { x: 1, m: 2 },
    params: { w: 0 },
    outputs: { y: 3 },
    kernels: [kernel(0, [4, 0, 1]), kernel(1, [3, 1, 2])],
    steps: [{ op: "launch", kernel: 0 }, { op: "launch", kernel: 1 }, {
      op: "copy",
      src: 0,
      dst: 3,
      bytes: 20,
    }],
    updates: [{ param: 0, value: 4 }],
  };
}

const SAME = (_i: number) =>
  `extern "C" __global__ void bf_kernel(float* b0, const float* b1, const __half* b2) {}`;

Deno.test({
  name:
    "fake driver: copies and updates move the stored bytes; f16 and bool round-trip; identical sources share a module",
  ignore,
  fn: async () => {
    const { ctx } = open();
    const ex = await CudaExecutor.create(ctx, handPlan(SAME));
    try {
      assert.equal(ex.moduleCount, 1);
      assert.equal(ex.address("w_new") - ex.address(4), 0n);
      assert.equal(Number(ex.address(4) - ex.address(3)), 256, "w_new sits 256 bytes into y's slot");
      ex.write("x", [0.1, 2, -3, 65504, 1e-8]);
      ex.write("m", [0, 1, 7, 0, 1]);
      assert.deepEqual([...await ex.read("x")], [0.0999755859375, 2, -3, 65504, 0]);
      assert.deepEqual([...await ex.read("m")], [0, 1, 1, 0, 1]);
      // Never-written buffers read as zero: the arena is zeroed once (the fake allocates garbage).
      assert.deepEqual([...await ex.read(4)], [0, 0, 0, 0, 0]);
      ex.write("w", [1, 2, 3, 4, 5]);
      ex.write(4, [9, 8, 7, 6, 5]);
      await ex.step();
      // Step: the copy w -> y ran before the update w_new -> w.
      assert.deepEqual([...await ex.read("y")], [1, 2, 3, 4, 5]);
      assert.deepEqual([...await ex.read("w")], [9, 8, 7, 6, 5]);
      const r = await ex.run({ x: [1, 1, 1, 1, 1] });
      assert.deepEqual(Object.keys(r), ["y"]);
      assert.deepEqual([...r.y], [9, 8, 7, 6, 5]);
      const p = await ex.profile(2);
      assert.equal(p.launches.length, 2);
      assert.deepEqual(p.launches.map((l) => l.name), ["k0", "k1"]);
      assert.ok(p.launches.every((l) => l.ns > 0) && p.stepMs > 0);
    } finally {
      ex.destroy();
    }
  },
});

Deno.test({
  name: "fake driver: NVRTC output is cached on disk by key; a second executor compiles nothing",
  ignore,
  fn: async () => {
    const { ctx, compiles } = open();
    const unique = (i: number) => `${SAME(i)}\n// cache test ${crypto.randomUUID()} ${i}`;
    const plan = handPlan(unique);
    const c0 = compiles();
    (await CudaExecutor.create(ctx, plan)).destroy();
    assert.equal(compiles() - c0, 2);
    (await CudaExecutor.create(ctx, plan)).destroy();
    assert.equal(compiles() - c0, 2, "served from the cache");
    const files = [...Deno.readDirSync(`${dir}/cache`)].map((e) => e.name);
    assert.ok(files.every((f) => /^[0-9a-f]{64}\.cubin(\.sha256)?$/.test(f)), files.join(", "));
    // A corrupt entry (its bytes no longer the recorded hash's) is never loaded: it is recompiled.
    for (const f of files.filter((f) => f.endsWith(".cubin"))) {
      Deno.writeFileSync(`${dir}/cache/${f}`, new Uint8Array([1, 2, 3]));
    }
    (await CudaExecutor.create(ctx, plan)).destroy();
    assert.ok(compiles() - c0 >= 4);
  },
});

Deno.test({
  name: "fake driver: errors name the call, the status and the kernel",
  ignore,
  fn: async () => {
    const { ctx } = open();
    const bad = (i: number) => (i === 1 ? `#error planted\n${SAME(i)}` : SAME(i));
    await assert.rejects(
      () => CudaExecutor.create(ctx, handPlan(bad)),
      (e: unknown) =>
        e instanceof CudaError &&
        /^kernel k1: CUDA source did not compile with NVRTC 13\.0 for sm_90:\n.*planted #error/.test(
          e.message,
        ),
    );
    const plan = handPlan(SAME);
    const failing = {
      ...plan,
      kernels: plan.kernels.map((k, i) =>
        i === 1 ? { ...k, source: { ...k.source, grid: [7777, 1, 1] as const } } : k
      ),
    };
    await assert.rejects(
      () =>
        CudaExecutor.create(ctx, failing, { graphs: false }).then((ex) =>
          ex.step().finally(() => ex.destroy())
        ),
      (e: unknown) =>
        e instanceof CudaError &&
        e.message ===
          "cuLaunchKernel failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701) (kernel k1 (step 1))",
    );
    const noEntry = (_i: number) => `extern "C" __global__ void other(float* b0) {}`;
    await assert.rejects(
      () => CudaExecutor.create(ctx, handPlan(noEntry)),
      /kernel k0: CUDA source does not define bf_kernel/,
    );
  },
});

Deno.test({
  name:
    "fake driver: with graphs, the program runs once uncaptured before capture, then the arena is zero again",
  ignore,
  fn: async () => {
    const { ctx, fake } = open();
    const { plan } = realPlan();
    const before = fake.symbols.fake_launch_count();
    const ex = await CudaExecutor.create(ctx, plan, { graphs: true });
    try {
      const launchSteps = plan.steps.filter((s) => s.op === "launch").length;
      const warm = launchesSince(fake, before);
      assert.equal(warm.length, launchSteps, "one uncaptured launch per launch step");
      assert.equal(fake.symbols.fake_capture_began_at(), before + launchSteps, "capture began after them");
      assert.ok(ex.usesGraph);
      for (const b of plan.buffers) assert.ok((await ex.read(b.id)).every((v) => v === 0), b.name);
    } finally {
      ex.destroy();
    }
  },
});

/**
 * An in-place flat vector 'flat' (a parameter) with two parts at byte offsets 0 and 256, so bytes 20-255
 * and 276-767 are padding the plan reads as zero; a copy step snapshots it at the start of each run and
 * the update copies 'flat_new' (every element non-zero) over it at the end, dirtying the padding.
 */
function flatPlan(): Plan {
  const f32 = (id: number, name: string, n: number, role: PlanBuffer["role"], slot: number, offset = 0) => ({
    id,
    name,
    dtype: "f32" as const,
    shape: [n],
    bytes: 4 * n,
    role,
    slot,
    ...(offset ? { offset } : {}),
  });
  return {
    version: 2,
    graph: "flat",
    target: "cuda-sm90",
    language: "cuda",
    buffers: [
      f32(0, "flat", 192, "param", 0),
      f32(1, "p0", 5, "param", 0),
      f32(2, "p1", 5, "param", 0, 256),
      f32(3, "flat_new", 192, "activation", 1),
      f32(4, "snapshot", 192, "output", 2),
    ],
    slots: [{ id: 0, bytes: 768 }, { id: 1, bytes: 768 }, { id: 2, bytes: 768 }],
    inputs: {},
    params: { flat: 0, p0: 1, p1: 2 },
    outputs: { snapshot: 4 },
    kernels: [],
    steps: [{ op: "copy", src: 0, dst: 4, bytes: 768 }],
    updates: [{ param: 0, value: 3 }],
  };
}

for (const graphs of [true, false]) {
  const onOff = graphs ? "on" : "off";
  Deno.test({
    name: `fake driver: the padding of an updated flat vector reads as zero on every run (graphs ${onOff})`,
    ignore,
    fn: async () => {
      const { ctx } = open();
      const plan = flatPlan();
      const ex = await CudaExecutor.create(ctx, plan, { graphs });
      try {
        const dirty = Array.from({ length: 192 }, (_, i) => i + 1);
        ex.write("flat_new", dirty);
        ex.write("p0", [1, 2, 3, 4, 5]);
        ex.write("p1", [6, 7, 8, 9, 10]);
        for (let run = 0; run < 3; run++) {
          await ex.step();
          const snap = [...await ex.read("snapshot")];
          // Parts: the values written (run 0) or the update's (later runs); padding: zero every time.
          const parts = run === 0 ? [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] : [1, 2, 3, 4, 5, 65, 66, 67, 68, 69];
          assert.deepEqual([...snap.slice(0, 5), ...snap.slice(64, 69)], parts, `run ${run}`);
          const padding = [...snap.slice(5, 64), ...snap.slice(69)];
          assert.ok(padding.every((v) => v === 0), `run ${run}: padding ${padding.filter((v) => v !== 0)}`);
          // Without the re-zeroing the update leaves the padding dirty: that is what the next run meets.
          const flat = [...await ex.read("flat")];
          assert.equal(flat[5], 6, "the update copied flat_new over the padding");
        }
      } finally {
        ex.destroy();
      }
    },
  });
}

Deno.test({
  name: "fake NVRTC: the kernel cache key depends on the headers' contents, not on their folder",
  ignore,
  fn: async () => {
    const { ctx, compiles } = open();
    const cuda = (root: string, fp16: string) => {
      Deno.mkdirSync(`${root}/include`, { recursive: true });
      Deno.writeTextFileSync(`${root}/include/cuda.h`, "#define CUDA_VERSION 13000\n");
      Deno.writeTextFileSync(`${root}/include/cuda_fp16.h`, fp16);
    };
    const [a, b, c] = ["a", "b", "c"].map((x) => `${dir}/toolkit-${x}`);
    cuda(a, "// fp16 v1\n");
    cuda(b, "// fp16 v1\n");
    cuda(c, "// fp16 v2\n");
    const nvrtcAt = (root: string) =>
      Nvrtc.open({
        env: (n) => (n === "LD_LIBRARY_PATH" ? dir : n === "CUDA_HOME" ? root : undefined),
        systemDirs: [],
      });
    const [na, nb, nc] = [a, b, c].map(nvrtcAt);
    try {
      assert.deepEqual(na.includeDirs, [Deno.realPathSync(`${a}/include`)]);
      assert.ok(na.options("sm_90").includes(`-I${Deno.realPathSync(`${a}/include`)}`));
      assert.notDeepEqual(na.options("sm_90"), nb.options("sm_90"));
      assert.deepEqual(na.keyOptions("sm_90"), nb.keyOptions("sm_90"), "same headers elsewhere: same key");
      assert.notDeepEqual(na.keyOptions("sm_90"), nc.keyOptions("sm_90"), "other headers: another key");
      const plan = handPlan((i) => `${SAME(i)}\n// header key test ${crypto.randomUUID()} ${i}`);
      const c0 = compiles();
      for (const [nvrtc, want] of [[na, 2], [nb, 2], [nc, 4]] as const) {
        const ex = await CudaExecutor.create({ ...ctx, nvrtc }, plan);
        ex.destroy();
        assert.equal(compiles() - c0, want);
      }
    } finally {
      for (const n of [na, nb, nc]) n.close();
    }
  },
});

Deno.test({
  name: "fake driver: closing",
  ignore,
  fn: () => {
    fake?.close();
    fakeNvrtc?.close();
    ctx?.nvrtc.close();
    ctx?.driver.close();
    if (dir) Deno.removeSync(dir, { recursive: true });
  },
});
