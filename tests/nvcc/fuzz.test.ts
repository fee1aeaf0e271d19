/**
 * The fuzzer's CUDA run (cases/fuzz/): a fixed range of seeds plus a range derived from the commit
 * (cases/fuzz/seeds.ts), each graph compiled fused and unfused for CUDA and run on the CPU through g++
 * and the shim of tests/util/cuda_cpu.ts (GEMMs as the plan's cuBLASLt calls in even batches, as
 * template kernels in odd ones), every output element against the f64 reference within its
 * conditioning-derived bound. FUZZ_CUDA_COUNT / FUZZ_CUDA_EXTRA resize the run. Without g++ it is ignored.
 */
import { fuzzTier } from "../../cases/fuzz/ci.ts";
import { assertTierClean } from "../util/fuzz_tier_checks.ts";
import { CXX, cxxVersion } from "../util/cuda_cpu.ts";
import { cudaShimDevice } from "../util/fuzz_devices.ts";

const version = await cxxVersion();
if (!version) console.log(`CUDA fuzz ignored: ${CXX} not found`);
// 256 fixed seeds: the CI run stays under its 30 minutes (issue 27); deno task fuzz runs more.
const FIXED = Number(Deno.env.get("FUZZ_CUDA_COUNT") ?? 256);
const EXTRA = Number(Deno.env.get("FUZZ_CUDA_EXTRA") ?? 64);

Deno.test({
  name: `fuzz on CUDA through the CPU shim: ${FIXED} fixed and ${EXTRA} commit-derived random graphs`,
  ignore: !version,
  fn: async () => {
    const r = await fuzzTier({
      label: "the CUDA shim",
      fixed: FIXED,
      extra: EXTRA,
      // Seeds far from the WebGPU run's, so the two tiers check different graphs.
      offset: 500_000,
      chunk: 32,
      device: (chunk) => cudaShimDevice(chunk % 2 === 0),
    });
    assertTierClean(r, FIXED);
  },
});
