/**
 * The first stage of a GPU run (bench/gpu_run.sh): what the machine is and whether the packed kernel cache
 * hits, in one JSON object (--json) and one summary line. The GPU through our own driver binding, NVRTC and
 * cuBLASLt as the runtime finds them (path, version, include folders), NCCL where a wheel or the system has
 * it, and the cache key's inputs (NVRTC version, header identity) against what bench/gpu_pack.sh recorded
 * in --manifest: equal inputs mean the packed entries hit; otherwise the run precompiles in parallel.
 *
 *   deno run -A bench/gpu_probe.ts --json FILE [--manifest .offline/cuda-cache.json]
 */
import { parseFlags, runMain, UsageError } from "../cli/common.ts";
import { openCuda } from "../runtime/cuda/cuda_context.ts";
import { CublasLt } from "../runtime/cuda/cublaslt.ts";
import { knownSitePackages } from "../runtime/cuda/libs.ts";
import { headerIdentity } from "../runtime/cuda/nvrtc_files.ts";
import { writeFileAtomic } from "../model_io/outputs.ts";

/** What a kernel cache entry's key depends on besides the source (runtime/cuda/kernel_cache.ts). */
export function cacheInputs(nvrtc: { versionString: string; includeDirs: readonly string[] }) {
  return { nvrtc_version: nvrtc.versionString, header_identity: headerIdentity(nvrtc.includeDirs) };
}

await runMain(async () => {
  const { values } = parseFlags(
    Deno.args,
    { json: { type: "string" }, manifest: { type: "string" } },
    "deno run -A bench/gpu_probe.ts --json FILE [--manifest .offline/cuda-cache.json]\n",
  );
  if (!values.json) throw new UsageError("--json FILE is required");
  const ctx = openCuda();
  // cuBLASLt's absence is a finding, not the end of the probe (GEMMs then run as template kernels).
  let cublaslt: { path: string; version: number } | { error: string };
  try {
    const lt = CublasLt.open(ctx.driver);
    cublaslt = { path: lt.path, version: lt.version };
    lt.close();
  } catch (e) {
    cublaslt = { error: (e as Error).message.slice(0, 300) };
  }
  const nccl: string[] = [];
  for (const sp of knownSitePackages()) {
    for (const sub of ["nccl/lib", "cu13/lib", "cu12/lib"]) {
      try {
        for (const e of Deno.readDirSync(`${sp}/nvidia/${sub}`)) {
          if (/^libnccl\.so/.test(e.name)) nccl.push(`${sp}/nvidia/${sub}/${e.name}`);
        }
      } catch { /* not there */ }
    }
  }
  const inputs = cacheInputs(ctx.nvrtc);
  let packed: Record<string, unknown> | undefined;
  try {
    packed = JSON.parse(await Deno.readTextFile(values.manifest ?? ".offline/cuda-cache.json"));
  } catch { /* no manifest: nothing was packed */ }
  const hit = packed !== undefined && packed.nvrtc_version === inputs.nvrtc_version &&
    packed.header_identity === inputs.header_identity;
  let entries = 0;
  try {
    for (const e of Deno.readDirSync(ctx.cache.dir)) if (e.name.endsWith(".cubin")) entries++;
  } catch { /* empty */ }
  const probe = {
    device: ctx.description,
    nvrtc: { path: ctx.nvrtc.path, version: ctx.nvrtc.versionString, include: ctx.nvrtc.includeDirs },
    cublaslt,
    nccl,
    kernel_cache: { dir: ctx.cache.dir, entries, ...inputs, packed: packed ?? null, packed_entries_hit: hit },
  };
  await writeFileAtomic(values.json, JSON.stringify(probe, null, 2) + "\n");
  console.log(
    `probe: ${ctx.description}; cuBLASLt ${"version" in cublaslt ? cublaslt.version : "MISSING"}; NCCL ${
      nccl[0] ?? "not found"
    }; ` +
      `kernel cache ${entries} entries, packed cache ${
        packed ? (hit ? "HITS" : "MISSES (other NVRTC or headers)") : "absent"
      }`,
  );
});
