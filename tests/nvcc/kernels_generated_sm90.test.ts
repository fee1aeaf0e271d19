/**
 * The committed kernels of kernels_generated/<plan>/cuda/*.cu (BERT-base inference and BERT-large
 * training, fp16: what a GPU run compiles) checked for sm_90 without a GPU:
 *
 * 1. Register spills, from ptxas (`nvcc -arch=sm_90 -cubin -Xptxas -v`, which prints each entry
 *    function's spill stores and loads). The gate: no spills in any kernel except the GEMM template
 *    (`matmul` in the file name), whose spills are printed as information (GEMMs are moving to cuBLASLt).
 *    Kernels are batched into translation units (entry points renamed by a macro, a #line naming the file)
 *    and two nvcc processes run at once. Ignored without nvcc.
 * 2. NVRTC itself (the runtime's Nvrtc class: the library, include folders and options a GPU run uses),
 *    where a libnvrtc is found (runtime/cuda/libs.ts). A kernel that includes cuda_fp16.h/cuda_bf16.h needs
 *    headers of NVRTC's own CUDA version; when none are on the machine those kernels are counted as not
 *    checked, with the reason, and the others still compile. Ignored without a libnvrtc.
 */
import assert from "node:assert/strict";
import { discover } from "../../runtime/cuda/libs.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { NVCC, nvccVersion } from "../util/nvcc.ts";

const ROOT = new URL("../../kernels_generated/", import.meta.url).pathname;
const PER_TU = 40;
const PARALLEL = 2;

interface KernelFile {
  readonly plan: string;
  readonly file: string;
  readonly code: string;
}

function kernelFiles(): KernelFile[] {
  const out: KernelFile[] = [];
  let plans: string[] = [];
  try {
    // kernels_generated/<model>/<target>/: the CUDA targets' plans hold cuda/.
    plans = [...Deno.readDirSync(ROOT)].filter((e) => e.isDirectory).flatMap((m) =>
      [...Deno.readDirSync(`${ROOT}${m.name}`)].filter((t) => t.isDirectory).map((t) => `${m.name}/${t.name}`)
    ).sort();
  } catch {
    return out;
  }
  for (const plan of plans) {
    let files: string[] = [];
    try {
      files = [...Deno.readDirSync(`${ROOT}${plan}/cuda`)].map((e) => e.name).filter((n) =>
        n.endsWith(".cu")
      );
    } catch {
      continue;
    }
    for (const file of files.sort()) {
      out.push({ plan, file, code: Deno.readTextFileSync(`${ROOT}${plan}/cuda/${file}`) });
    }
  }
  return out;
}

const files = kernelFiles();
const nvcc = await nvccVersion();
if (!nvcc) console.log(`sm_90 spill gate ignored: ${NVCC} not found`);

/** A kernel's spills per ptxas, keyed by "plan/file". */
interface Spills {
  readonly stores: number;
  readonly loads: number;
  readonly registers: number;
}

/** Parses `ptxas -v` output: the entry function line, then its stack/spill line and its register line. */
function parsePtxas(log: string): Map<string, Spills> {
  const out = new Map<string, Spills>();
  let current: string | undefined;
  let spill: { stores: number; loads: number } | undefined;
  for (const line of log.split("\n")) {
    const entry = line.match(/Compiling entry function '([^']+)'/);
    if (entry) {
      current = entry[1];
      spill = undefined;
      continue;
    }
    const s = line.match(/(\d+) bytes spill stores, (\d+) bytes spill loads/);
    if (s && current) spill = { stores: Number(s[1]), loads: Number(s[2]) };
    const r = line.match(/Used (\d+) registers/);
    if (r && current && spill) {
      out.set(current, { ...spill, registers: Number(r[1]) });
      current = undefined;
    }
  }
  return out;
}

Deno.test({
  name: `kernels_generated: no register spills for sm_90 outside the GEMM template${
    nvcc ? "" : " (nvcc not found)"
  }`,
  ignore: !nvcc || files.length === 0,
  sanitizeResources: false,
  async fn() {
    const t0 = performance.now();
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-spills-" });
    const units: KernelFile[][] = [];
    for (let i = 0; i < files.length; i += PER_TU) units.push(files.slice(i, i + PER_TU));
    const spills = new Map<string, Spills>();
    const failures: string[] = [];
    try {
      let next = 0;
      const worker = async () => {
        while (next < units.length) {
          const u = next++;
          const text = units[u].map((f, i) =>
            `#define bf_kernel bf_kernel_${u}_${i}\n#line 1 "${f.plan}/${f.file}"\n${f.code}#undef bf_kernel\n`
          ).join("\n");
          await Deno.writeTextFile(`${dir}/tu${u}.cu`, text);
          const out = await new Deno.Command(NVCC, {
            args: [
              "-arch=sm_90",
              "-std=c++17",
              "-cubin",
              "-Xptxas",
              "-v",
              `${dir}/tu${u}.cu`,
              "-o",
              `${dir}/tu${u}.cubin`,
            ],
            stdout: "piped",
            stderr: "piped",
          }).output();
          const log = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
          if (!out.success) failures.push(`tu${u}:\n${log.slice(0, 4000)}`);
          const parsed = parsePtxas(log);
          units[u].forEach((f, i) => {
            const s = parsed.get(`bf_kernel_${u}_${i}`);
            if (s) spills.set(`${f.plan}/${f.file}`, s);
            else if (out.success) failures.push(`${f.plan}/${f.file}: no ptxas report`);
          });
        }
      };
      await Promise.all(Array.from({ length: PARALLEL }, worker));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
    assert.equal(failures.length, 0, failures.join("\n"));
    const spilling = [...spills].filter(([, s]) => s.stores + s.loads > 0);
    const gemm = spilling.filter(([name]) => /_matmul/.test(name));
    const hot = spilling.filter(([name]) => !/_matmul/.test(name));
    const fmt = ([name, s]: [string, Spills]) =>
      `${name}: ${s.registers} registers, ${s.stores} B spill stores, ${s.loads} B spill loads`;
    console.log(
      `${spills.size} kernels (${nvcc}) in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
        `GEMM template kernels spilling (information): ${gemm.length} of ${
          [...spills.keys()].filter((n) => /_matmul/.test(n)).length
        }`,
    );
    for (const g of gemm.slice(0, 5)) console.log(`  ${fmt(g)}`);
    assert.equal(hot.length, 0, `kernels other than the GEMM template spill:\n${hot.map(fmt).join("\n")}`);
  },
});

function realNvrtc(): Nvrtc | string {
  const d = discover("nvrtc");
  if (!d.path) return "no libnvrtc on this machine";
  try {
    return Nvrtc.open();
  } catch (e) {
    return `libnvrtc did not load: ${(e as Error).message.split("\n")[0]}`;
  }
}

const nvrtc = files.length ? realNvrtc() : "no kernels_generated";
if (typeof nvrtc === "string") console.log(`NVRTC compile of kernels_generated ignored: ${nvrtc}`);

Deno.test({
  name: `kernels_generated: every kernel compiles with NVRTC for sm_90${
    typeof nvrtc === "string" ? ` (${nvrtc})` : ""
  }`,
  ignore: typeof nvrtc === "string",
  fn() {
    const n = nvrtc as Nvrtc;
    try {
      const t0 = performance.now();
      const needsHeaders = (code: string) => /#include\s*<cuda_(fp16|bf16)\.h>/.test(code);
      const checkable = n.includeDirs.length > 0 ? files : files.filter((f) => !needsHeaders(f.code));
      const failures: string[] = [];
      const seen = new Set<string>();
      for (const f of checkable) {
        if (seen.has(f.code)) continue;
        seen.add(f.code);
        try {
          n.compile(f.code, "sm_90", `${f.plan}/${f.file}`);
        } catch (e) {
          failures.push((e as Error).message.slice(0, 2000));
        }
      }
      const skipped = files.length - checkable.length;
      console.log(
        `NVRTC ${n.versionString} (${n.path}): ${seen.size} distinct kernels compiled for sm_90 in ${
          ((performance.now() - t0) / 1000).toFixed(1)
        } s` +
          (skipped
            ? `; ${skipped} kernels including cuda_fp16.h/cuda_bf16.h not checked: no CUDA ${
              n.version[0]
            }.x headers on this machine`
            : ""),
      );
      assert.ok(seen.size > 0, "at least one kernel was compiled");
      assert.equal(failures.length, 0, failures.join("\n\n"));
    } finally {
      n.close();
    }
  },
});
