/**
 * The fuzzer's WebGPU run (cases/fuzz/): a fixed range of seeds plus a range derived from the commit
 * (cases/fuzz/seeds.ts), each graph compiled fused and unfused and run on WebGPU (lavapipe in CI), every
 * output element against the f64 reference within its conditioning-derived bound. A failure prints each
 * failing seed with its one-line replay command. FUZZ_WEBGPU_COUNT / FUZZ_WEBGPU_EXTRA resize the run.
 */
import { fuzzTier } from "../../cases/fuzz/ci.ts";
import { assertTierClean } from "../util/fuzz_tier_checks.ts";
import { webgpuDevice } from "../util/fuzz_devices.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const FIXED = Number(Deno.env.get("FUZZ_WEBGPU_COUNT") ?? 96);
const EXTRA = Number(Deno.env.get("FUZZ_WEBGPU_EXTRA") ?? 32);

Deno.test({
  name: `fuzz on WebGPU: ${FIXED} fixed and ${EXTRA} commit-derived random graphs, fused and unfused`,
  ignore: !gpu.ctx,
  fn: async () => {
    const device = webgpuDevice(gpu.ctx!);
    const r = await fuzzTier({
      label: "WebGPU",
      fixed: FIXED,
      extra: EXTRA,
      offset: 0,
      chunk: 16,
      device: () => device,
    });
    assertTierClean(r, FIXED);
  },
});
