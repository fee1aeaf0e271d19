/**
 * Reads a compiled plan folder (what `deno task compile` writes: plan.json plus one file per distinct
 * kernel) back into a Plan a runtime can execute, so compiling and running can happen in different
 * processes or on different machines.
 */
import type { Plan, PlanKernel, TargetKernel } from "./plan.ts";

export class PlanError extends Error {}

type StoredTarget = { file: string; grid: [number, number, number]; workgroupSize: number };

export async function readPlanDir(dir: string): Promise<Plan> {
  const path = `${dir.replace(/\/$/, "")}/plan.json`;
  let raw: unknown;
  try {
    raw = JSON.parse(await Deno.readTextFile(path));
  } catch (e) {
    throw new PlanError(`${path}: cannot read the plan (${(e as Error).message.split("\n")[0]})`);
  }
  const stored = raw as Omit<Plan, "kernels"> & { kernels: Record<string, unknown>[] };
  if (stored?.version !== 2 || !Array.isArray(stored.kernels) || !Array.isArray(stored.buffers)) {
    throw new PlanError(`${path}: not a version-2 bertfuse plan (recompile it with deno task compile)`);
  }
  const files = new Map<string, string>();
  const load = async (t: StoredTarget, kernel: string): Promise<TargetKernel> => {
    if (typeof t?.file !== "string" || !Array.isArray(t.grid)) {
      throw new PlanError(`${path}: kernel ${kernel} has a malformed source entry`);
    }
    let code = files.get(t.file);
    if (code === undefined) {
      try {
        code = await Deno.readTextFile(`${dir}/${t.file}`);
      } catch {
        throw new PlanError(`${dir}/${t.file}: missing (kernel ${kernel}); recompile with deno task compile`);
      }
      files.set(t.file, code);
    }
    return { code, grid: t.grid, workgroupSize: t.workgroupSize };
  };
  const kernels: PlanKernel[] = [];
  for (const k of stored.kernels) {
    const { source, library, ...rest } = k as typeof k & {
      source: StoredTarget;
      library?: { epilogue?: { source: StoredTarget } };
    };
    const name = String(k.name);
    // A library GEMM's epilogue kernel is stored in a file of its own, like the kernels.
    const epi = library?.epilogue;
    kernels.push({
      ...rest,
      source: await load(source, name),
      ...(library
        ? {
          library: {
            ...library,
            ...(epi ? { epilogue: { ...epi, source: await load(epi.source, name) } } : {}),
          },
        }
        : {}),
    } as unknown as PlanKernel);
  }
  return { ...stored, kernels };
}
