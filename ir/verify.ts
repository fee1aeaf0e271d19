/**
 * Checks the invariants every pass must keep: ids are dense and topological, each node's op, arity and
 * attributes fit the op table, its type is what the table infers from its operands, input and parameter
 * names are unique, and outputs name existing nodes. Returns every problem found, not just the first.
 */
import { sameType, typeToString } from "./dtype.ts";
import { IRError } from "./errors.ts";
import type { Graph } from "./graph.ts";
import { checkAttrs, isOpName, type OpDef, OPS } from "./ops.ts";

export function verifyGraph(g: Graph): string[] {
  const problems: string[] = [];
  const names = new Map<string, number>();
  g.nodes.forEach((n, idx) => {
    const at = `%${idx} (${n.op})`;
    if (n.id !== idx) problems.push(`${at}: id is %${n.id}, expected %${idx}`);
    if (!isOpName(n.op)) {
      problems.push(`${at}: unknown op`);
      return;
    }
    const def: OpDef = OPS[n.op];
    if (def.arity >= 0 ? n.inputs.length !== def.arity : n.inputs.length === 0) {
      problems.push(
        `${at}: expects ${def.arity >= 0 ? def.arity : "one or more"} operands, has ${n.inputs.length}`,
      );
      return;
    }
    const bad = checkAttrs(n.op, n.attrs);
    if (bad) problems.push(`${at}: ${bad}`);
    if (n.inputs.some((i) => !(i >= 0 && i < idx))) {
      problems.push(
        `${at}: operands [${n.inputs.map((i) => `%${i}`).join(", ")}] are not all defined before it`,
      );
      return;
    }
    if (!n.type.shape.every((d) => Number.isInteger(d) && d >= 0)) {
      problems.push(`${at}: bad shape ${typeToString(n.type)}`);
    }
    if (n.op === "input" || n.op === "param") {
      const name = n.attrs.name as string;
      const prev = names.get(name);
      if (prev !== undefined) problems.push(`${at}: name '${name}' is already used by %${prev}`);
      names.set(name, idx);
    }
    if (bad) return;
    try {
      const t = def.infer(n.inputs.map((i) => g.nodes[i].type), n.attrs, n.type);
      if (!sameType(t, n.type)) {
        problems.push(`${at}: type ${typeToString(n.type)} differs from the inferred ${typeToString(t)}`);
      }
    } catch (e) {
      if (!(e instanceof IRError)) throw e;
      problems.push(`${at}: ${e.message}`);
    }
  });
  for (const [name, id] of g.outputs) {
    if (!(id >= 0 && id < g.nodes.length)) problems.push(`output '${name}' refers to undefined %${id}`);
  }
  return problems;
}

/** Throws an IRError listing every problem, headed by `context` (a pass name, say). */
export function assertValidGraph(g: Graph, context = "graph"): void {
  const problems = verifyGraph(g);
  if (problems.length) {
    throw new IRError(`${context}: '${g.name}' is invalid:\n  ${problems.join("\n  ")}`);
  }
}
