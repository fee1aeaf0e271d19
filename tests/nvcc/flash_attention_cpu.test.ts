/**
 * The flash-attention kernels (compiler/codegen/cuda_flash.ts) on the CPU shim (tests/util/cuda_cpu.ts,
 * which emulates mma.sync and ldmatrix with the PTX ISA's fragment layouts) against the reference
 * interpreter on fresh random inputs: BERT's attention (Q, K, V read as heads of [B, S, H, 64] rows, an
 * additive key mask, softmax, dropout from the graph's own random_uniform, P·V), forward (O and the row
 * logsumexp) and backward (dQ, dK, dV, whose reference is the graph's autodiff; both the two-kernel path and
 * the one kernel per (batch, head) of codegen/cuda_flash_backward.ts, whose planted errors must fail), at
 * sequence lengths 64 and 128. The dropout mask is checked exactly on its own (uniform probabilities and V an indicator, so each
 * output element is 0 or 1/(S·(1-p)) by the mask alone), and a few gradient elements against central
 * finite differences of the f64 reference loss. Q, K, V and dO are also read token-major from GEMM products
 * with biases added on load, as the flash stage has them read (a planted stride error must fail). The
 * kernels also compile with nvcc -arch=sm_90 without spills.
 */
import assert from "node:assert/strict";
import { ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import { dropout, logSumExp, softmax } from "../../dsl/nn.ts";
import { differentiate, GRAD_PREFIX } from "../../compiler/training_graph/autodiff.ts";
import { uniformAt } from "../../numeric/philox.ts";
import { MASK_VALUE } from "../../models/bert.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { seededRandom } from "../../cases/random.ts";
import { decodeF16, encodeF16 } from "../../numeric/half.ts";
import {
  flashBackwardDkDv,
  flashBackwardDq,
  flashCosts,
  flashForward,
  type FlashKernel,
} from "../../compiler/codegen/cuda_flash.ts";
import type { FlashAttentionSpec, FlashOperand } from "../../compiler/passes/flash_match.ts";
import { flashBackwardFused } from "../../compiler/codegen/cuda_flash_backward.ts";
import type { Graph } from "../../ir/mod.ts";
import { CXX, cxxVersion, runSourceOnCpu } from "../util/cuda_cpu.ts";
import { NVCC, NVCC_STRICT, nvccVersion } from "../util/nvcc.ts";

const D = 64;
const version = await cxxVersion();
/** Appended to each test name when the C++ compiler is missing, so the ignored list says why. */
const noCxx = version ? "" : ` (${CXX} not found)`;
const caseName = (c: Case) =>
  `B${c.batch} H${c.heads} S${c.seq} dropout ${c.p} ${c.out ?? "f32"}${c.intMask ? " i32 mask" : ""}${noCxx}`;

interface Case {
  batch: number;
  heads: number;
  seq: number;
  p: number;
  /** Type of O and of the gradients (default f32). */
  out?: "f16" | "f32";
  /** The mask as BERT's graph makes it: a 0/1 i32 input, (m - 1)·10000 on load (default: an f32 input). */
  intMask?: boolean;
}

/** BERT's layout: heads of [B, S, H, 64] rows. */
const bshd = (c: Case): FlashOperand => ({
  offset: 0,
  batch: c.seq * c.heads * D,
  head: D,
  row: c.heads * D,
});

function specOf(c: Case, stream: number): FlashAttentionSpec {
  const x = bshd(c);
  return {
    batch: c.batch,
    heads: c.heads,
    seqQ: c.seq,
    seqK: c.seq,
    scale: 1 / Math.sqrt(D),
    q: x,
    k: x,
    v: x,
    o: x,
    dO: x,
    dQ: x,
    dK: x,
    dV: x,
    mask: { offset: 0, batch: c.seq, fromInt: c.intMask ? { sub: 1, mul: -MASK_VALUE } : undefined },
    dropout: c.p > 0 ? { p: c.p, stream } : undefined,
    out: c.out ?? "f32",
  };
}

/** The attention as the unfused graph computes it (dsl/attention.ts), with loss = Σ O ∘ dO for gradients. */
function attentionGraph(c: Case): { g: Graph; stream: number } {
  const m = new ModelBuilder("flash");
  const shape = [c.batch, c.seq, c.heads, D];
  const heads = (t: Tensor) => t.permute([0, 2, 1, 3]);
  const q = heads(m.param("q", shape, "zeros"));
  const k = heads(m.param("k", shape, "zeros"));
  const v = heads(m.param("v", shape, "zeros"));
  const mask = c.intMask
    ? m.input("mask", "i32", [c.batch, c.seq]).cast("f32").sub(1).mul(-MASK_VALUE).reshape([
      c.batch,
      1,
      1,
      c.seq,
    ])
    : m.input("mask", "f32", [c.batch, 1, 1, c.seq]);
  const key = m.input("key", "u32", [2]);
  const scores = q.matmul(k, { transposeB: true }).mul(1 / Math.sqrt(D));
  const probs = dropout(softmax(scores, -1, mask), c.p, c.p > 0 ? key : undefined);
  const o = probs.matmul(v).permute([0, 2, 1, 3]);
  m.output("o", o);
  m.output("lse", logSumExp(scores.add(mask)).reshape([c.batch, c.heads, c.seq]));
  const dO = m.input("dO", "f32", shape);
  m.output("loss", o.mul(dO).sum([0, 1, 2, 3], false));
  const stream = m.graph.nodes.find((n) => n.op === "random_uniform")?.attrs.stream as number ?? 0;
  return { g: differentiate(m.graph, "loss"), stream };
}

type Feeds = Record<string, Float64Array>;

function randomFeeds(c: Case, seed: number): Feeds {
  const r = seededRandom(seed);
  const n = c.batch * c.seq * c.heads * D;
  const half = (scale: number) =>
    decodeF16(encodeF16(Float64Array.from({ length: n }, () => scale * r.normal())));
  // Some padded keys per sequence (BERT's -10000), never all of them.
  const mask = Float64Array.from(
    { length: c.batch * c.seq },
    (_, i) => (i % c.seq) > 8 && r.uniform() < 0.2 ? (c.intMask ? 0 : MASK_VALUE) : (c.intMask ? 1 : 0),
  );
  return {
    q: half(1.5),
    k: half(1.5),
    v: half(1),
    dO: half(1),
    mask,
    key: Float64Array.from([r.u32(), r.int(0, 1000)]),
  };
}

const C_TYPE: Record<string, string> = { f16: "__half", f32: "float", u32: "unsigned int", i32: "int" };

/** Runs kernels on the shim; buffers by name with their type and contents (undefined: an output). */
async function runKernels(
  kernels: readonly FlashKernel[],
  buffers: Record<string, { type: "f16" | "f32" | "u32" | "i32"; n: number; data?: ArrayLike<number> }>,
  outputs: readonly string[],
): Promise<Record<string, Float64Array>> {
  const names = Object.keys(buffers);
  const decl = names.map((b) => `static std::vector<${C_TYPE[buffers[b].type]}> buf_${b}(${buffers[b].n});`);
  const launches = kernels.map((k, i) => {
    const args = k.params.map((p) => `buf_${p}.data()`).join(", ");
    return `static void run${i}() { bf_kernel_${i}(${args}); }`;
  });
  const inputs = names.filter((b) => buffers[b].data);
  const size = (b: string) => buffers[b].n * (buffers[b].type === "f16" ? 2 : 4);
  const main = [
    ...kernels.map((k, i) => `#define bf_kernel bf_kernel_${i}\n${k.code}\n#undef bf_kernel`),
    ...decl,
    ...launches,
    "int main() {",
    ...inputs.map((b) => `  if (std::fread(buf_${b}.data(), 1, ${size(b)}, stdin) != ${size(b)}) return 2;`),
    ...kernels.map((k, i) => `  bf_launch(${k.grid[0]}u, ${k.workgroupSize}u, true, run${i});`),
    ...outputs.map((b) => `  std::fwrite(buf_${b}.data(), 1, ${size(b)}, stdout);`),
    "  const double mma = double(bf_mma_lane_calls.load());",
    "  std::fwrite(&mma, 1, 8, stdout);",
    "  return 0;",
    "}",
  ].join("\n");
  const chunks = inputs.map((b) => {
    const { type, data } = buffers[b];
    return type === "f16" ? new Uint8Array(encodeF16(data!).buffer) : new Uint8Array(
      (type === "f32"
        ? Float32Array.from(data!)
        : type === "i32"
        ? Int32Array.from(data!)
        : Uint32Array.from(data!)).buffer,
    );
  });
  const stdin = new Uint8Array(chunks.reduce((a, x) => a + x.length, 0));
  let at = 0;
  for (const x of chunks) {
    stdin.set(x, at);
    at += x.length;
  }
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-flash-" });
  try {
    const out = await runSourceOnCpu(dir, main, stdin, "-O2");
    const result: Record<string, Float64Array> = {};
    at = 0;
    for (const b of outputs) {
      const bytes = out.slice(at, at + size(b));
      at += size(b);
      result[b] = buffers[b].type === "f16"
        ? decodeF16(new Uint16Array(bytes.buffer))
        : Float64Array.from(new Float32Array(bytes.buffer));
    }
    // Lane calls of the emulated mma (32 per warp-level instruction of m16n8k16: 4,096 FLOPs).
    result.mmaFlops = Float64Array.of(new Float64Array(out.slice(at, at + 8).buffer)[0] / 32 * 4096);
    return result;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** max |got - ref| <= rtol · max |ref|. */
function close(name: string, got: ArrayLike<number>, ref: ArrayLike<number>, rtol: number) {
  assert.equal(got.length, ref.length, `${name}: length`);
  let maxRef = 0, maxErr = 0;
  for (let i = 0; i < ref.length; i++) {
    maxRef = Math.max(maxRef, Math.abs(ref[i]));
    const e = Math.abs(got[i] - ref[i]);
    if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
  }
  assert.ok(
    maxErr <= rtol * maxRef,
    `${name}: max error ${maxErr.toExponential(3)} > ${rtol} × ${maxRef.toExponential(3)}`,
  );
  if (Deno.env.get("CUDA_CPU_VERBOSE")) {
    console.log(`${name}: ${(maxErr / maxRef).toExponential(3)} of max |ref|`);
  }
}

const CASES: Case[] = [
  { batch: 2, heads: 2, seq: 64, p: 0.1 },
  { batch: 1, heads: 2, seq: 128, p: 0.1 },
  { batch: 1, heads: 1, seq: 128, p: 0 },
  { batch: 1, heads: 2, seq: 128, p: 0.1, out: "f16" },
  { batch: 2, heads: 1, seq: 64, p: 0.1, out: "f16", intMask: true },
];

function buffersOf(c: Case, f: Feeds) {
  const n = c.batch * c.seq * c.heads * D;
  return {
    q: { type: "f16" as const, n, data: f.q },
    k: { type: "f16" as const, n, data: f.k },
    v: { type: "f16" as const, n, data: f.v },
    mask: { type: c.intMask ? "i32" as const : "f32" as const, n: c.batch * c.seq, data: f.mask },
    rng: { type: "u32" as const, n: 2, data: f.key },
  };
}

for (const c of CASES) {
  Deno.test({
    name: `flash attention forward on the CPU shim vs reference: ${caseName(c)}`,
    ignore: !version,
    async fn() {
      const { g, stream } = attentionGraph(c);
      const f = randomFeeds(c, Date.now() >>> 0);
      const ref = evaluate(g, f, { precision: "f32", outputs: ["o", "lse"] });
      const n = c.batch * c.seq * c.heads * D;
      const got = await runKernels([flashForward(specOf(c, stream))], {
        ...buffersOf(c, f),
        o: { type: c.out ?? "f32", n },
        lse: { type: "f32", n: c.batch * c.heads * c.seq },
      }, ["o", "lse"]);
      // P and V meet as f16 on the tensor cores (the reference multiplies f32): ~2^-11 relative per term.
      close("O", got.o, ref.get("o")!, 1e-3);
      close("logsumexp", got.lse, ref.get("lse")!, 3e-5); // scores summed in mma order: 1.4e-5 seen
      assert.equal(
        got.mmaFlops[0],
        flashCosts(specOf(c, stream))[0].flops,
        "tensor-core FLOPs as flashCosts counts them",
      );
    },
  });
}

/** The backward kernels of `spec`: the two-kernel path or the one kernel per (batch, head). */
const backwardKernels = (spec: FlashAttentionSpec, fused: boolean) =>
  fused ? [flashBackwardFused(spec)] : [flashBackwardDq(spec), flashBackwardDkDv(spec)];

/** Their tensor-core FLOPs as flashCosts counts them. */
const backwardFlops = (spec: FlashAttentionSpec, fused: boolean) => {
  const [, dq, dkdv, one] = flashCosts(spec);
  return fused ? one.flops : dq.flops + dkdv.flops;
};

for (const c of CASES) {
  for (const fused of [false, true]) {
    Deno.test({
      name: `flash attention backward (${fused ? "one kernel" : "two"}) on the CPU shim: ${caseName(c)}`,
      ignore: !version,
      async fn() {
        const { g, stream } = attentionGraph(c);
        const f = randomFeeds(c, Date.now() >>> 0);
        const names = ["o", "lse", ...["q", "k", "v"].map((x) => GRAD_PREFIX + x)];
        const ref = evaluate(g, f, { precision: "f32", outputs: names });
        const n = c.batch * c.seq * c.heads * D;
        const spec = specOf(c, stream);
        // O as the forward stores it in fp16 training (f16), L as it stores it (f32).
        const got = await runKernels(backwardKernels(spec, fused), {
          ...buffersOf(c, f),
          o: { type: "f16", n, data: decodeF16(encodeF16(ref.get("o")!)) },
          dO: { type: "f16", n, data: f.dO },
          lse: { type: "f32", n: c.batch * c.heads * c.seq, data: ref.get("lse")! },
          dq: { type: c.out ?? "f32", n },
          dk: { type: c.out ?? "f32", n },
          dv: { type: c.out ?? "f32", n },
        }, ["dq", "dk", "dv"]);
        // dS and P meet as f16 on the tensor cores; O is read back in f16.
        close("dQ", got.dq, ref.get(GRAD_PREFIX + "q")!, 4e-3);
        close("dK", got.dk, ref.get(GRAD_PREFIX + "k")!, 4e-3);
        close("dV", got.dv, ref.get(GRAD_PREFIX + "v")!, 2e-3);
        assert.equal(
          got.mmaFlops[0],
          backwardFlops(spec, fused),
          "tensor-core FLOPs as flashCosts counts them",
        );
        if (c.seq !== 64) return;
        // A few elements against central differences of the f64 reference loss (dropout fixed by the key).
        const r = seededRandom(7);
        const loss = (feeds: Feeds) =>
          evaluate(g, feeds, { precision: "f64", outputs: ["loss"] }).get("loss")![0];
        const kernel: Record<string, Float64Array> = { q: got.dq, k: got.dk, v: got.dv };
        for (const x of ["q", "k", "v"]) {
          for (let trial = 0; trial < 3; trial++) {
            const i = r.int(0, n), h = 1e-3;
            const plus = { ...f, [x]: Float64Array.from(f[x]) },
              minus = { ...f, [x]: Float64Array.from(f[x]) };
            plus[x][i] += h;
            minus[x][i] -= h;
            const fd = (loss(plus) - loss(minus)) / (2 * h);
            const scale = Math.max(...Array.from(kernel[x], Math.abs));
            assert.ok(
              Math.abs(kernel[x][i] - fd) <= 5e-3 * scale,
              `d${x}[${i}]: kernel ${kernel[x][i]} vs finite difference ${fd} (max |d${x}| ${scale})`,
            );
          }
        }
      },
    });
  }
}

// The dropout mask exactly: Q = K = 0 and no mask make every probability 1/S; V[j, d] = 1 where
// j = d, 2 where j = d + 64, else 0, so O[i, d]·S·(1-p) = keep(i, d) + 2·keep(i, d + 64), each keep the
// Philox draw of numeric/philox.ts at probability element ((b·H + h)·S + i)·S + j.
Deno.test({
  name:
    `flash attention forward on the CPU shim: the dropout mask is the graph's, element for element${noCxx}`,
  ignore: !version,
  async fn() {
    const c: Case = { batch: 2, heads: 2, seq: 128, p: 0.25 };
    const n = c.batch * c.seq * c.heads * D;
    const v = new Float64Array(n);
    for (let b = 0; b < c.batch; b++) {
      for (let j = 0; j < c.seq; j++) {
        for (let h = 0; h < c.heads; h++) v[((b * c.seq + j) * c.heads + h) * D + (j % D)] = j < D ? 1 : 2;
      }
    }
    const seed = Date.now() >>> 0, step = 17, stream = 5;
    const spec = { ...specOf(c, stream), mask: undefined };
    const got = await runKernels([flashForward(spec)], {
      q: { type: "f16", n, data: new Float64Array(n) },
      k: { type: "f16", n, data: new Float64Array(n) },
      v: { type: "f16", n, data: v },
      rng: { type: "u32", n: 2, data: [seed, step] },
      o: { type: "f32", n },
      lse: { type: "f32", n: c.batch * c.heads * c.seq },
    }, ["o"]);
    let kept = 0;
    for (let b = 0; b < c.batch; b++) {
      for (let h = 0; h < c.heads; h++) {
        for (let i = 0; i < c.seq; i++) {
          for (let d = 0; d < D; d++) {
            const keep = (j: number) =>
              uniformAt(seed, step, stream, ((b * c.heads + h) * c.seq + i) * c.seq + j) >= c.p ? 1 : 0;
            const want = keep(d) + 2 * keep(d + D);
            kept += want;
            const o = got.o[((b * c.seq + i) * c.heads + h) * D + d] * c.seq * (1 - c.p);
            assert.ok(
              Math.abs(o - want) < 1e-2,
              `O[${b},${i},${h},${d}]·S·(1-p) = ${o}, the mask says ${want}`,
            );
          }
        }
      }
    }
    assert.ok(kept > 0 && kept < 3 * n, "the mask keeps some and drops some");
  },
});

const nvcc = await nvccVersion();

// BERT-large's shapes (batch 64, 16 heads, sequence 128; f16 results): each kernel compiles for sm_90
// without warnings and without register spills (ptxas -v).
Deno.test({
  name: `flash attention kernels compile with nvcc -arch=sm_90, no spills${nvcc ? "" : ` (no ${NVCC})`}`,
  ignore: !nvcc,
  async fn() {
    const c: Case = { batch: 64, heads: 16, seq: 128, p: 0.1 };
    // As training uses them (f16 results, mask, dropout), and the plainest variant (f32, neither).
    const specs: FlashAttentionSpec[] = [
      { ...specOf(c, 3), out: "f16" },
      // Q, K, V and dO read token-major from the projections' products, biases added on load.
      { ...tokenMajorSpec(c, 3), out: "f16" },
      { ...specOf(c, 3), mask: undefined, dropout: undefined },
    ];
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-flash-nvcc-" });
    try {
      const kernels = specs.flatMap((spec, i) =>
        [
          [`forward${i}`, flashForward(spec)],
          [`dq${i}`, flashBackwardDq(spec)],
          [`dkdv${i}`, flashBackwardDkDv(spec)],
          [`backward${i}`, flashBackwardFused(spec)],
        ] as const
      );
      for (const [name, k] of kernels) {
        const src = `${dir}/${name}.cu`;
        await Deno.writeTextFile(src, k.code);
        const out = await new Deno.Command(NVCC, {
          args: [
            ...NVCC_STRICT,
            "-Xptxas",
            "-v",
            "-c",
            src,
            "-o",
            `${dir}/${name}.o`,
          ],
          stdout: "piped",
          stderr: "piped",
        }).output();
        const log = new TextDecoder().decode(out.stderr);
        assert.ok(out.success, `${name}: ${log}`);
        const regs = log.match(/Used (\d+) registers/)?.[1];
        const spill = log.match(/(\d+) bytes spill stores/)?.[1];
        if (Deno.env.get("CUDA_CPU_VERBOSE")) {
          console.log(`${name}: ${regs} registers, ${spill} bytes spill stores`);
        }
        assert.equal(spill, "0", `${name} spills registers: ${log}`);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// Q, K and V read token-major from one fused [B·S, 3·H·64] projection product (head h of Q at column
// h·64, of K at H·64 + h·64, of V at 2·H·64 + h·64) with a bias each added on load (f32 for Q and K, f16
// for V), and dO from its own token-major [B·S, H·64] product: how the flash stage has the kernels read
// the GEMMs' products (compiler/stages/flash_operands.ts). The reference is the graph fed the biased
// heads as the graph computes them, f16(f32(product) + bias). Each buffer has slack after it, so a
// planted error in a stride still reads in bounds — and must fail the comparison.
const SLACK = 4096;

interface TokenMajor {
  spec: FlashAttentionSpec;
  buffers: Parameters<typeof runKernels>[1];
  feeds: Feeds;
}

/** The spec: Q, K, V at columns 0, H·64, 2·H·64 of [B·S, 3·H·64] rows with biases, dO [B·S, H·64]. */
function tokenMajorSpec(c: Case, stream: number): FlashAttentionSpec {
  const cols = c.heads * D, row = 3 * cols;
  const at = (offset: number, dtype: "f16" | "f32"): FlashOperand => ({
    offset,
    batch: c.seq * row,
    head: D,
    row,
    bias: { offset: 0, head: D, dtype },
  });
  return {
    ...specOf(c, stream),
    q: at(0, "f32"),
    k: at(cols, "f32"),
    v: at(2 * cols, "f16"),
    dO: { offset: 0, batch: c.seq * cols, head: D, row: cols },
  };
}

function tokenMajorCase(c: Case, stream: number, seed: number): TokenMajor {
  const r = seededRandom(seed);
  const [B, H, S] = [c.batch, c.heads, c.seq];
  const cols = H * D, row = 3 * cols, n = B * S * row + SLACK;
  const half = (k: number, scale: number) =>
    decodeF16(encodeF16(Float64Array.from({ length: k }, () => scale * r.normal())));
  const product = half(n, 1.2);
  const biases = {
    q_bias: Float64Array.from({ length: cols }, () => 0.5 * r.normal()),
    k_bias: Float64Array.from({ length: cols }, () => 0.5 * r.normal()),
    v_bias: half(cols, 0.5),
  };
  const dO = half(B * S * cols + SLACK, 1);
  // The heads as the graph computes them: [B, S, H, 64], f16(f32(product) + bias).
  const heads = (offset: number, b: Float64Array) =>
    decodeF16(encodeF16(Float64Array.from({ length: B * S * cols }, (_, i) => {
      const t = Math.floor(i / cols), col = i % cols;
      return Math.fround(product[offset + t * row + col] + b[col]);
    })));
  const base = randomFeeds(c, seed + 1);
  const feeds: Feeds = {
    ...base,
    q: heads(0, biases.q_bias),
    k: heads(cols, biases.k_bias),
    v: heads(2 * cols, biases.v_bias),
    dO: dO.slice(0, B * S * cols),
  };
  return {
    spec: tokenMajorSpec(c, stream),
    feeds,
    buffers: {
      q: { type: "f16", n, data: product },
      k: { type: "f16", n, data: product },
      v: { type: "f16", n, data: product },
      mask: { type: c.intMask ? "i32" : "f32", n: B * S, data: base.mask },
      rng: { type: "u32", n: 2, data: base.key },
      q_bias: { type: "f32", n: cols, data: biases.q_bias },
      k_bias: { type: "f32", n: cols, data: biases.k_bias },
      v_bias: { type: "f16", n: cols, data: biases.v_bias },
      dO: { type: "f16", n: dO.length, data: dO },
    },
  };
}

/** Forward and backward of `spec` on the shim (O read back as the forward wrote it, in f16). */
async function forwardBackward(c: Case, t: TokenMajor, spec: FlashAttentionSpec, fused = false) {
  const n = c.batch * c.seq * c.heads * D, rows = c.batch * c.heads * c.seq;
  const fwd = await runKernels([flashForward(spec)], {
    ...t.buffers,
    o: { type: "f16", n },
    lse: { type: "f32", n: rows },
  }, ["o", "lse"]);
  const bwd = await runKernels(backwardKernels(spec, fused), {
    ...t.buffers,
    o: { type: "f16", n, data: fwd.o },
    lse: { type: "f32", n: rows, data: fwd.lse },
    dq: { type: "f16", n },
    dk: { type: "f16", n },
    dv: { type: "f16", n },
  }, ["dq", "dk", "dv"]);
  return { ...fwd, ...bwd };
}

Deno.test({
  name:
    `flash attention on the CPU shim: Q, K, V and dO read token-major from GEMM products, biases added on load${noCxx}`,
  ignore: !version,
  async fn() {
    const c: Case = { batch: 2, heads: 2, seq: 128, p: 0.1, out: "f16", intMask: true };
    const { g, stream } = attentionGraph(c);
    const t = tokenMajorCase(c, stream, Date.now() >>> 0);
    const names = ["o", "lse", ...["q", "k", "v"].map((x) => GRAD_PREFIX + x)];
    const ref = evaluate(g, t.feeds, { precision: "f32", outputs: names });
    const check = (got: Record<string, Float64Array>) => {
      close("O", got.o, ref.get("o")!, 1e-3);
      close("logsumexp", got.lse, ref.get("lse")!, 3e-5); // scores summed in mma order: 1.4e-5 seen
      close("dQ", got.dq, ref.get(GRAD_PREFIX + "q")!, 4e-3);
      close("dK", got.dk, ref.get(GRAD_PREFIX + "k")!, 4e-3);
      close("dV", got.dv, ref.get(GRAD_PREFIX + "v")!, 2e-3);
    };
    check(await forwardBackward(c, t, t.spec));
    check(await forwardBackward(c, t, t.spec, true));
    // Planted errors: a row stride, a head stride, a bias's head stride, dO's row stride, each off by 8.
    const s = t.spec;
    const planted: [string, FlashAttentionSpec][] = [
      ["Q's row stride", { ...s, q: { ...s.q, row: s.q.row + 8 } }],
      ["K's head stride", { ...s, k: { ...s.k, head: s.k.head + 8 } }],
      ["V's bias head stride", { ...s, v: { ...s.v, bias: { ...s.v.bias!, head: 56 } } }],
      ["dO's row stride", { ...s, dO: { ...s.dO!, row: s.dO!.row + 8 } }],
    ];
    for (const [what, bad] of planted) {
      const got = await forwardBackward(c, t, bad);
      assert.throws(() => check(got), `${what} off by 8 still matched the reference`);
    }
  },
});

// The one-kernel backward's comparison can fail: planted errors in its source (dS's sign, the second key
// block skipped in the dS/dQ loop, P read without the transpose for dV, dK's and dV's second key block
// stored over the first) each break dQ, dK or dV against the reference.
Deno.test({
  name: `flash attention one-kernel backward on the CPU shim: planted errors fail the comparison${noCxx}`,
  ignore: !version,
  async fn() {
    const c: Case = { batch: 1, heads: 2, seq: 128, p: 0.1, intMask: true };
    const { g, stream } = attentionGraph(c);
    const f = randomFeeds(c, Date.now() >>> 0);
    const names = ["o", "lse", ...["q", "k", "v"].map((x) => GRAD_PREFIX + x)];
    const ref = evaluate(g, f, { precision: "f32", outputs: names });
    const n = c.batch * c.seq * c.heads * D;
    const kernel = flashBackwardFused(specOf(c, stream));
    const run = (code: string) =>
      runKernels([{ ...kernel, code }], {
        ...buffersOf(c, f),
        o: { type: "f16", n, data: decodeF16(encodeF16(ref.get("o")!)) },
        dO: { type: "f16", n, data: f.dO },
        lse: { type: "f32", n: c.batch * c.heads * c.seq, data: ref.get("lse")! },
        dq: { type: "f32", n },
        dk: { type: "f32", n },
        dv: { type: "f32", n },
      }, ["dq", "dk", "dv"]);
    const check = (got: Record<string, Float64Array>) => {
      close("dQ", got.dq, ref.get(GRAD_PREFIX + "q")!, 4e-3);
      close("dK", got.dk, ref.get(GRAD_PREFIX + "k")!, 4e-3);
      close("dV", got.dv, ref.get(GRAD_PREFIX + "v")!, 2e-3);
    };
    check(await run(kernel.code));
    const planted: [string, string, string][] = [
      ["dS's sign", "- (i < 2 ? d0 : d1)", "+ (i < 2 ? d0 : d1)"],
      ["a skipped key block", "for (int kb = 0; kb < 2; ++kb)", "for (int kb = 0; kb < 1; ++kb)"],
      ["P read untransposed", "bf_ldmatrix_x4_trans(a, ", "bf_ldmatrix_x4(a, "],
      [
        "the second key block's stores",
        "const int k0 = 64 + key * 16 + g;",
        "const int k0 = 0 + key * 16 + g;",
      ],
    ];
    for (const [what, from, to] of planted) {
      assert.ok(kernel.code.includes(from), `${what}: '${from}' is not in the kernel`);
      const got = await run(kernel.code.replaceAll(from, to));
      assert.throws(() => check(got), `${what} still matched the reference`);
    }
  },
});
