/**
 * The IR's text form. One node per line:
 *   %3 = reduce_sum(%2) {axes: [2]} : f32[2,8,1]  # models/bert.ts:41
 *   output "loss" = %9
 *
 * Attribute values are numbers (inf, -inf and nan spelled out), booleans, JSON strings, or lists of
 * integers. `parseGraph` in parse.ts reads exactly this form back, so print -> parse -> print is stable.
 */
import { typeToString } from "./dtype.ts";
import type { Graph, Node } from "./graph.ts";
import type { AttrValue } from "./ops.ts";

export function formatNumber(v: number): string {
  if (Number.isNaN(v)) return "nan";
  if (v === Infinity) return "inf";
  if (v === -Infinity) return "-inf";
  if (Object.is(v, -0)) return "-0";
  return String(v);
}

function formatAttr(v: AttrValue): string {
  if (typeof v === "number") return formatNumber(v);
  if (typeof v === "boolean") return String(v);
  if (typeof v === "string") return JSON.stringify(v);
  return `[${v.map(formatNumber).join(", ")}]`;
}

export function printNode(n: Node): string {
  const keys = Object.keys(n.attrs);
  const attrs = keys.length ? ` {${keys.map((k) => `${k}: ${formatAttr(n.attrs[k])}`).join(", ")}}` : "";
  const loc = n.loc ? `  # ${n.loc}` : "";
  return `%${n.id} = ${n.op}(${n.inputs.map((i) => `%${i}`).join(", ")})${attrs} : ${
    typeToString(n.type)
  }${loc}`;
}

export function printGraph(g: Graph): string {
  const lines = [`graph ${JSON.stringify(g.name)} {`];
  for (const n of g.nodes) lines.push("  " + printNode(n));
  for (const [name, id] of g.outputs) lines.push(`  output ${JSON.stringify(name)} = %${id}`);
  lines.push("}");
  return lines.join("\n") + "\n";
}
