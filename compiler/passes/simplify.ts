/**
 * The `simplify` pass: algebraic rewrites and constant folding from the rule table in simplify_rules.ts.
 * The pass rebuilds the graph front to back; each node is offered to the rules of its op after its operands
 * have been rebuilt (and so simplified), the first rule that returns a replacement wins, and any node a rule
 * builds goes through the same rules. Rules only look at operands, which never change once built, so one
 * sweep reaches a fixed point. `dce` removes operands left dead; source locations carry over to replacements.
 */
import {
  Graph,
  IRError,
  type NodeId,
  type OpDef,
  type OpName,
  OPS,
  sameType,
  type TensorType,
  typeToString,
} from "../../ir/mod.ts";
import type { Attrs } from "../../ir/ops.ts";
import { formatNumber } from "../../ir/print.ts";
import { copyOutputs } from "../graph/rebuild.ts";
import type { Pass, PassContext } from "../pipeline/stage_runner.ts";
import { type Rewriter, type Rule, RULES, type Site } from "./simplify_rules.ts";

export interface SimplifyResult {
  /** The input graph itself when no rule fired. */
  readonly graph: Graph;
  /** Firings per rule name, in rule-table order (rules that never fired are left out). */
  readonly fired: Map<string, number>;
}

// A rule chain longer than this is a pair of rules undoing each other; fail instead of recursing forever.
const MAX_DEPTH = 100;

export function simplifyGraph(g: Graph, rules: readonly Rule[] = RULES): SimplifyResult {
  const byOp = new Map<OpName, Rule[]>();
  for (const rule of rules) {
    for (const op of rule.ops) {
      if (!byOp.has(op)) byOp.set(op, []);
      byOp.get(op)!.push(rule);
    }
  }
  const counts = new Map<string, number>();
  const out = new Graph(g.name, g.precision);
  const consts = new Map<string, NodeId>();
  let loc: string | undefined;
  let depth = 0;
  const trail: string[] = [];

  const rewriter: Rewriter = {
    node: (id) => out.node(id),
    emit: (op, inputs, attrs = {}) => emit(op, inputs, attrs, undefined),
    constant: (value, type) => {
      const key = `${formatNumber(value)}:${typeToString(type)}`;
      let id = consts.get(key);
      if (id === undefined) {
        id = out.add("const", [], { value }, { shape: [...type.shape], dtype: type.dtype }, loc);
        consts.set(key, id);
      }
      return id;
    },
  };

  function emit(
    op: OpName,
    inputs: readonly NodeId[],
    attrs: Attrs,
    declared: TensorType | undefined,
  ): NodeId {
    const candidates = byOp.get(op);
    if (candidates) {
      const def: OpDef = OPS[op];
      const type = def.infer(inputs.map((i) => out.nodes[i].type), attrs, declared);
      const site: Site = { op, inputs, attrs, type };
      for (const rule of candidates) {
        if (++depth > MAX_DEPTH) {
          throw new IRError(
            `simplify: rules keep rewriting each other's results: ${trail.slice(-8).join(" -> ")}`,
          );
        }
        trail.push(rule.name);
        let id: NodeId | undefined;
        try {
          id = rule.rewrite(site, rewriter);
        } catch (e) {
          if (e instanceof IRError) throw new IRError(`simplify rule '${rule.name}' on ${op}: ${e.message}`);
          throw e;
        } finally {
          depth--;
          trail.pop();
        }
        if (id === undefined) continue;
        const got = out.nodes[id].type;
        if (!sameType(got, type)) {
          throw new IRError(
            `simplify rule '${rule.name}' replaced ${op} : ${typeToString(type)} with %${id} : ${
              typeToString(got)
            }`,
          );
        }
        counts.set(rule.name, (counts.get(rule.name) ?? 0) + 1);
        return id;
      }
    }
    return out.add(op, inputs, attrs, declared, loc);
  }

  const map = new Int32Array(g.nodes.length);
  for (const n of g.nodes) {
    loc = n.loc;
    // Source ops and random_uniform take their type from the node; for the rest `declared` is ignored.
    map[n.id] = emit(n.op, n.inputs.map((i) => map[i]), n.attrs, n.type);
  }
  if (counts.size === 0) return { graph: g, fired: counts };
  copyOutputs(g, out, map);
  // Report in table order, so logs read the same run to run.
  const fired = new Map<string, number>();
  for (const rule of rules) if (counts.has(rule.name)) fired.set(rule.name, counts.get(rule.name)!);
  return { graph: out, fired };
}

/** A one-line summary of rule firings: "neg_neg 3, mul_one 12". */
export function formatFirings(fired: ReadonlyMap<string, number>): string {
  return fired.size ? [...fired].map(([k, v]) => `${k} ${v}`).join(", ") : "no rule fired";
}

export const simplify: Pass = {
  name: "simplify",
  run(g: Graph, ctx: PassContext): Graph {
    const { graph, fired } = simplifyGraph(g);
    ctx.log(3, `[simplify] ${formatFirings(fired)}`);
    return graph;
  },
};
