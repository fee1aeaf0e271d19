/**
 * Which backend runs a command: the one asked for, or with `auto` the first row of the backend table
 * (engine/backends.ts), in preference order, whose probe succeeds — today CUDA when the driver loads and sees
 * a GPU, else WebGPU when navigator.gpu gives an adapter that is a real GPU (not a software rasterizer such
 * as lavapipe), else the CPU backend when there is a C compiler, else the reference interpreter. Every
 * command opens its backend here (`openBackend`), so they choose alike; the choice and the reasons the faster
 * backends were passed over come back as one line for stderr.
 */
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import type { Graph } from "../ir/mod.ts";
import type { Backend } from "../runtime/backend.ts";
import {
  type BackendLimits,
  type BackendRow,
  BackendUnavailableError,
  type CompiledStep,
  type GraphBackendOptions,
  isUnavailable,
} from "./backend_row.ts";
import { type BackendName, type BackendRequest, BACKENDS } from "./backends.ts";
import { precisionRefusal } from "./capabilities.ts";

export { BACKEND_NAMES, type BackendName, type BackendRequest } from "./backends.ts";
export { BackendUnavailableError };

/** An opened backend: its row, the context its probe opened, and why it was chosen. */
export interface BackendChoice {
  /** The row's name: "cuda", "webgpu", "reference". */
  readonly kind: BackendName;
  readonly row: BackendRow;
  readonly why: string;
  /** The device's name for benchmark records. */
  readonly device: string;
  readonly limits: BackendLimits;
  /** Compiles `g` for this backend and loads it into a step executor. */
  compile(g: Graph, fuse: boolean): Promise<CompiledStep>;
  /** A graph-level Backend (inference): each graph compiled once, run on named feeds. */
  graphBackend(opts?: GraphBackendOptions): Backend;
  /** Why this backend cannot run `--precision p` (one line), or undefined when it can. */
  refusePrecision(p: Precision): string | undefined;
}

/** Probes by row name, replacing the rows' own in tests; each returns a context or `{ unavailable }`. */
export type Probes = Partial<Record<BackendName, () => unknown>>;

/** The first clause of a long "not found" message: what is missing, without the list of folders. */
function brief(message: string): string {
  const cut = message.indexOf("; searched");
  return cut > 0 ? message.slice(0, cut) : message;
}

function bind(row: BackendRow, ctx: unknown, why: string): BackendChoice {
  return {
    kind: row.name as BackendName,
    row,
    why,
    // Read from the context when asked, so a test's fake context need only hold what the test reads.
    get device() {
      return row.device(ctx);
    },
    get limits() {
      return row.limits(ctx);
    },
    compile: (g, fuse) => row.compile(ctx, g, fuse),
    graphBackend: (opts = {}) => row.graphBackend(ctx, opts),
    refusePrecision: (p) => precisionRefusal(row, p),
  };
}

/** What the row's probe (or the test's replacement) opened. */
async function probe(row: BackendRow, probes: Probes): Promise<unknown> {
  const replaced = probes[row.name as BackendName];
  return replaced ? await replaced() : await row.probe();
}

/**
 * Opens the requested backend. An explicit name that cannot run throws BackendUnavailableError with one
 * line naming what is missing; `auto` falls through to the next row.
 */
export async function openBackend(request: BackendRequest, probes: Probes = {}): Promise<BackendChoice> {
  if (request !== "auto") {
    const row = BACKENDS.find((r) => r.name === request);
    if (!row) throw new BackendUnavailableError(request, `--backend ${request}: no such backend`);
    const ctx = await probe(row, probes);
    if (isUnavailable(ctx)) {
      throw new BackendUnavailableError(row.name, `--backend ${row.name}: ${ctx.unavailable}`);
    }
    const says = row.says(ctx, false);
    return bind(row, ctx, says ? `asked for; ${says}` : "asked for");
  }
  const passed: string[] = [];
  for (const row of [...BACKENDS].sort((a, b) => b.preference - a.preference)) {
    const ctx = await probe(row, probes);
    if (isUnavailable(ctx)) {
      passed.push(`no ${row.label} (${brief(ctx.unavailable)})`);
      continue;
    }
    const refused = row.autoRefusal?.(ctx);
    if (refused) {
      passed.push(`not ${row.label}: ${refused}`);
      continue;
    }
    return bind(row, ctx, `auto: ${[...passed, row.says(ctx, true)].filter(Boolean).join("; ")}`);
  }
  throw new BackendUnavailableError("auto", `--backend auto: ${passed.join("; ")}`);
}

/** The context of one row, opened as `--backend <name>` would be: for tools tied to one backend. */
export async function openRow<Ctx, Step extends CompiledStep, Name extends string>(
  row: BackendRow<Ctx, Step, Name>,
): Promise<Ctx> {
  const ctx = await row.probe();
  if (isUnavailable(ctx)) {
    throw new BackendUnavailableError(row.name, `--backend ${row.name}: ${ctx.unavailable}`);
  }
  return ctx;
}

/** The stderr line: "backend: reference (auto: no CUDA (...); no WebGPU (...))". */
export function describeChoice(c: BackendChoice): string {
  return `backend: ${c.kind} (${c.why})`;
}
