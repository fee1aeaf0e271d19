/**
 * deno task fuzz [--seed N] [--count N] [--backend webgpu|cuda-shim|cpu|all] [--fused|--unfused]
 *                [--batch N] [--template-gemms]
 *
 * Random graphs (cases/fuzz/) compiled and run on WebGPU, as emitted CUDA on the CPU (g++ and the shim)
 * and on the native CPU backend (emitted C, GEMMs on oneDNN or OpenBLAS; --template-gemms: as C kernels), every output
 * against the f64 reference within the bound derived from the graph's conditioning. Without --seed it
 * starts at this commit's seed (cases/fuzz/seeds.ts). A failing seed is printed with the one-line
 * command that replays it; the exit code is 1 when any graph failed.
 */
import { describeList, fuzzRun } from "../cases/fuzz/run.ts";
import type { FuzzDevice } from "../cases/fuzz/check.ts";
import { commitSeed } from "../cases/fuzz/seeds.ts";
import { cxxVersion } from "../tests/util/cuda_cpu.ts";
import { cpuDevice, cudaShimDevice, webgpuDevice } from "../tests/util/fuzz_devices.ts";
import { openWebGPU } from "../runtime/webgpu/device.ts";
import { openCpu } from "../runtime/cpu/cpu_context.ts";

const USAGE = "usage: deno task fuzz [--seed N] [--count N] [--backend webgpu|cuda-shim|cpu|all] " +
  "[--fused|--unfused] [--batch N] [--template-gemms]";

function fail(message: string): never {
  console.error(`error: ${message}\n${USAGE}`);
  Deno.exit(1);
}

function parse(args: string[]) {
  const o = {
    seed: undefined as number | undefined,
    count: 32,
    backend: "all",
    modes: [true, false],
    batch: 16,
    library: true,
  };
  const int = (flag: string, v: string | undefined, min: number) => {
    if (v === undefined || !/^\d+$/.test(v) || Number(v) < min) {
      fail(`${flag} needs an integer >= ${min}, got '${v ?? ""}'`);
    }
    return Number(v);
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--seed") o.seed = int(a, args[++i], 0);
    else if (a === "--count") o.count = int(a, args[++i], 1);
    else if (a === "--batch") o.batch = int(a, args[++i], 1);
    else if (a === "--backend") {
      o.backend = args[++i];
      if (!["webgpu", "cuda-shim", "cpu", "all"].includes(o.backend)) fail(`unknown backend '${o.backend}'`);
    } else if (a === "--fused") o.modes = [true];
    else if (a === "--unfused") o.modes = [false];
    else if (a === "--template-gemms") o.library = false;
    else if (a === "--help" || a === "-h") {
      console.log(USAGE);
      Deno.exit(0);
    } else fail(`unknown flag '${a}'`);
  }
  return o;
}

const o = parse(Deno.args);
const devices: FuzzDevice[] = [];
if (o.backend === "webgpu" || o.backend === "all") {
  const gpu = await openWebGPU();
  if ("unavailable" in gpu) {
    if (o.backend === "webgpu") fail(`WebGPU is not available: ${gpu.unavailable}`);
    console.log(`WebGPU skipped: ${gpu.unavailable}`);
  } else devices.push(webgpuDevice(gpu));
}
if (o.backend === "cuda-shim" || o.backend === "all") {
  if (await cxxVersion()) devices.push(cudaShimDevice(o.library));
  else if (o.backend === "cuda-shim") fail("the CUDA shim needs g++ (or $CXX)");
  else console.log("cuda-shim skipped: no g++");
}
if (o.backend === "cpu" || o.backend === "all") {
  try {
    devices.push(cpuDevice(openCpu(), o.library));
  } catch (e) {
    if (o.backend === "cpu") fail(`the CPU backend is not available: ${(e as Error).message}`);
    console.log(`cpu skipped: ${(e as Error).message}`);
  }
}
if (devices.length === 0) fail("no backend to fuzz on");

const start = o.seed ?? (await commitSeed()).seed;
const seeds = Array.from({ length: o.count }, (_, i) => start + i);
console.log(`fuzz: seeds ${start}..${start + o.count - 1} on ${devices.map((d) => d.name).join(", ")}`);
const s = await fuzzRun({ seeds, devices, modes: o.modes, batch: o.batch, log: (l) => console.log(l) });
const { checked, unchecked, sharp } = s.elements;
console.log(
  `${s.graphs} of ${seeds.length} graphs passed in ${
    (s.ms / 1000).toFixed(1)
  } s; ${checked} elements checked ` +
    `(${
      ((100 * sharp) / Math.max(checked, 1)).toFixed(1)
    }% within 1% of their output's scale), ${unchecked} unbounded`,
);
if (s.known.length) {
  console.log(`known compiler bugs (cases/fuzz/known.ts):\n${describeList(s.known)}`);
}
if (s.failures.length) console.log(describeList(s.failures));
if (s.failures.length || s.known.length) Deno.exit(1);
