/**
 * One Philox block for the four words a statement list draws one by one (C emitter, after scalarize):
 * `let a = philox(B)`, `let b = philox(B + 1)`, ... with B a multiple of 4 are words 0-3 of the same
 * Philox block (numeric/philox.ts: counter index / 4, word index % 4), so they become one four-word draw
 * `let r: v4f32 = philox(B)` and lanes of it. Same bits, a quarter of the rounds: a dropout mask
 * regenerated in a LayerNorm's last pass drew each block four times.
 */
import type { Kernel, KExpr, KStmt } from "../kernel_ir/ir.ts";

type Philox = Extract<KExpr, { k: "philox" }>;

/** The literal offset and the other terms of an integer sum, looking through one cast at the top. */
export function sumTerms(e: KExpr): { terms: KExpr[]; k: number } {
  const terms: KExpr[] = [];
  let k = 0;
  const walk = (x: KExpr): void => {
    if (x.k === "bin" && x.op === "add") {
      walk(x.a);
      walk(x.b);
    } else if (x.k === "lit") k += x.v;
    else terms.push(x);
  };
  walk(e.k === "cast" ? e.a : e);
  return { terms, k };
}

/** A product with a literal multiple of 4 (so the sum of such terms is one). */
function timesFour(e: KExpr): boolean {
  return e.k === "bin" && e.op === "mul" &&
    ((e.a.k === "lit" && e.a.v % 4 === 0) || (e.b.k === "lit" && e.b.v % 4 === 0));
}

function rebuild(like: KExpr, terms: readonly KExpr[]): KExpr {
  const inner = like.k === "cast" ? like.a : like;
  const sum = terms.reduce((a, b) => ({ k: "bin", t: inner.t, op: "add", a, b }) as KExpr);
  return like.k === "cast" ? { ...like, a: sum } : sum;
}

function shareBlocks(body: readonly KStmt[], fresh: () => string): KStmt[] {
  const out = body.map((s): KStmt => {
    if (s.k === "for") return { ...s, body: shareBlocks(s.body, fresh) };
    if (s.k === "if") {
      return {
        ...s,
        then: shareBlocks(s.then, fresh),
        ...(s.else ? { else: shareBlocks(s.else, fresh) } : {}),
      };
    }
    return s;
  });
  // Scalar draws in lets at this level, grouped by key and block base.
  const groups = new Map<string, { at: number; k: number; p: Philox }[]>();
  out.forEach((s, at) => {
    if (s.k !== "let" || s.init.k !== "philox" || s.init.t !== "f32") return;
    const p = s.init;
    const { terms, k } = sumTerms(p.index);
    if (!terms.length || !terms.every(timesFour) || k < 0 || k > 3) return;
    const key = JSON.stringify([p.seed, p.step, p.stream, terms, p.index.k === "cast"]);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key)!.push({ at, k, p });
  });
  const before = new Map<number, KStmt>();
  for (const g of groups.values()) {
    if (new Set(g.map((d) => d.k)).size < 2) continue;
    const first = g[0];
    const name = fresh();
    const index = rebuild(first.p.index, sumTerms(first.p.index).terms);
    before.set(first.at, {
      k: "let",
      name,
      t: "v4f32",
      init: { ...first.p, t: "v4f32", index },
      mutable: false,
    });
    for (const d of g) {
      const s = out[d.at] as Extract<KStmt, { k: "let" }>;
      out[d.at] = { ...s, init: { k: "lane", t: "f32", a: { k: "ref", t: "v4f32", name }, lane: d.k } };
    }
  }
  return out.flatMap((s, i) => (before.has(i) ? [before.get(i)!, s] : [s]));
}

/** `k` with each statement list's word-by-word draws of one block drawn once (see the file comment). */
export function sharePhiloxBlocks(k: Kernel): Kernel {
  let n = 0;
  const fresh = () => `bf_block${n++}`;
  const body = shareBlocks(k.body, fresh);
  return n ? { ...k, body } : k;
}
