/**
 * Loop-invariant locals declared before their loop (C emitter, after scalarize): an immutable local of a
 * loop's body whose value cannot change across iterations moves in front of the loop. The C compiler does
 * this for plain code, but not inside loops OpenMP's simd vectorizes (LAMB's bias corrections were computed
 * per sixteen parameters). Loops with barriers or workgroup reductions are left alone (what counts as
 * invariant: DESIGN.md, notes: compiler/codegen/c_hoist.ts).
 */
import type { Kernel, KExpr, KStmt } from "../kernel_ir/ir.ts";
import { forEachExpr, visitStmts } from "../kernel_ir/walk.ts";

function invariant(e: KExpr, varying: ReadonlySet<string>, written: ReadonlySet<string>): boolean {
  let ok = true;
  forEachExpr(e, (x) => {
    if (x.k === "ref" && varying.has(x.name)) ok = false;
    else if (x.k === "load" && written.has(x.buf)) ok = false;
    else if (x.k === "sload") ok = false;
    else if (x.k === "bin" && (x.op === "div" || x.op === "mod") && x.t !== "f32" && x.t !== "f16") {
      if (x.b.k !== "lit" || x.b.v === 0) ok = false;
    }
  });
  return ok;
}

function hoistIn(body: readonly KStmt[], written: ReadonlySet<string>): KStmt[] {
  const out: KStmt[] = [];
  for (const s of body) {
    if (s.k === "if") {
      out.push({
        ...s,
        then: hoistIn(s.then, written),
        ...(s.else ? { else: hoistIn(s.else, written) } : {}),
      });
      continue;
    }
    if (s.k !== "for") {
      out.push(s);
      continue;
    }
    const inner = hoistIn(s.body, written);
    let syncs = false;
    const varying = new Set<string>([s.v]);
    visitStmts(inner, (x) => {
      if (x.k === "barrier" || x.k === "wg_reduce") syncs = true;
      if (x.k === "let" || x.k === "set") varying.add(x.name);
      if (x.k === "for") varying.add(x.v);
      if (x.k === "wg_reduce") varying.add(x.out);
    });
    if (syncs) {
      out.push({ ...s, body: inner });
      continue;
    }
    const kept: KStmt[] = [];
    for (const x of inner) {
      if (x.k === "let" && !x.mutable && invariant(x.init, varying, written)) {
        out.push(x);
        varying.delete(x.name);
      } else kept.push(x);
    }
    out.push({ ...s, body: kept });
  }
  return out;
}

/** `k` with loop-invariant locals in front of their loops (see the file comment). */
export function hoistInvariants(k: Kernel): Kernel {
  const written = new Set<string>();
  visitStmts(k.body, (s) => s.k === "store" && written.add(s.buf));
  return { ...k, body: hoistIn(k.body, written) };
}
