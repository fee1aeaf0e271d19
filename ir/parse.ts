/**
 * Reads the text form written by print.ts. Node ids in the text may be any numbers; they are renumbered
 * densely in order of appearance. Errors name the line and column.
 */
import { type DType, isDType } from "./dtype.ts";
import { IRError } from "./errors.ts";
import { Graph, type NodeId } from "./graph.ts";
import type { AttrValue } from "./ops.ts";

class Cursor {
  pos = 0;
  constructor(readonly text: string, readonly line: number) {}

  fail(msg: string): never {
    throw new IRError(`line ${this.line}, column ${this.pos + 1}: ${msg}: ${this.text.trim()}`);
  }
  skipSpace(): void {
    while (this.pos < this.text.length && /\s/.test(this.text[this.pos])) this.pos++;
  }
  peek(): string {
    this.skipSpace();
    return this.text[this.pos] ?? "";
  }
  eat(s: string): boolean {
    this.skipSpace();
    if (this.text.startsWith(s, this.pos)) {
      this.pos += s.length;
      return true;
    }
    return false;
  }
  expect(s: string): void {
    if (!this.eat(s)) this.fail(`expected '${s}'`);
  }
  match(re: RegExp, what: string): string {
    this.skipSpace();
    const m = re.exec(this.text.slice(this.pos));
    if (!m || m.index !== 0) this.fail(`expected ${what}`);
    this.pos += m[0].length;
    return m[0];
  }
  atEnd(): boolean {
    this.skipSpace();
    return this.pos >= this.text.length;
  }
  string(): string {
    const s = this.match(/"(?:[^"\\]|\\.)*"/, "a string");
    return JSON.parse(s);
  }
  number(): number {
    const s = this.match(/-?(?:inf|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)/, "a number");
    if (s === "inf") return Infinity;
    if (s === "-inf") return -Infinity;
    if (s === "nan" || s === "-nan") return NaN;
    return Number(s);
  }
  ref(ids: Map<number, NodeId>): NodeId {
    const n = Number(this.match(/%\d+/, "a node reference like %3").slice(1));
    const id = ids.get(n);
    if (id === undefined) this.fail(`%${n} is used before it is defined`);
    return id;
  }
  attrValue(): AttrValue {
    const c = this.peek();
    if (c === '"') return this.string();
    if (c === "[") {
      this.expect("[");
      const xs: number[] = [];
      if (!this.eat("]")) {
        do xs.push(this.number()); while (this.eat(","));
        this.expect("]");
      }
      return xs;
    }
    if (this.eat("true")) return true;
    if (this.eat("false")) return false;
    return this.number();
  }
}

export function parseGraph(text: string): Graph {
  const lines = text.split("\n");
  let g: Graph | undefined;
  const ids = new Map<number, NodeId>();
  let closed = false;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i];
    if (raw.trim() === "") continue;
    const c = new Cursor(raw, i + 1);
    if (closed) c.fail("text after the closing '}'");
    if (!g) {
      c.expect("graph");
      g = new Graph(c.string());
      c.expect("{");
      if (!c.atEnd()) c.fail("expected end of line");
      continue;
    }
    if (c.eat("}")) {
      closed = true;
      continue;
    }
    if (c.eat("output")) {
      const name = c.string();
      c.expect("=");
      g.setOutput(name, c.ref(ids));
      if (!c.atEnd()) c.fail("expected end of line");
      continue;
    }
    parseNodeLine(c, g, ids);
  }
  if (!g) throw new IRError("empty text: expected 'graph \"name\" {'");
  if (!closed) throw new IRError(`line ${lines.length}: missing closing '}'`);
  return g;
}

function parseNodeLine(c: Cursor, g: Graph, ids: Map<number, NodeId>): void {
  const textId = Number(c.match(/%\d+/, "a node definition like %3 = ...").slice(1));
  if (ids.has(textId)) c.fail(`%${textId} is defined twice`);
  c.expect("=");
  const op = c.match(/[a-z_][a-z0-9_]*/, "an op name");
  c.expect("(");
  const inputs: NodeId[] = [];
  if (!c.eat(")")) {
    do inputs.push(c.ref(ids)); while (c.eat(","));
    c.expect(")");
  }
  const attrs: Record<string, AttrValue> = {};
  if (c.eat("{")) {
    if (!c.eat("}")) {
      do {
        const k = c.match(/[a-z_][a-z0-9_]*/, "an attribute name");
        c.expect(":");
        attrs[k] = c.attrValue();
      } while (c.eat(","));
      c.expect("}");
    }
  }
  c.expect(":");
  const dtype = c.match(/[a-z0-9]+/, "a dtype");
  if (!isDType(dtype)) c.fail(`unknown dtype '${dtype}'`);
  c.expect("[");
  const shape: number[] = [];
  if (!c.eat("]")) {
    do shape.push(Number(c.match(/\d+/, "a dimension"))); while (c.eat(","));
    c.expect("]");
  }
  let loc: string | undefined;
  if (c.eat("#")) {
    loc = c.text.slice(c.pos).trim();
    c.pos = c.text.length;
  }
  if (!c.atEnd()) c.fail("expected end of line");
  const declared = { shape, dtype: dtype as DType };
  let id: NodeId;
  try {
    id = g.add(op, inputs, attrs, declared, loc);
  } catch (e) {
    if (e instanceof IRError) c.fail(e.message);
    throw e;
  }
  const t = g.nodes[id].type;
  if (t.dtype !== dtype || t.shape.join(",") !== shape.join(",")) {
    c.fail(
      `declared type ${dtype}[${shape.join(",")}] differs from the inferred ${t.dtype}[${t.shape.join(",")}]`,
    );
  }
  ids.set(textId, id);
}
