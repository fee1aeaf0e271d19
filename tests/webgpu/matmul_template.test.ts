/**
 * The matmul template (compiler/lower/matmul_template.ts):
 * - structure, on the IR alone: tile choice, limits, barriers only in uniform control flow, epilogue
 *   strategy, errors;
 * - semantics, by a small CPU interpreter of the kernel IR that runs a workgroup's threads in lockstep
 *   between barriers and fails on a loader handed an out-of-range index, a shared-memory race or a barrier
 *   not all threads reach;
 * - numbers, on WebGPU (lavapipe in CI): tiny, ragged, batched, transposed, f16-storage and fused-epilogue
 *   cases against a CPU f64 matmul on fresh random inputs.
 */
import assert from "node:assert/strict";
import {
  add,
  bin,
  f32,
  i32,
  type KBinding,
  type Kernel,
  type KExpr,
  type KStmt,
  let_,
  load,
  lt,
  mul,
  ref,
  select,
  store,
} from "../../compiler/kernel_ir/ir.ts";
import {
  DIRECT_EPILOGUE_NODES,
  matmulKernel,
  type MatmulSpec,
  MatmulTemplateError,
  MAX_SHARED_BYTES,
  MAX_THREADS,
  nodeCount,
} from "../../compiler/lower/matmul_template.ts";
import {
  chooseTiles,
  FAT_MIN_FLOPS,
  FAT_TILES,
  MIN_WORKGROUPS,
  REGULAR_TILES,
  sharedBytesOf,
  threadsOf,
  TILE_CANDIDATES,
  usefulFraction,
} from "../../compiler/lower/matmul_tiles.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { buildCase, geluTanh, type MatmulCase } from "../../cases/matmul_cases.ts";
import { seededRandom } from "../../cases/random.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const ignore = !gpu.ctx;

// ---- a plain f32 spec over row-major buffers, for the IR-level tests ------------------------------------

function plainSpec(
  batch: number,
  m: number,
  n: number,
  k: number,
  extra: Partial<MatmulSpec> = {},
): MatmulSpec {
  const bindings: KBinding[] = [
    { name: "A", buffer: 0, t: "f32", access: "read", elements: batch * m * k },
    { name: "B", buffer: 1, t: "f32", access: "read", elements: batch * k * n },
    { name: "C", buffer: 2, t: "f32", access: "write", elements: batch * m * n },
  ];
  const at = (b: KExpr, i: KExpr, j: KExpr, rows: number, cols: number) =>
    add(mul(add(mul(b, i32(rows)), i), i32(cols)), j);
  return {
    name: `mm_${batch}x${m}x${n}x${k}`,
    about: [],
    usesF16: false,
    batch,
    m,
    n,
    k,
    bindings,
    loadA: (b, r, c) => load("A", at(b, r, c, m, k), "f32"),
    loadB: (b, r, c) => load("B", at(b, r, c, k, n), "f32"),
    epilogue: (b, r, c, acc) => [store("C", at(b, r, c, m, n), acc)],
    ...extra,
  };
}

function* walk(body: readonly KStmt[], under: KStmt[] = []): Generator<{ s: KStmt; under: KStmt[] }> {
  for (const s of body) {
    yield { s, under };
    if (s.k === "for") yield* walk(s.body, [...under, s]);
    if (s.k === "if") {
      yield* walk(s.then, [...under, s]);
      if (s.else) yield* walk(s.else, [...under, s]);
    }
  }
}

// ---- structure ----------------------------------------------------------------------------------------

Deno.test("matmul tiles: every candidate fits WebGPU's guaranteed limits", () => {
  for (const t of TILE_CANDIDATES) {
    assert.ok(threadsOf(t) <= MAX_THREADS, JSON.stringify(t));
    assert.ok(sharedBytesOf(t) <= MAX_SHARED_BYTES, JSON.stringify(t));
    assert.equal(t.tm % t.rm, 0);
    assert.equal(t.tn % t.rn, 0);
  }
});

Deno.test("matmul tiles: the choice for BERT-like and awkward shapes", () => {
  const pick = (m: number, n: number, k: number, batch = 1) => {
    const t = chooseTiles(m, n, k, batch);
    return `${t.tm}x${t.tn}x${t.tk}/${t.rm}x${t.rn}`;
  };
  // Big: the fat tile (slow to compile, fastest to run).
  assert.equal(pick(512, 512, 512), "128x128x8/16x16");
  assert.equal(pick(4096, 1024, 1024), "128x128x8/16x16");
  // BERT-tiny sizes are below FAT_MIN_FLOPS: 8×8 micro-tiles.
  assert.ok(2 * 1024 * 128 * 512 < FAT_MIN_FLOPS);
  assert.equal(pick(1024, 128, 512), "64x64x16/8x8");
  assert.equal(pick(128, 128, 64, 16), "64x64x16/8x8");
  assert.equal(pick(64, 512, 128), "64x64x16/8x8");
  // Big but n = 64: a 128×128 tile would be half padding.
  assert.equal(pick(512, 64, 512, 64), "64x64x16/8x8");
  // A weight gradient 128×128 with long K: 1 workgroup would leave cores idle.
  assert.equal(pick(128, 128, 1 << 16), "64x64x16/8x8");
  // Skinny: 40 masked positions against the vocabulary. 64×64 tiles are 62% useful but 3× faster per
  // flop than 16×16 tiles (83% useful), so they win on useful throughput.
  assert.equal(pick(40, 30522, 128), "64x64x16/8x8");
  // Tall K (the MLM head's input gradient): two 64×64 workgroups keep both CI cores busy at full speed.
  assert.equal(pick(40, 128, 30522), "64x64x16/8x8");
  // Few tokens (a test-sized batch): smaller tiles keep enough workgroups.
  assert.equal(pick(32, 128, 128), "32x32x16/4x4");
  // Deterministic and within bounds for a sweep of shapes.
  for (const m of [1, 5, 31, 64, 100, 384, 1000]) {
    for (const n of [1, 7, 64, 130, 512]) {
      for (const k of [1, 3, 64, 768]) {
        const t = chooseTiles(m, n, k, 1);
        assert.deepEqual(t, chooseTiles(m, n, k, 1));
        assert.ok(usefulFraction(t, m, n) > 0 && t.tk >= 4 && t.tk <= 16);
        const wgs = Math.ceil(m / t.tm) * Math.ceil(n / t.tn);
        // Enough workgroups whenever the smallest tile could have given them.
        if (Math.ceil(m / 16) * Math.ceil(n / 16) >= MIN_WORKGROUPS) {
          assert.ok(wgs >= MIN_WORKGROUPS, `${m}x${n}`);
        }
      }
    }
  }
});

Deno.test("matmul template: barriers only in uniform control flow; launch shape and shared arrays", () => {
  for (const [b, m, n, k] of [[1, 33, 17, 45], [4, 20, 24, 40], [1, 512, 512, 512], [3, 128, 64, 128]]) {
    for (const tiles of [undefined, ...TILE_CANDIDATES]) {
      const kern = matmulKernel(plainSpec(b, m, n, k, { tiles }));
      const t = tiles ?? chooseTiles(m, n, k, b);
      assert.equal(kern.kind, "matmul");
      assert.equal(kern.workgroupSize, threadsOf(t));
      assert.equal(kern.workgroups, b * Math.ceil(m / t.tm) * Math.ceil(n / t.tn));
      assert.ok(kern.shared.reduce((s, a) => s + 4 * a.size, 0) <= MAX_SHARED_BYTES);
      let barriers = 0;
      for (const { s, under } of walk(kern.body)) {
        if (s.k !== "barrier") continue;
        barriers++;
        for (const u of under) {
          assert.equal(u.k, "for", `barrier under ${u.k} in ${kern.name}`);
          // Loops around barriers have constant bounds: every thread runs them the same number of times.
          if (u.k === "for") assert.ok([u.from, u.to, u.step].every((e) => e.k === "lit"), `loop ${u.v}`);
        }
      }
      assert.ok(barriers >= 2);
    }
  }
});

Deno.test("matmul template: epilogue strategy by size, and the staged fallback for clashing locals", () => {
  const gelu = (unique: boolean) => {
    let calls = 0;
    return (_b: KExpr, _r: KExpr, c: KExpr, acc: KExpr): KStmt[] => {
      const x = unique ? `x${calls++}` : "x";
      let v: KExpr = ref(x, "f32");
      for (let i = 0; i < 20; i++) v = add(mul(v, f32(0.5)), load("C", c, "f32"));
      return [let_(x, acc), store("C", c, v)];
    };
  };
  const hasCs = (k: Kernel) => k.shared.some((s) => s.name === "Cs");
  const tiny = { tm: 16, tn: 16, tk: 16, rm: 2, rn: 2 }, fat = FAT_TILES;
  // A plain store runs direct from 8×8 micro-tiles; from 16×16 ones its 256 copies are too much code.
  const eight = REGULAR_TILES[0];
  assert.equal(eight.rm * eight.rn, 64);
  assert.equal(hasCs(matmulKernel(plainSpec(1, 256, 256, 64, { tiles: eight }))), false);
  assert.equal(hasCs(matmulKernel(plainSpec(1, 256, 256, 64, { tiles: fat }))), true);
  // A long epilogue: direct for 2×2 micro-tiles, staged for 8×8 ones.
  const size = nodeCount(gelu(true)(i32(0), i32(0), i32(0), f32(0)));
  assert.ok(size * 4 <= DIRECT_EPILOGUE_NODES && size * 64 > DIRECT_EPILOGUE_NODES, `${size} nodes`);
  assert.equal(hasCs(matmulKernel(plainSpec(1, 256, 256, 64, { tiles: tiny, epilogue: gelu(true) }))), false);
  assert.equal(hasCs(matmulKernel(plainSpec(1, 256, 256, 64, { tiles: eight, epilogue: gelu(true) }))), true);
  // The same local name in every call cannot share one block: staged, or an error when direct is forced.
  assert.equal(hasCs(matmulKernel(plainSpec(1, 256, 256, 64, { tiles: tiny, epilogue: gelu(false) }))), true);
  assert.throws(
    () =>
      matmulKernel(plainSpec(1, 64, 64, 64, { tiles: tiny, epilogue: gelu(false), epilogueMode: "direct" })),
    /declares the same local/,
  );
  // Staged runs the caller's epilogue once in the code.
  let calls = 0;
  const counted = plainSpec(1, 64, 64, 64, { epilogueMode: "staged" });
  const inner = counted.epilogue;
  matmulKernel({ ...counted, epilogue: (...a) => (calls++, inner(...a)) });
  assert.equal(calls, 1);
});

Deno.test("matmul template: errors name the kernel and the problem", () => {
  const bad = (
    extra: Partial<MatmulSpec>,
    re: RegExp,
    dims: [number, number, number, number] = [1, 8, 8, 8],
  ) =>
    assert.throws(() => matmulKernel(plainSpec(...dims, extra)), (e: Error) => {
      assert.ok(e instanceof MatmulTemplateError, String(e));
      assert.match(e.message, /matmul template mm_/);
      assert.match(e.message, re);
      return true;
    });
  bad({}, /m must be a positive integer, got 0/, [1, 0, 8, 8]);
  bad({}, /k must be a positive integer, got 2.5/, [1, 8, 8, 2.5]);
  bad({ tiles: { tm: 64, tn: 64, tk: 16, rm: 3, rn: 4 } }, /bad tiles/);
  bad({ tiles: { tm: 64, tn: 64, tk: 16, rm: 2, rn: 2 } }, /1024 threads \(max 256\)/);
  bad({ tiles: { tm: 128, tn: 128, tk: 32, rm: 16, rn: 16 } }, /bytes of workgroup memory \(max 16384\)/);
});

// ---- semantics, on a CPU interpreter of the kernel IR ------------------------------------------------

type Val = number | boolean;

/** Runs every workgroup of `kern`, threads in lockstep between barriers; throws on the faults it finds. */
function interpret(kern: Kernel, bufs: Record<string, Float64Array>) {
  const round = (t: string, v: number): Val =>
    t === "f32"
      ? Math.fround(v)
      : t === "f16"
      ? Math.f16round(v)
      : t === "i32"
      ? v | 0
      : t === "bool"
      ? !!v
      : v;
  for (let wg = 0; wg < kern.workgroups; wg++) {
    const shared = new Map(kern.shared.map((s) => [s.name, new Float64Array(s.size).fill(NaN)]));
    // Per shared word: the epoch (barrier count) and thread of the last write and of the last read(s).
    const meta = new Map(kern.shared.map((s) => [s.name, {
      wEpoch: new Int32Array(s.size).fill(-1),
      wBy: new Int32Array(s.size),
      rEpoch: new Int32Array(s.size).fill(-1),
      rBy: new Int32Array(s.size),
    }]));
    let epoch = 0;
    const thread = function* (lid: number): Generator<void, void, void> {
      const env = new Map<string, Val>();
      const ev = (e: KExpr): Val => {
        switch (e.k) {
          case "lit":
            return e.t === "bool" ? !!e.v : e.v;
          case "ref": {
            const v = env.get(e.name);
            if (v === undefined) throw new Error(`thread ${lid}: ${e.name} read before it is set`);
            return v;
          }
          case "id":
            return e.which === "lid" ? lid : e.which === "wg" ? wg : wg * kern.workgroupSize + lid;
          case "load": {
            const i = ev(e.index) as number;
            const buf = bufs[e.buf];
            if (!(i >= 0 && i < buf.length)) throw new Error(`thread ${lid}: ${e.buf}[${i}] out of bounds`);
            return buf[i];
          }
          case "sload": {
            const i = ev(e.index) as number;
            const m = meta.get(e.arr)!;
            if (!(i >= 0 && i < m.wEpoch.length)) throw new Error(`${e.arr}[${i}] out of bounds`);
            if (m.wEpoch[i] === epoch && m.wBy[i] !== lid) {
              throw new Error(
                `race: thread ${lid} reads ${e.arr}[${i}] written by ${m.wBy[i]} since the last barrier`,
              );
            }
            if (m.rEpoch[i] !== epoch) m.rBy[i] = lid;
            else if (m.rBy[i] !== lid) m.rBy[i] = -1;
            m.rEpoch[i] = epoch;
            return shared.get(e.arr)![i];
          }
          case "un":
            if (e.op === "tanh") return round(e.t, Math.tanh(ev(e.a) as number));
            if (e.op === "neg") return round(e.t, -(ev(e.a) as number));
            throw new Error(`unary ${e.op} not interpreted`);
          case "cast":
            return round(e.t, Number(ev(e.a)));
          case "select": {
            // Both sides are evaluated, as WGSL's select does: a masked load must still be in range.
            const a = ev(e.a), b = ev(e.b);
            return ev(e.cond) ? a : b;
          }
          case "bin": {
            const a = ev(e.a) as number, b = ev(e.b) as number;
            const t = e.a.t;
            const int = t === "i32" || t === "u32";
            const ops: Record<string, () => Val> = {
              add: () => a + b,
              sub: () => a - b,
              mul: () => (int ? Math.imul(a, b) : a * b),
              div: () => (int ? Math.trunc(a / b) : a / b),
              mod: () => a % b,
              min: () => Math.min(a, b),
              max: () => Math.max(a, b),
              and: () => !!a && !!b,
              or: () => !!a || !!b,
              eq: () => a === b,
              ne: () => a !== b,
              lt: () => a < b,
              le: () => a <= b,
              gt: () => a > b,
              ge: () => a >= b,
            };
            const v = ops[e.op]();
            return typeof v === "boolean" ? v : round(t, v);
          }
          case "philox":
            throw new Error("philox not interpreted");
          case "splat":
          case "vec":
          case "lane":
            throw new Error(`vector ${e.k} not interpreted (matmul kernels are never vectorized)`);
        }
      };
      function* run(body: readonly KStmt[]): Generator<void, void, void> {
        for (const s of body) {
          switch (s.k) {
            case "let":
            case "set":
              env.set(s.k === "let" ? s.name : s.name, ev(s.k === "let" ? s.init : s.value));
              break;
            case "store": {
              const i = ev(s.index) as number;
              const buf = bufs[s.buf];
              if (!(i >= 0 && i < buf.length)) throw new Error(`thread ${lid}: ${s.buf}[${i}] out of bounds`);
              buf[i] = ev(s.value) as number;
              break;
            }
            case "sstore": {
              const i = ev(s.index) as number;
              const m = meta.get(s.arr)!;
              if (!(i >= 0 && i < m.wEpoch.length)) throw new Error(`${s.arr}[${i}] out of bounds`);
              if (m.wEpoch[i] === epoch && m.wBy[i] !== lid) {
                throw new Error(`race: two threads write ${s.arr}[${i}]`);
              }
              if (m.rEpoch[i] === epoch && m.rBy[i] !== lid) {
                throw new Error(
                  `race: thread ${lid} writes ${s.arr}[${i}], read by another since the last barrier`,
                );
              }
              m.wEpoch[i] = epoch;
              m.wBy[i] = lid;
              shared.get(s.arr)![i] = ev(s.value) as number;
              break;
            }
            case "for":
              for (let v = ev(s.from) as number; v < (ev(s.to) as number); v += ev(s.step) as number) {
                env.set(s.v, v);
                yield* run(s.body);
              }
              break;
            case "if":
              if (ev(s.cond)) yield* run(s.then);
              else if (s.else) yield* run(s.else);
              break;
            case "barrier":
              yield;
              break;
            case "comment":
              break;
            default:
              throw new Error(`${s.k} not interpreted`);
          }
        }
      }
      yield* run(kern.body);
    };
    const threads = Array.from({ length: kern.workgroupSize }, (_, lid) => thread(lid));
    // Lockstep: every thread runs to its next barrier; all must arrive, or all must finish.
    for (;;) {
      const done = threads.map((t) => t.next().done);
      if (done.every((d) => d)) break;
      if (done.some((d) => d)) {
        throw new Error(`workgroup ${wg}: some threads finished while others wait at a barrier`);
      }
      epoch++;
    }
  }
}

/** A spec whose loaders assert that their indices are in range (through a checked load helper). */
function checkedCase(batch: number, m: number, n: number, k: number, extra: Partial<MatmulSpec> = {}) {
  const spec = plainSpec(batch, m, n, k, extra);
  const rng = seededRandom(batch * 1000003 + m * 1009 + n * 31 + k);
  const A = Float64Array.from({ length: batch * m * k }, () => Math.fround(rng.normal()));
  const B = Float64Array.from({ length: batch * k * n }, () => Math.fround(rng.normal()));
  const C = new Float64Array(batch * m * n).fill(NaN);
  // The loaders see symbolic indices; to range-check them each load also reads the one-word buffer `G`
  // at 0 when the indices are in range and at 1 otherwise, which the interpreter rejects as out of bounds.
  const within = (e: KExpr, hi: number): KExpr => bin("and", bin("ge", e, i32(0)), lt(e, i32(hi)));
  const guard = (b: KExpr, r: KExpr, c: KExpr, rows: number, cols: number): KExpr => {
    const ok = bin("and", bin("and", within(b, batch), within(r, rows)), within(c, cols));
    return load("G", select(ok, i32(0), i32(1)), "f32");
  };
  const kern = matmulKernel({
    ...spec,
    loadA: (b, r, c) => add(spec.loadA(b, r, c), guard(b, r, c, m, k)),
    loadB: (b, r, c) => add(spec.loadB(b, r, c), guard(b, r, c, k, n)),
  });
  interpret(kern, { A, B, C, G: Float64Array.from([0]) });
  let maxAbs = 0, maxErr = 0;
  for (let bb = 0; bb < batch; bb++) {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += A[(bb * m + i) * k + p] * B[(bb * k + p) * n + j];
        maxAbs = Math.max(maxAbs, Math.abs(s));
        const got = C[(bb * m + i) * n + j];
        // NaN here means an element was never stored.
        maxErr = Number.isNaN(got) ? NaN : Math.max(maxErr, Math.abs(got - s));
      }
    }
  }
  assert.ok(maxErr <= 1e-5 * maxAbs, `${kern.name}: max error ${maxErr} vs max |C| ${maxAbs}`);
}

Deno.test("matmul template (interpreted): no races, uniform barriers, in-range loads, right results", () => {
  checkedCase(1, 1, 1, 1);
  checkedCase(1, 33, 17, 45);
  checkedCase(3, 5, 9, 20, { epilogueMode: "staged" });
  checkedCase(2, 33, 17, 45, { tiles: { tm: 32, tn: 32, tk: 16, rm: 4, rn: 4 } });
  // Transposed-layout copy order (k-fast B, dim-fast A) with padding on B, ragged everywhere.
  checkedCase(1, 37, 70, 19, {
    contiguousA: "row",
    contiguousB: "row",
    tiles: { tm: 32, tn: 64, tk: 8, rm: 4, rn: 8 },
  });
  // Thread counts that do not divide the slab: the copy takes the general path with a partial last step.
  checkedCase(1, 20, 20, 20, { tiles: { tm: 24, tn: 8, tk: 4, rm: 4, rn: 4 } });
  for (const tiles of TILE_CANDIDATES) checkedCase(1, 70, 90, 21, { tiles });
});

// ---- numbers, on WebGPU -------------------------------------------------------------------------------

interface Outcome {
  got: Float32Array;
  want: Float64Array;
}

/** Runs `c` on the device with fresh random inputs and returns the result beside the f64 reference. */
async function runCase(c: MatmulCase, seed: number): Promise<Outcome> {
  const { plan } = buildCase(c);
  const ex = await WebGPUExecutor.create(gpu.ctx!, plan);
  try {
    const rng = seededRandom(seed);
    const q = c.dtype === "f16" ? Math.f16round : Math.fround;
    const { batch, m, n, k } = c;
    const A = Float64Array.from({ length: batch * m * k }, () => q(rng.normal()));
    const B = Float64Array.from({ length: batch * k * n }, () => q(rng.normal()));
    const bias = Float64Array.from({ length: n }, () => Math.fround(rng.normal()));
    ex.write("A", A);
    ex.write("B", B);
    if (c.epilogue === "bias_gelu") ex.write("bias", bias);
    const got = (await ex.run({}, ["C"])).C as Float32Array;
    const a = (bb: number, i: number, p: number) => A[c.transA ? (bb * k + p) * m + i : (bb * m + i) * k + p];
    const b = (bb: number, p: number, j: number) => B[c.transB ? (bb * n + j) * k + p : (bb * k + p) * n + j];
    const want = new Float64Array(batch * m * n);
    for (let bb = 0; bb < batch; bb++) {
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          let s = 0;
          for (let p = 0; p < k; p++) s += a(bb, i, p) * b(bb, p, j);
          want[(bb * m + i) * n + j] = c.epilogue === "bias_gelu" ? geluTanh(s + bias[j]) : s;
        }
      }
    }
    return { got, want };
  } finally {
    ex.destroy();
  }
}

/**
 * |got − want| ≤ rel·max|want| + elem·|want| per element: `rel` covers f32 accumulation, `elem` the
 * rounding of a stored f16 result.
 */
function assertClose(name: string, { got, want }: Outcome, rel: number, elem = 0) {
  assert.equal(got.length, want.length);
  const scale = want.reduce((s, v) => Math.max(s, Math.abs(v)), 0);
  let worst = 0, at = -1;
  for (let i = 0; i < want.length; i++) {
    const excess = Math.abs(got[i] - want[i]) - (rel * scale + elem * Math.abs(want[i]));
    if (!(excess <= worst)) [worst, at] = [Number.isNaN(excess) ? Infinity : excess, i];
  }
  assert.ok(at < 0, `${name}: element ${at} is ${got[at]}, want ${want[at]} (max |C| ${scale})`);
}

const F32_REL = 1e-5;

Deno.test({
  name: "matmul template (WebGPU): tiny, ragged and batched f32 vs f64",
  ignore,
  fn: async () => {
    const cases: MatmulCase[] = [
      { batch: 1, m: 1, n: 1, k: 1, dtype: "f32" },
      { batch: 1, m: 3, n: 5, k: 7, dtype: "f32" },
      { batch: 1, m: 33, n: 17, k: 45, dtype: "f32" },
      { batch: 4, m: 20, n: 24, k: 40, dtype: "f32" },
    ];
    for (const [i, c] of cases.entries()) {
      assertClose(`${c.batch}x${c.m}x${c.n}x${c.k}`, await runCase(c, 100 + i), F32_REL);
    }
  },
});

Deno.test({
  name: "matmul template (WebGPU): BERT-tiny-like 64×512×128 and its transposes through the loaders",
  ignore,
  fn: async () => {
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const c: MatmulCase = { batch: 1, m: 64, n: 512, k: 128, dtype: "f32", transA, transB };
        assertClose(`ta=${transA} tb=${transB}`, await runCase(c, 200 + 2 * +transA + +transB), F32_REL);
      }
    }
  },
});

Deno.test({
  name: "matmul template (WebGPU): every regular tile candidate on a ragged shape",
  ignore,
  fn: async () => {
    // The fat tile takes seconds to compile on lavapipe; the GELU test below runs it.
    for (const [i, tiles] of REGULAR_TILES.entries()) {
      const c: MatmulCase = { batch: 2, m: 70, n: 90, k: 21, dtype: "f32", tiles };
      assertClose(JSON.stringify(tiles), await runCase(c, 300 + i), F32_REL);
    }
  },
});

Deno.test({
  name: "matmul template (WebGPU): f16 storage (loaders cast to f32, f32 accumulation, f16 result)",
  ignore: ignore || !gpu.ctx?.hasF16,
  fn: async () => {
    const cases: MatmulCase[] = [
      { batch: 2, m: 40, n: 72, k: 56, dtype: "f16" },
      { batch: 1, m: 64, n: 96, k: 128, dtype: "f16", transB: true },
    ];
    // Inputs are exactly f16; the error is f32 accumulation plus one f16 rounding of the result.
    for (const [i, c] of cases.entries()) {
      assertClose(`f16 ${i}`, await runCase(c, 400 + i), F32_REL, 2 ** -11);
    }
  },
});

Deno.test({
  name: "matmul template (WebGPU): fused bias + GELU (tanh form) epilogue, direct and staged",
  ignore,
  fn: async () => {
    const base = { batch: 1, m: 33, n: 70, k: 50, dtype: "f32", epilogue: "bias_gelu" } as const;
    const cases: MatmulCase[] = [
      { ...base, mode: "direct" },
      { ...base, mode: "staged" },
      // Big micro-tiles stage an epilogue by themselves; a fixed local name forces staging anywhere.
      { ...base, tiles: FAT_TILES },
      { ...base, batch: 3, fixedLocalName: true },
    ];
    for (const [i, c] of cases.entries()) assertClose(`gelu ${i}`, await runCase(c, 500 + i), 2 * F32_REL);
  },
});

Deno.test({
  name: "matmul template (WebGPU): the same inputs give the same bits run to run",
  ignore,
  fn: async () => {
    const c: MatmulCase = { batch: 2, m: 65, n: 66, k: 67, dtype: "f32" };
    const first = await runCase(c, 600);
    const again = await runCase(c, 600);
    assert.deepEqual(new Uint32Array(again.got.buffer), new Uint32Array(first.got.buffer));
  },
});
