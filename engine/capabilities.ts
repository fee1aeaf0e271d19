/**
 * Questions a command asks the backend table before compiling: can this backend (or this emitter target)
 * hold the precision asked for? The one wording of a refusal lives here, built from the rows' `dtypes`
 * and `lacks`, so "bf16 needs CUDA" is said the same way by every command.
 */
import type { Language } from "../compiler/targets/target.ts";
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import type { BackendRow, FloatDType } from "./backend_row.ts";
import { BACKENDS } from "./backends.ts";

/** The storage type a training precision puts activations and GEMM operands in. */
const PRECISION_DTYPE: Record<Precision, FloatDType> = { fp32: "f32", fp16: "f16", bf16: "bf16" };

/**
 * Why `row` cannot run `--precision p`, as one line naming the backends with kernels that can
 * ("--precision bf16 needs CUDA: WGSL has no bf16 type"); undefined when it can.
 */
export function precisionRefusal(row: BackendRow, p: Precision): string | undefined {
  const dtype = PRECISION_DTYPE[p];
  if (row.dtypes.includes(dtype)) return undefined;
  const able = BACKENDS.filter((r) => r.language && r.dtypes.includes(dtype)).map((r) => r.label);
  const why = row.lacks?.[dtype] ?? `the ${row.name} backend has no ${dtype}`;
  return `--precision ${p} needs ${able.join(" or ")}: ${why}`;
}

/** The row whose kernels are written in `language` (`deno task compile --target`). */
export function rowForLanguage(language: Language): BackendRow {
  const row = BACKENDS.find((r) => r.language === language);
  if (!row) throw new Error(`no backend row runs ${language}`);
  return row;
}
