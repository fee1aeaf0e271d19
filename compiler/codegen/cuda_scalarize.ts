/**
 * CUDA legalize rule "scalarize": CUDA C has no lane-by-lane arithmetic on its vector types (float4 is a
 * struct, and the GPU has no f32 SIMD to map it to anyway), so every four-lane computation of a
 * vectorized loop kernel becomes four scalar ones. What stays a vector is what pays as one: 16-byte (8 for
 * f16) loads and stores of `vector` bindings, and the Philox block that yields four uniforms at once
 * (where a vector type may still appear: DESIGN.md, notes: compiler/codegen/cuda_scalarize.ts).
 */
import {
  isVector,
  type Kernel,
  type KExpr,
  type KStmt,
  type KType,
  type KVector,
  laneOf,
  laneType,
  ref,
} from "../kernel_ir/ir.ts";
import { mapChildren, visitExprs, visitStmts } from "../kernel_ir/walk.ts";

export class CudaScalarizeError extends Error {
  override name = "CudaScalarizeError";
}

/** The rule; kernels without vector types come back unchanged. */
export function scalarize(k: Kernel): Kernel {
  let vectors = false;
  visitStmts(k.body, (s) => (vectors ||= (s.k === "let" || s.k === "wg_reduce") && isVector(s.t)));
  visitExprs(k.body, (e) => (vectors ||= isVector(e.t)));
  if (!vectors) return k;
  for (const s of k.shared) {
    if (isVector(s.t)) throw new CudaScalarizeError(`kernel ${k.name}: shared array ${s.name} of ${s.t}`);
  }
  return { ...k, body: new Scalarizer(k).block(k.body) };
}

type Local =
  /** Kept as one vector local: lane c is `lane(ref name, c)`. */
  | { readonly kind: "vector"; readonly name: string; readonly t: KVector }
  /** Split into four scalar locals. */
  | { readonly kind: "lanes"; readonly names: readonly string[] };

class Scalarizer {
  private readonly taken = new Set<string>();
  private readonly vectorBindings = new Set<string>();
  private readonly scopes: Map<string, Local>[] = [];
  /** Statements to place before the statement being rewritten (hoisted loads, splats, Philox blocks). */
  private pre: KStmt[] = [];
  /** Expressions already hoisted for the statement being rewritten (by identity). */
  private hoisted = new Map<KExpr, KExpr>();

  constructor(private readonly k: Kernel) {
    for (const b of k.bindings) {
      this.taken.add(b.name);
      if (b.vector) this.vectorBindings.add(b.name);
    }
    for (const s of k.shared) this.taken.add(s.name);
    visitStmts(k.body, (s) => {
      if (s.k === "let") this.taken.add(s.name);
      if (s.k === "for") this.taken.add(s.v);
      if (s.k === "wg_reduce") this.taken.add(s.out);
    });
  }

  private fresh(base: string): string {
    let name = base;
    for (let n = 0; this.taken.has(name); n++) name = `${base}${n}`;
    this.taken.add(name);
    return name;
  }

  private local(name: string): Local | undefined {
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const l = this.scopes[i].get(name);
      if (l) return l;
    }
    return undefined;
  }

  private declare(name: string, l: Local): void {
    this.scopes[this.scopes.length - 1].set(name, l);
  }

  block(body: readonly KStmt[]): KStmt[] {
    this.scopes.push(new Map());
    const out: KStmt[] = [];
    for (const s of body) {
      this.pre = [];
      this.hoisted = new Map();
      const rewritten = this.stmt(s);
      out.push(...this.pre, ...rewritten);
    }
    this.scopes.pop();
    return out;
  }

  private stmt(s: KStmt): KStmt[] {
    switch (s.k) {
      case "let": {
        if (!isVector(s.t)) return [{ ...s, init: this.scalar(s.init) }];
        const keep = !s.mutable && this.isVectorSource(s.init);
        if (keep) {
          this.declare(s.name, { kind: "vector", name: s.name, t: s.t as KVector });
          return [{ ...s, init: this.vectorSource(s.init) }];
        }
        const lanes = [0, 1, 2, 3].map((c) => this.lane(s.init, c));
        const names = [0, 1, 2, 3].map((c) => this.fresh(`${s.name}_${c}`));
        this.declare(s.name, { kind: "lanes", names });
        return names.map((name, c) => ({
          k: "let",
          name,
          t: laneType(s.t),
          init: lanes[c],
          mutable: s.mutable,
        }));
      }
      case "set": {
        const l = this.local(s.name);
        if (!l) return [{ ...s, value: this.scalar(s.value) }];
        if (l.kind === "vector") throw this.fail(`set of the immutable vector local ${s.name}`);
        // All four lanes are computed before any is assigned: a lane may read another lane's old value.
        const values = [0, 1, 2, 3].map((c) => this.lane(s.value, c));
        const temps = values.map((v, c) => this.bindOnce(v, `${s.name}_new${c}`));
        return l.names.map((name, c) => ({ k: "set", name, value: temps[c] }));
      }
      case "store": {
        if (!this.vectorBindings.has(s.buf)) {
          return [{ ...s, index: this.scalar(s.index), value: this.scalar(s.value) }];
        }
        const index = this.scalar(s.index);
        const v = s.value;
        if (v.k === "ref" && this.local(v.name)?.kind === "vector") return [{ ...s, index, value: v }];
        const parts = [0, 1, 2, 3].map((c) => this.lane(v, c));
        return [{ ...s, index, value: { k: "vec", t: v.t as KVector, parts } }];
      }
      case "sstore":
        return [{ ...s, index: this.scalar(s.index), value: this.scalar(s.value) }];
      case "for": {
        const from = this.scalar(s.from), to = this.scalar(s.to), step = this.scalar(s.step);
        return [{ ...s, from, to, step, body: this.nested(s.body) }];
      }
      case "if": {
        const cond = this.scalar(s.cond);
        const then = this.nested(s.then);
        return [s.else ? { ...s, cond, then, else: this.nested(s.else) } : { ...s, cond, then }];
      }
      case "wg_reduce": {
        if (!isVector(s.t)) return [{ ...s, value: this.scalar(s.value) }];
        const names = [0, 1, 2, 3].map((c) => this.fresh(`${s.out}_${c}`));
        const values = [0, 1, 2, 3].map((c) => this.lane(s.value, c));
        this.declare(s.out, { kind: "lanes", names });
        return names.map((out, c) => ({ ...s, t: laneType(s.t), value: values[c], out }));
      }
      case "barrier":
      case "comment":
        return [s];
    }
  }

  /** A nested body; its hoisted statements stay inside it. */
  private nested(body: readonly KStmt[]): KStmt[] {
    const [pre, hoisted] = [this.pre, this.hoisted];
    const out = this.block(body);
    [this.pre, this.hoisted] = [pre, hoisted];
    return out;
  }

  private fail(msg: string): CudaScalarizeError {
    return new CudaScalarizeError(`kernel ${this.k.name}: ${msg}`);
  }

  /** A vector load of a vector binding or a four-word Philox draw: spelled as one vector operation. */
  private isVectorSource(e: KExpr): boolean {
    return (e.k === "load" && this.vectorBindings.has(e.buf)) || (e.k === "philox" && e.t === "v4f32");
  }

  private vectorSource(e: KExpr): KExpr {
    if (e.k === "load") return { ...e, index: this.scalar(e.index) };
    if (e.k === "philox") {
      return { ...e, seed: this.scalar(e.seed), step: this.scalar(e.step), index: this.scalar(e.index) };
    }
    throw this.fail(`internal: ${e.k} is not a vector source`);
  }

  /** `e` bound to a fresh local before the current statement, unless trivial. */
  private bindOnce(e: KExpr, base: string, t: KType = e.t): KExpr {
    if (e.k === "lit" || e.k === "ref" || e.k === "id") return e;
    const name = this.fresh(base);
    this.pre.push({ k: "let", name, t, init: e, mutable: false });
    return ref(name, t);
  }

  /** Memoized per statement, so the four lanes share one hoisted local. */
  private hoist(key: KExpr, make: () => KExpr, base: string): KExpr {
    const have = this.hoisted.get(key);
    if (have) return have;
    const r = this.bindOnce(make(), base);
    this.hoisted.set(key, r);
    return r;
  }

  /** A scalar expression whose sub-expressions may be vectors (read through `lane`). */
  private scalar(e: KExpr): KExpr {
    if (isVector(e.t)) throw this.fail(`a ${e.t} value where a scalar is needed (${e.k})`);
    if (e.k === "lane") return this.lane(e.a, e.lane);
    if (e.k === "splat" || e.k === "vec") throw this.fail(`internal: ${e.k} of scalar type`);
    return mapChildren(e, (x) => this.scalar(x));
  }

  /** Lane `c` of the vector expression `e`, as a scalar expression. */
  private lane(e: KExpr, c: number): KExpr {
    if (!isVector(e.t)) throw this.fail(`lane ${c} of a ${e.t} value (${e.k})`);
    const t = laneType(e.t);
    switch (e.k) {
      case "ref": {
        const l = this.local(e.name);
        if (!l) throw this.fail(`unknown vector local ${e.name}`);
        return l.kind === "vector" ? laneOf(ref(l.name, l.t), c) : ref(l.names[c], t);
      }
      case "load":
      case "philox":
        if (!this.isVectorSource(e)) throw this.fail(`a ${e.t} ${e.k} from a scalar binding`);
        return laneOf(this.hoist(e, () => this.vectorSource(e), e.k === "load" ? "ld" : "rnd"), c);
      case "splat":
        return this.hoist(e, () => this.scalar(e.a), "sp");
      case "vec":
        return this.scalar(e.parts[c]);
      case "un":
        return { k: "un", t, op: e.op, a: this.lane(e.a, c) };
      case "bin":
        return { k: "bin", t, op: e.op, a: this.lane(e.a, c), b: this.lane(e.b, c) };
      case "select": {
        const cond = isVector(e.cond.t)
          ? this.lane(e.cond, c)
          : this.hoist(e.cond, () => this.scalar(e.cond), "sel");
        return { k: "select", t, cond, a: this.lane(e.a, c), b: this.lane(e.b, c) };
      }
      case "cast":
        return { k: "cast", t, a: this.lane(e.a, c) };
      case "lit":
      case "id":
      case "sload":
      case "lane":
        throw this.fail(`a ${e.t} ${e.k} expression`);
    }
  }
}
