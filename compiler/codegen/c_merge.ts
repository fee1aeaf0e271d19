/**
 * Two loops of one thread over the same range merged into one (C emitter, after scalarize): a row
 * reduction with an elementwise output that does not need the reduction's result walks its inputs twice;
 * merged, each input element is read once, which on a CPU whose rows exceed the cache saves a trip to
 * memory. `for v { A } S for v { B }` becomes `for v { A B } S` where that changes nothing (the conditions:
 * DESIGN.md, notes: compiler/codegen/c_merge.ts).
 */
import type { Kernel, KExpr, KStmt } from "../kernel_ir/ir.ts";
import { forEachExpr, stmtExprs, visitExprs, visitStmts } from "../kernel_ir/walk.ts";
import { immutableLets, stride } from "./c_interchange.ts";

type For = Extract<KStmt, { k: "for" }>;

function plain(s: For): boolean {
  let ok = true;
  visitStmts(s.body, (x) => {
    if (x.k === "for" || x.k === "barrier" || x.k === "wg_reduce" || x.k === "sstore") ok = false;
  });
  visitExprs(s.body, (e) => (ok &&= e.k !== "sload"));
  return ok;
}

/** Names declared or set in `body`, bindings it loads and stores. */
function effects(body: readonly KStmt[]) {
  const declared = new Set<string>(), set = new Set<string>(), loads = new Set<string>();
  const stores = new Set<string>(), reads = new Set<string>();
  visitStmts(body, (x) => {
    if (x.k === "let") declared.add(x.name);
    if (x.k === "set") set.add(x.name);
    if (x.k === "for") declared.add(x.v);
    if (x.k === "store") stores.add(x.buf);
    for (const e of stmtExprs(x)) {
      forEachExpr(e, (y) => {
        if (y.k === "ref") reads.add(y.name);
        if (y.k === "load") loads.add(y.buf);
      });
    }
  });
  return { declared, set, loads, stores, reads };
}

function mergeable(a: For, between: readonly KStmt[], b: For, lets: ReadonlyMap<string, KExpr>): boolean {
  const same = (x: KExpr, y: KExpr) => JSON.stringify(x) === JSON.stringify(y);
  if (a.v !== b.v || !same(a.from, b.from) || !same(a.to, b.to) || !same(a.step, b.step)) return false;
  if (a.step.k !== "lit" || a.step.v !== 1 || !plain(a) || !plain(b)) return false;
  const ea = effects(a.body), eb = effects(b.body), es = effects(between);
  const local = new Set([...ea.declared, ...ea.set, ...es.declared, ...es.set]);
  if ([...eb.reads].some((n) => local.has(n))) return false;
  if ([...eb.set].some((n) => !eb.declared.has(n))) return false;
  if ([...es.stores].some((x) => eb.loads.has(x))) return false;
  if ([...eb.stores].some((x) => es.loads.has(x) || es.stores.has(x))) return false;
  // Every access of a stored binding at one index, one element per iteration.
  const stored = new Set([...ea.stores, ...eb.stores]);
  const at = new Map<string, string>();
  let ok = true;
  const access = (buf: string, index: KExpr) => {
    if (!stored.has(buf)) return;
    const key = JSON.stringify(index);
    if (at.has(buf) && at.get(buf) !== key) ok = false;
    at.set(buf, key);
    const c = stride(index, a.v, lets);
    if (!Number.isInteger(c) || c === 0) ok = false;
  };
  for (const body of [a.body, b.body]) {
    visitStmts(body, (x) => x.k === "store" && access(x.buf, x.index));
    visitExprs(body, (e) => e.k === "load" && access(e.buf, e.index));
  }
  return ok;
}

function mergeIn(body: readonly KStmt[], lets: ReadonlyMap<string, KExpr>): KStmt[] {
  const out: KStmt[] = body.map((s): KStmt => {
    if (s.k === "for") return { ...s, body: mergeIn(s.body, lets) };
    if (s.k === "if") {
      return { ...s, then: mergeIn(s.then, lets), ...(s.else ? { else: mergeIn(s.else, lets) } : {}) };
    }
    return s;
  });
  for (let i = 0; i < out.length; i++) {
    const a = out[i];
    if (a.k !== "for") continue;
    for (let j = i + 1; j < out.length; j++) {
      const b = out[j];
      if (b.k !== "for") continue;
      if (mergeable(a, out.slice(i + 1, j), b, lets)) {
        out[i] = { ...a, body: [...a.body, ...b.body] };
        out.splice(j, 1);
        i--;
      }
      break;
    }
  }
  return out;
}

/** `k` with a thread's loops over one range merged where that is sound (see the file comment). */
export function mergeLoops(k: Kernel): Kernel {
  return { ...k, body: mergeIn(k.body, immutableLets(k.body)) };
}
