/** The reference interpreter as a Backend (CPU, slow, exact). */
import type { Graph } from "../../ir/mod.ts";
import type { Backend } from "../backend.ts";
import { evaluate, type Precision } from "./interpreter.ts";

export function referenceBackend(precision: Precision = "f32"): Backend {
  return {
    name: `reference (${precision})`,
    run: (g: Graph, feeds: Record<string, ArrayLike<number>>, outputs?: string[]) =>
      Promise.resolve(evaluate(g, feeds, { precision, outputs })),
  };
}
