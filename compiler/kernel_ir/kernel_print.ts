/**
 * A readable, target-free text dump of a kernel-IR Kernel (DEBUG=4, test failure messages). Every value
 * shows its type where it is declared; literals carry a type suffix unless they are i32.
 */
import { type KBinOp, type Kernel, type KExpr, type KStmt, type KStorage, laneType } from "./ir.ts";

export function printKernel(k: Kernel): string {
  const out: string[] = [
    `kernel ${k.name} (${k.kind}): ${k.workgroups} workgroups x ${k.workgroupSize} threads` +
    (k.usesF16 ? ", f16" : ""),
  ];
  for (const a of k.about) out.push(`  # ${a}`);
  k.bindings.forEach((b, i) => {
    const vec = b.vector ? ` as ${b.elements / b.vector} x vec${b.vector}` : "";
    out.push(`  bind ${i} ${b.name}: ${b.t}[${b.elements}]${vec} ${b.access} <- buffer ${b.buffer}`);
  });
  for (const s of k.shared) out.push(`  shared ${s.name}: ${s.t}[${s.size}]`);
  printBody(k.body, 1, out);
  return out.join("\n") + "\n";
}

const SUFFIX: Record<KStorage, string> = { f32: "f", f16: "h", bf16: "bf", i32: "", u32: "u", bool: "" };

/** Each binary op's infix symbol; null for those printed as calls (`max(a, b)`). */
const INFIX: Record<KBinOp, string | null> = {
  add: "+",
  sub: "-",
  mul: "*",
  div: "/",
  mod: "%",
  and: "&&",
  or: "||",
  eq: "==",
  ne: "!=",
  lt: "<",
  le: "<=",
  gt: ">",
  ge: ">=",
  max: null,
  min: null,
};

// Nested infix operands are always parenthesized: a dump should never make the reader recall precedence.
const operandOf = (x: KExpr): string => (x.k === "bin" && INFIX[x.op] ? `(${printExpr(x)})` : printExpr(x));

export function printExpr(e: KExpr): string {
  switch (e.k) {
    case "lit":
      return e.t === "bool"
        ? String(Boolean(e.v))
        : `${Object.is(e.v, -0) ? "-0" : e.v}${SUFFIX[laneType(e.t)]}`;
    case "ref":
      return e.name;
    case "id":
      return e.which;
    case "load":
      return `${e.buf}[${printExpr(e.index)}]`;
    case "sload":
      return `${e.arr}[${printExpr(e.index)}]`;
    case "un":
      // Every unary op prints as a call of its name (K_UNARY's key), so a new op needs no row here.
      return `${e.op}(${printExpr(e.a)})`;
    case "bin":
      return INFIX[e.op]
        ? `${operandOf(e.a)} ${INFIX[e.op]} ${operandOf(e.b)}`
        : `${e.op}(${printExpr(e.a)}, ${printExpr(e.b)})`;
    case "select":
      return `select(${printExpr(e.cond)}, ${printExpr(e.a)}, ${printExpr(e.b)})`;
    case "cast":
      return `${e.t}(${printExpr(e.a)})`;
    case "splat":
      return `splat(${printExpr(e.a)})`;
    case "vec":
      return `${e.t}(${e.parts.map(printExpr).join(", ")})`;
    case "lane":
      return `${operandOf(e.a)}.${"xyzw"[e.lane]}`;
    case "philox":
      return `philox(seed=${printExpr(e.seed)}, step=${printExpr(e.step)}, stream=${e.stream}, ` +
        `index=${printExpr(e.index)})`;
  }
}

function printBody(body: readonly KStmt[], depth: number, out: string[]): void {
  const pad = "  ".repeat(depth);
  for (const s of body) {
    switch (s.k) {
      case "let":
        out.push(`${pad}${s.mutable ? "var" : "let"} ${s.name}: ${s.t} = ${printExpr(s.init)}`);
        break;
      case "set":
        out.push(`${pad}${s.name} = ${printExpr(s.value)}`);
        break;
      case "store":
        out.push(`${pad}${s.buf}[${printExpr(s.index)}] = ${printExpr(s.value)}`);
        break;
      case "sstore":
        out.push(`${pad}${s.arr}[${printExpr(s.index)}] = ${printExpr(s.value)}`);
        break;
      case "for":
        out.push(
          `${pad}for ${s.v} = ${printExpr(s.from)}; ${s.v} < ${printExpr(s.to)}; ${s.v} += ${
            printExpr(s.step)
          } {`,
        );
        printBody(s.body, depth + 1, out);
        out.push(`${pad}}`);
        break;
      case "if":
        out.push(`${pad}if ${printExpr(s.cond)} {`);
        printBody(s.then, depth + 1, out);
        if (s.else && s.else.length) {
          out.push(`${pad}} else {`);
          printBody(s.else, depth + 1, out);
        }
        out.push(`${pad}}`);
        break;
      case "barrier":
        out.push(`${pad}barrier`);
        break;
      case "wg_reduce":
        out.push(`${pad}let ${s.out}: ${s.t} = wg_reduce_${s.op}(${printExpr(s.value)})`);
        break;
      case "comment":
        for (const line of s.text.split("\n")) out.push(`${pad}// ${line}`);
        break;
    }
  }
}
