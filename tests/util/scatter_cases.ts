/**
 * Scatter-adds into tables of few rows, the shape of BERT's token-type embedding gradient, which GPU
 * profiles rewrite as masked column sums (compiler/passes/scatter_column_sums.ts). Each case adds updates that are
 * themselves an output (an elementwise producer the scatter kernel used to fuse and store) into a table of
 * `rows` rows; some ids fall outside [0, rows) and must be dropped. Shared by the CUDA-shim and WebGPU
 * tests.
 */
import { ModelBuilder } from "../../dsl/builder.ts";
import type { Graph } from "../../ir/mod.ts";
import type { Rng } from "../../cases/random.ts";

export interface ScatterCase {
  readonly name: string;
  readonly rows: number;
  /** The ids' shape [batch, seq]. */
  readonly tokens: readonly [number, number];
  /** Whether GPU profiles sum the tokens in parts, then the parts (compiler/passes/split_column_sums.ts). */
  readonly parts: boolean;
  readonly graph: Graph;
  /** Fills the ids, a share of them out of range. */
  readonly ids: (r: Rng) => number;
}

export const SCATTER_COLS = 96;

/** How far ids reach outside the table on each side. */
const OUT_OF_RANGE = 2;
/** Ids in [-2, rows + 2): `rows` values in range, 4 out of it (negative or past the table). */
const idsFor = (rows: number) => (r: Rng) => r.int(-OUT_OF_RANGE, rows + OUT_OF_RANGE);

function scatterGraph(rows: number, tokens: readonly number[]): Graph {
  const m = new ModelBuilder(`scatter into ${rows} rows`);
  const ids = m.input("ids", "i32", tokens);
  const a = m.input("a", "f32", [...tokens, SCATTER_COLS]);
  const b = m.input("b", "f32", [...tokens, SCATTER_COLS]);
  const upd = a.mul(b).add(a);
  m.output("upd", upd);
  m.output("table", m.scatterAdd(ids, upd, rows));
  return m.graph;
}

/**
 * The reference interpreter refuses an id outside the table, so the expected outputs come from the same
 * graph with the table widened by the ids' reach on both sides (ids shifted up by OUT_OF_RANGE): every id
 * lands in it, and the rows [OUT_OF_RANGE, OUT_OF_RANGE + rows) are the table with the others dropped.
 */
export function widenedOracle(c: ScatterCase, feeds: Record<string, Float64Array>) {
  return {
    graph: scatterGraph(c.rows + 2 * OUT_OF_RANGE, c.tokens),
    feeds: { ...feeds, ids: feeds.ids.map((v) => v + OUT_OF_RANGE) },
    /** The table's rows out of the widened one. */
    table: (wide: ArrayLike<number>) =>
      Array.from(wide).slice(OUT_OF_RANGE * SCATTER_COLS, (OUT_OF_RANGE + c.rows) * SCATTER_COLS),
  };
}

/**
 * Tables of one row, of two (BERT's token types) and of several over 2,048 tokens, which GPU profiles sum
 * in parts; and one over 256 tokens, too few for parts (column_sums.ts MIN_ROWS), summed in one pass.
 */
export function scatterCases(): ScatterCase[] {
  const shapes: [number, [number, number], boolean][] = [
    [1, [8, 256], true],
    [2, [8, 256], true],
    [5, [8, 256], true],
    [3, [4, 64], false],
  ];
  return shapes.map(([rows, tokens, parts]) => ({
    name: `scatter-add of ${tokens.join("×")} tokens into ${rows} row${rows > 1 ? "s" : ""}`,
    rows,
    tokens,
    parts,
    graph: scatterGraph(rows, tokens),
    ids: idsFor(rows),
  }));
}
