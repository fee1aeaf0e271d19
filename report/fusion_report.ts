/**
 * The fusion report (Markdown) and the summary figures of a compile: kernels before and after fusion by
 * kind, launches and GEMMs per step, estimated bytes moved fused vs unfused, peak memory with and without
 * buffer reuse, and why fusions were refused. Contains no timings, so it is byte-identical run to run.
 */
import type { Plan } from "../plan/plan.ts";
import type { Compiled } from "../compiler/driver/compile.ts";
import { narrowingSummary } from "../compiler/storage/storage_precision.ts";
import { bgradCovered, gemmFlops, type Measured, type PlanPrediction, predictPlan } from "./cost_model.ts";
import { DEVICE_RATES } from "../compiler/targets/h100.ts";

export interface CompileFigures {
  readonly kernels: number;
  readonly launches_per_step: number;
  readonly library_calls_per_step: number;
  readonly bytes_per_step: number;
  readonly peak_bytes: number;
}

/**
 * Device launches per step: a launch step's kernel, and a library call's epilogue kernel after its call,
 * without the column sums that library calls' bias-gradient epilogues compute (their kernels stay in the
 * plan as the calls' fallback, cost_model.ts bgradCovered).
 */
function launchesPerStep(p: Plan): number {
  const covered = bgradCovered(p), ks = p.kernels;
  return p.steps.reduce(
    (n, s) =>
      n + (s.op !== "launch" || covered.has(ks[s.kernel].name) ? 0 : ks[s.kernel].library?.epilogue ? 2 : 1),
    0,
  );
}

export function figuresOf(c: Compiled): CompileFigures {
  const p = c.plan;
  return {
    kernels: p.kernels.length,
    launches_per_step: launchesPerStep(p),
    library_calls_per_step: p.kernels.filter((k) => k.kind === "matmul").length,
    bytes_per_step: bytesMoved(p),
    peak_bytes: c.memory.bytesWithReuse,
  };
}

/**
 * The step's traffic as the cost model counts it: each launch's (a library call's operands and product, and
 * where an epilogue kernel follows, the product read back with the kernel's other traffic) and each copy
 * step's; the parameter updates after the step are not counted.
 */
export function bytesMoved(p: Plan): number {
  const rows = predictPlan(p, DEVICE_RATES[0]).rows; // bytes do not depend on the rates
  return rows.reduce((a, r) => a + (r.name === "(parameter updates)" ? 0 : r.bytes), 0);
}

/** What the storage policy (compiler/storage/storage_precision.ts) narrowed, and why other f32 results stay f32. */
function storageSection(fused: Compiled, unfused: Compiled | undefined): string[] {
  const s = fused.storage;
  const lines = ["## Activation storage", ""];
  if (s.low === "f32") {
    return [...lines, `Precision ${s.precision}: every buffer keeps its graph dtype.`, ""];
  }
  const f = narrowingSummary(fused.graph, s), u = unfused && narrowingSummary(unfused.graph, unfused.storage);
  const bytes = (x: typeof f) => `${mib(x.bytesBefore)} → ${mib(x.bytesAfter)}`;
  lines.push(
    `Precision ${s.precision}: f32 activations between kernels are stored ${s.low} (every kernel computes in`,
    "f32: loads widen, stores round).",
    "",
    ...table(u !== undefined, [
      [`buffers narrowed to ${s.low}`, u?.buffers, f.buffers],
      [`their bytes, f32 → ${s.low}`, u && bytes(u), bytes(f)],
    ]),
    "",
    "Kernel results that stay f32 (fused), by reason:",
    "",
    "| reason | buffers |",
    "|---|---:|",
  );
  for (const [why, n] of [...f.kept].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))) {
    lines.push(`| ${why} | ${n} |`);
  }
  lines.push("");
  return lines;
}

/** CUDA: how many GEMMs run as cuBLASLt calls, and why the others stay template kernels. */
function gemmSection(c: Compiled): string[] {
  if (c.gemms.length === 0) return [];
  const lib = c.gemms.filter((d) => d.library);
  const lines = [
    "## GEMMs on CUDA: cuBLASLt or the template",
    "",
    `${lib.length} of ${c.gemms.length} GEMMs per step are cuBLASLt calls (compiler/lower/gemm_library.ts); the`,
    `other ${c.gemms.length - lib.length} run as the tiled template kernel, for the reasons below`,
    "(`BERTFUSE_CUDA_GEMM=template` runs every GEMM as the template, for comparison).",
    "",
    "| GEMM | count |",
    "|---|---:|",
  ];
  const reasons = countBy(c.gemms, (d) => `${d.library ? "library" : "template"}: ${d.reason}`);
  for (const [r, n] of [...reasons].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))) {
    lines.push(`| ${r.replaceAll("|", "\\|")} | ${n} |`);
  }
  lines.push("");
  return lines;
}

function countBy<T>(xs: readonly T[], key: (x: T) => string): Map<string, number> {
  const m = new Map<string, number>();
  for (const x of xs) m.set(key(x), (m.get(key(x)) ?? 0) + 1);
  return new Map([...m].sort((a, b) => (a[0] < b[0] ? -1 : 1)));
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(2)} MiB`;

export interface ReportOptions {
  /** Sequences per step, for sequences/s (the batch size). */
  readonly sequences?: number;
  /** Measured per-kernel times on the first device's (`deno task compile --measured`). */
  readonly measured?: Measured;
}

/** The cost model's predictions for the fused plan, one per device whose target the plan has. */
export function predictionsOf(c: Compiled): PlanPrediction[] {
  const hasCuda = c.plan.language === "cuda";
  return DEVICE_RATES.filter((p) => p.target === "cuda" && hasCuda).map((p) => predictPlan(c.plan, p));
}

const us = (s: number) => (s * 1e6).toFixed(1);
const pct = (a: number, b: number) => (b > 0 ? `${(100 * a / b).toFixed(1)}%` : "-");

/** The report's row for library calls computing a bias gradient in their epilogue, if any. */
function bgradRow(p: Plan, tail: string): string[] {
  const n = p.kernels.filter((k) => k.library?.call.epilogue?.kind === "bgrad").length;
  if (n === 0) return [];
  return [
    `| bias gradients in GEMM epilogues (BGRADA/BGRADB) | ${n}; their ${
      bgradCovered(p).size
    } column-sum kernels ` +
    `kept as fallbacks, not launched |${tail}`,
  ];
}

/** Predicted (and, given timings, measured) step time on a device: totals, routes, the costliest kernels. */
function costSection(c: Compiled, pred: PlanPrediction, o: ReportOptions, measured?: Measured): string[] {
  const p = pred.device;
  const { gemm_flops, gemm_flops_library } = gemmFlops(c.plan);
  const gemms = c.plan.kernels.filter((k) => k.kind === "matmul");
  const ms = pred.seconds * 1e3;
  // What ran, measured: the predicted rows, and column sums a bias-gradient epilogue was predicted to
  // cover where they ran anyway (the call fell back without its epilogue, runtime/cuda/cuda_executor.ts).
  const measuredSum = measured
    ? [...pred.rows.map((r) => r.name), ...bgradCovered(c.plan)].reduce(
      (a, name) => a + (measured.kernels.get(name) ?? 0),
      0,
    )
    : undefined;
  const mcol = (v: string) => (measured ? ` ${v} |` : "");
  const lines = [
    `## Predicted time on ${p.name} (cost model${measured ? " and measured" : ""})`,
    "",
    "A prediction, not a measurement (report/cost_model.ts, rates in compiler/targets/h100.ts): library GEMMs",
    `at ${(p.tensorPeak * p.tensorFraction / 1e12).toFixed(0)} TFLOP/s (${p.tensorFraction} of the ${
      (p.tensorPeak / 1e12).toFixed(1)
    } TFLOP/s dense FP16/BF16 tensor-core peak), the template GEMM and other arithmetic at ${
      (p.fp32Peak * p.templateFraction / 1e12).toFixed(2)
    } TFLOP/s`,
    `(${p.templateFraction} of the ${
      (p.fp32Peak / 1e12).toFixed(0)
    } TFLOP/s FP32 CUDA-core peak: the template has no mma), memory at ${
      (p.bandwidth / 1e12).toFixed(2)
    } TB/s (datasheet ${(p.bandwidthPeak / 1e12).toFixed(2)}),`,
    `${
      us(p.launch)
    } µs per launch; each kernel costs its launch plus the larger of its arithmetic and memory times.`,
    "",
    `| | predicted |${mcol("measured")}`,
    `|---|---:|${mcol("---:")}`,
    `| step | ${ms.toFixed(3)} ms |${
      mcol(
        `${(measuredSum ?? 0).toFixed(3)} ms (sum of kernels)${
          measured?.stepMs !== undefined ? `; ${measured.stepMs.toFixed(3)} ms (step)` : ""
        }`,
      )
    }`,
  ];
  if (o.sequences) {
    const mStep = measured?.stepMs ?? measuredSum;
    lines.push(
      `| sequences/s (batch ${o.sequences}) | ${(o.sequences / (ms / 1e3)).toFixed(0)} |${
        mcol(mStep ? (o.sequences / (mStep / 1e3)).toFixed(0) : "-")
      }`,
    );
  }
  lines.push(
    `| GEMMs as library calls | ${gemms.filter((k) => k.library).length} of ${gemms.length}, ${
      pct(gemm_flops_library, gemm_flops)
    } of ${(gemm_flops / 1e9).toFixed(1)} GFLOP |${mcol("")}`,
    ...bgradRow(c.plan, mcol("")),
    "",
    "| route | launches | GFLOP | MiB moved | predicted ms | share |",
    "|---|---:|---:|---:|---:|---:|",
  );
  const routes = new Map<string, { n: number; f: number; b: number; s: number }>();
  for (const r of pred.rows) {
    const t = routes.get(r.route) ?? { n: 0, f: 0, b: 0, s: 0 };
    routes.set(r.route, { n: t.n + r.launches, f: t.f + r.flops, b: t.b + r.bytes, s: t.s + r.seconds });
  }
  for (const [route, t] of [...routes].sort((a, b) => b[1].s - a[1].s)) {
    lines.push(
      `| ${route} | ${t.n} | ${(t.f / 1e9).toFixed(2)} | ${(t.b / 2 ** 20).toFixed(1)} | ${
        (t.s * 1e3).toFixed(3)
      } | ${pct(t.s, pred.seconds)} |`,
    );
  }
  lines.push("", "The three kernels that cost most (predicted):", "");
  lines.push(`| kernel | route | bound | predicted µs | share |${mcol("measured µs")}`);
  lines.push(`|---|---|---|---:|---:|${mcol("---:")}`);
  for (const r of [...pred.rows].sort((a, b) => b.seconds - a.seconds).slice(0, 3)) {
    const m = measured?.kernels.get(r.name);
    lines.push(
      `| ${r.name} | ${r.route} | ${r.bound} | ${us(r.seconds)} | ${pct(r.seconds, pred.seconds)} |${
        mcol(m === undefined ? "-" : (m * 1e3).toFixed(1))
      }`,
    );
  }
  lines.push("");
  return lines;
}

/**
 * Rows of a table with a fused column, and an unfused one before it (with the ratio after it where a row
 * gives one) when the baseline was compiled.
 */
function table(
  withUnfused: boolean,
  rows: readonly (readonly [string, unknown, unknown, string?])[],
): string[] {
  const ratio = withUnfused && rows.some((r) => r[3] !== undefined);
  const head = withUnfused ? `| | unfused | fused |${ratio ? " fused / unfused |" : ""}` : "| | fused |";
  return [
    head,
    head.replace(/[^|]+\|/g, "---:|").replace("---:", "---"),
    ...rows.map(([label, u, f, r]) =>
      `| ${label} |${withUnfused ? ` ${u} |` : ""} ${f} |${ratio ? ` ${r} |` : ""}`
    ),
  ];
}

/** The report of a fused compile; `unfused`, when given, is the baseline its figures are compared with. */
export function fusionReport(
  title: string,
  command: string,
  fused: Compiled,
  unfused: Compiled | undefined,
  opts: ReportOptions = {},
): string {
  const f = figuresOf(fused), u = unfused && figuresOf(unfused);
  const fk = countBy(fused.plan.kernels, (k) => k.kind);
  const uk = countBy(unfused?.plan.kernels ?? [], (k) => k.kind);
  const kinds = [...new Set([...fk.keys(), ...uk.keys()])].sort();
  const ratio = (a: number, b: number) => (a / b).toFixed(3);
  const lines: string[] = [];
  lines.push(`# Fusion report: ${title}`, "", `Generated by \`${command}\`. Do not edit.`, "");
  lines.push(`Graph after simplification: ${fused.graph.nodes.length} nodes.`, "");
  lines.push("## Kernels per step", "");
  lines.push(
    ...table(u !== undefined, [
      ...kinds.map((k) => [k, uk.get(k) ?? 0, fk.get(k) ?? 0] as const),
      ["**all**", `**${u?.launches_per_step}**`, `**${f.launches_per_step}**`],
    ]).map((l) => l.replace("| | ", "| kind | ")),
  );
  const times = u && ratio(f.launches_per_step, u.launches_per_step);
  if (times) lines.push("", `Fused launches are ${times}× the unfused count.`);
  lines.push("", "## Memory traffic and footprint (estimates)", "");
  const bytes = (
    c: Compiled,
  ) => [figuresOf(c).bytes_per_step, c.memory.bytesWithReuse, c.memory.bytesWithoutReuse];
  const fb = bytes(fused), ub = unfused && bytes(unfused);
  const labels = [
    "bytes moved per step",
    "peak buffer bytes, with reuse",
    "peak buffer bytes, without reuse",
  ];
  lines.push(
    ...table(!!ub, labels.map((l, i) => [l, ub && mib(ub[i]), mib(fb[i]), ub && ratio(fb[i], ub[i])])),
  );
  lines.push(
    "",
    "Bytes moved count each kernel's unique bytes read and written (a tensor read by many threads is",
    "counted once per kernel). Peak bytes are the sum of the memory plan's slots.",
    "",
  );
  lines.push(...storageSection(fused, unfused));
  lines.push(...gemmSection(fused));
  const preds = predictionsOf(fused);
  preds.forEach((p, i) => lines.push(...costSection(fused, p, opts, i === 0 ? opts.measured : undefined)));
  lines.push("## Fusions refused, by reason", "", "| reason | count |", "|---|---:|");
  const reasons = countBy(fused.fusion.decisions.filter((d) => !d.ok), (d) => d.reason);
  for (const [r, n] of [...reasons].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))) {
    lines.push(`| ${r.replaceAll("|", "\\|")} | ${n} |`);
  }
  // Per kernel: the first device's prediction per step (all its launches) and, given timings, the measurement.
  const pred = new Map((preds[0]?.rows ?? []).map((r) => [r.name, r]));
  const m = opts.measured;
  const extra = preds[0]
    ? ` route | ${preds[0].device.name.split(" (")[0]} µs |${m ? " measured µs |" : ""}`
    : "";
  const rule = preds[0] ? `---|---:|${m ? "---:|" : ""}` : "";
  lines.push(
    "",
    "## Kernels",
    "",
    `| kernel | kind | reads | writes | MFLOP |${extra}`,
    `|---|---|---:|---:|---:|${rule}`,
  );
  for (const k of fused.plan.kernels) {
    const r = pred.get(k.name), t = m?.kernels.get(k.name);
    const cells = preds[0]
      ? ` ${r?.route ?? "-"} | ${r ? us(r.seconds) : "-"} |${
        m ? ` ${t === undefined ? "-" : (t * 1e3).toFixed(1)} |` : ""
      }`
      : "";
    lines.push(
      `| ${k.name} | ${k.kind} | ${mib(k.bytesRead)} | ${mib(k.bytesWritten)} | ${
        (k.flops / 1e6).toFixed(2)
      } |${cells}`,
    );
  }
  return lines.join("\n") + "\n";
}
