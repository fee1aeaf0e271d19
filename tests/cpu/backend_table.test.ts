/**
 * The backend table (engine/backends.ts) and the one way commands open a backend through it
 * (engine/choose_backend.ts): `auto` walks the rows in preference order with fake probes, a capability
 * refusal has one wording wherever it is asked, the reference interpreter goes through the table too, and
 * every row's name is a `--backend` value that the commands' help lists.
 */
import assert from "node:assert/strict";
import { layerGraph } from "../../cases/layer_graph.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { BACKENDS } from "../../engine/backends.ts";
import { rowForLanguage } from "../../engine/capabilities.ts";
import { BACKEND_NAMES, describeChoice, openBackend, type Probes } from "../../engine/choose_backend.ts";
import { precisionRefusal } from "../../engine/capabilities.ts";
import { runCli } from "../util/cli.ts";

/** Fake probes that record the order they were asked in; a missing entry answers `{ unavailable }`. */
function fakes(present: { cuda?: boolean; webgpu?: boolean | string; cpu?: boolean }) {
  const asked: string[] = [];
  const probes: Probes = {
    cuda: () => {
      asked.push("cuda");
      return present.cuda
        ? { description: "fake GPU" }
        : { unavailable: "libcuda.so.1 not found; searched /x" };
    },
    webgpu: () => {
      asked.push("webgpu");
      return Promise.resolve(
        present.webgpu
          ? {
            description: typeof present.webgpu === "string" ? present.webgpu : "fake adapter",
            limits: { maxStorageBufferBindingSize: 1 << 27 },
          }
          : { unavailable: "no adapter" },
      );
    },
    cpu: () => {
      asked.push("cpu");
      return present.cpu ? { description: "fake CPU" } : { unavailable: "no C compiler: 'cc' not found" };
    },
  };
  return { asked, probes };
}

Deno.test("auto walks the table in preference order and stops at the first backend that opens", async () => {
  const all = fakes({ cuda: true, webgpu: true });
  assert.equal((await openBackend("auto", all.probes)).kind, "cuda");
  assert.deepEqual(all.asked, ["cuda"]);

  const gpu = fakes({ webgpu: true });
  const w = await openBackend("auto", gpu.probes);
  assert.deepEqual(gpu.asked, ["cuda", "webgpu"]);
  assert.equal(
    describeChoice(w),
    "backend: webgpu (auto: no CUDA (libcuda.so.1 not found); WebGPU adapter 'fake adapter')",
  );
  assert.equal(w.limits.maxStorageBindingBytes, 1 << 27, "the binding limit comes from the context");

  const none = fakes({});
  const r = await openBackend("auto", none.probes);
  assert.equal(
    describeChoice(r),
    "backend: reference (auto: no CUDA (libcuda.so.1 not found); no WebGPU (no adapter); " +
      "no CPU (no C compiler: 'cc' not found))",
  );
  assert.deepEqual(none.asked, ["cuda", "webgpu", "cpu"]);

  // A software rasterizer is passed over for the CPU backend (and still used when asked for by name).
  const lavapipe = fakes({ webgpu: "llvmpipe (LLVM 15.0.6, 256 bits)", cpu: true });
  const c = await openBackend("auto", lavapipe.probes);
  assert.equal(
    describeChoice(c),
    "backend: cpu (auto: no CUDA (libcuda.so.1 not found); not WebGPU: adapter 'llvmpipe (LLVM 15.0.6, 256 " +
      "bits)' is a software rasterizer; CPU fake CPU)",
  );
  assert.equal((await openBackend("webgpu", lavapipe.probes)).kind, "webgpu");
});

Deno.test("an explicit backend probes only itself, and one that cannot run is a one-line error", async () => {
  const f = fakes({ cuda: true });
  await assert.rejects(
    () => openBackend("webgpu", f.probes),
    (e: Error) => e.name === "WebgpuBackendError" && e.message === "--backend webgpu: no adapter",
  );
  assert.deepEqual(f.asked, ["webgpu"]);
  assert.equal(describeChoice(await openBackend("cuda", f.probes)), "backend: cuda (asked for; fake GPU)");
  assert.equal(describeChoice(await openBackend("reference", f.probes)), "backend: reference (asked for)");
});

Deno.test("bf16 on WebGPU is refused in one wording, by a command's backend and by a compile target", async () => {
  const want = "--precision bf16 needs CPU or CUDA: WGSL has no bf16 type";
  const webgpu = await openBackend("webgpu", fakes({ webgpu: true }).probes);
  assert.equal(webgpu.refusePrecision("bf16"), want);
  assert.equal(webgpu.refusePrecision("fp16"), undefined);
  assert.equal(precisionRefusal(rowForLanguage("wgsl"), "bf16"), want);
  for (const row of BACKENDS.filter((r) => r.name !== "webgpu")) {
    assert.equal(precisionRefusal(row, "bf16"), undefined, row.name);
  }
  const r = await runCli("compile.ts", ["--precision", "bf16", "--target", "webgpu-gpu"]);
  assert.equal(r.code, 1);
  assert.equal(r.stderr.trim(), `error: ${want}`);
});

Deno.test("the reference interpreter goes through the table: a step executor and a graph Backend agree", async () => {
  const g = layerGraph({ batch: 1, seq: 4, dropout: false, backward: false });
  const feeds = randomFeeds(g, 7, { attention_mask: () => 1 });
  const ref = await openBackend("reference");
  const { executor, compiled } = await ref.compile(g, true);
  assert.equal(compiled, undefined, "the interpreter compiles nothing");
  for (const [name, data] of Object.entries(feeds)) executor.write(name, data);
  await executor.step();
  const backend = ref.graphBackend({ precision: "f32" });
  assert.equal(backend.name, "reference (f32)");
  const out = await backend.run(g, feeds);
  assert.ok(out.size > 0);
  for (const [name, want] of out) {
    assert.deepEqual(Array.from(await executor.read(name)), Array.from(want), name);
  }
});

Deno.test("every row's name is a --backend value, accepted and listed in the help of infer and train", async () => {
  assert.deepEqual(BACKEND_NAMES, ["auto", ...BACKENDS.map((r) => r.name)]);
  for (const script of ["infer.ts", "train.ts"]) {
    const help = await runCli(script, ["--help"]);
    assert.equal(help.code, 0, help.stderr);
    const usage = help.stdout.match(/\[--backend ([\w|]+)\]/);
    assert.ok(usage, `${script}: no [--backend …] in the usage line`);
    assert.deepEqual(usage[1].split("|").sort(), [...BACKEND_NAMES].sort(), script);
    const bad = await runCli(script, ["--backend", "bogus"]);
    assert.equal(bad.code, 1);
    assert.equal(
      bad.stderr.trim(),
      `error: --backend must be one of ${BACKEND_NAMES.join(", ")}, got 'bogus'`,
    );
  }
});
