/**
 * The fuzzer's run on the native CPU backend (cases/fuzz/): a fixed range of seeds plus a range derived
 * from the commit (cases/fuzz/seeds.ts), each graph compiled fused and unfused to C and run by the CPU
 * executor (the backend's own flags, -O3 -march=native; GEMMs on OpenBLAS in even chunks, as the C template
 * kernel in odd ones), every output element against the f64 reference within its conditioning-derived
 * bound. A chunk of 32 graphs is one compile per mode: the executor joins its distinct kernels into a few
 * translation units, so cc runs a few dozen times per chunk, not once per graph. The libraries go to a
 * private cache folder, removed afterwards, so the timing is a cold one and the user's kernel cache is not
 * filled with fuzz kernels. FUZZ_CPU_COUNT / FUZZ_CPU_EXTRA resize the run. Without a C compiler it is
 * ignored.
 */
import { fuzzTier } from "../../cases/fuzz/ci.ts";
import { assertTierClean } from "../util/fuzz_tier_checks.ts";
import { testCpu } from "../util/cpu_check.ts";
import { cpuDevice } from "../util/fuzz_devices.ts";

const cpu = await testCpu();
const FIXED = Number(Deno.env.get("FUZZ_CPU_COUNT") ?? 320);
const EXTRA = Number(Deno.env.get("FUZZ_CPU_EXTRA") ?? 64);

Deno.test({
  name:
    `fuzz on the CPU backend: ${FIXED} fixed and ${EXTRA} commit-derived random graphs, fused and unfused`,
  ignore: !cpu.ctx,
  fn: async () => {
    const cache = await Deno.makeTempDir({ prefix: "bertfuse-fuzz-cpu-" });
    const before = Deno.env.get("BERTFUSE_CACHE");
    Deno.env.set("BERTFUSE_CACHE", cache);
    try {
      const r = await fuzzTier({
        label: "the CPU backend",
        fixed: FIXED,
        extra: EXTRA,
        // Far from the WebGPU (0) and CUDA shim (500,000) tiers: fixed seeds 1,000,001.. stay below every
        // commit's seed (>= 2^20), and the commit's range moves 1,000,000 past the other tiers' ranges.
        offset: 1_000_000,
        chunk: 32,
        device: (chunk) => cpuDevice(cpu.ctx!, chunk % 2 === 0),
      });
      assertTierClean(r, FIXED);
    } finally {
      if (before === undefined) Deno.env.delete("BERTFUSE_CACHE");
      else Deno.env.set("BERTFUSE_CACHE", before);
      await Deno.remove(cache, { recursive: true });
    }
  },
});
