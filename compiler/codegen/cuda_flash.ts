/**
 * FlashAttention-2 style attention kernels for CUDA training (issue 16 item 3): forward and backward for
 * head dimension 64 on tensor cores (mma.sync m16n8k16, f16 operands, f32 accumulation), without storing the
 * probabilities. Emitted as CUDA C directly, not through the kernel IR: the IR has no warp-fragment
 * operations, and these kernels exist only on CUDA. Deterministic (no atomics); the caller checks
 * `flashIneligible` (the math, schedule and requirements: DESIGN.md, notes: compiler/codegen/cuda_flash.ts).
 */
import { cudaPrelude } from "./cuda_prelude.ts";
import { FLASH_HEAD_DIM, type FlashAttentionSpec, type FlashOperand } from "../passes/flash_match.ts";

/** Rows per block, per key/query tile. */
export const FLASH_ROWS = 64;
const THREADS = 128;
/** Row length of a staged 64-column tile, in halves: ldmatrix's eight row addresses in distinct banks. */
export const PAD = 72;

/** The operands that may carry a bias, and their bias parameters' names. */
const BIASED = [["q", "q_bias"], ["k", "k_bias"], ["v", "v_bias"]] as const;

export interface FlashKernel {
  readonly code: string;
  readonly grid: readonly [number, number, number];
  readonly workgroupSize: number;
  /** The kernel's parameters in order (its bindings). */
  readonly params: readonly string[];
}

/** Why the spec cannot use these kernels, or undefined when it can. */
export function flashIneligible(s: FlashAttentionSpec): string | undefined {
  // Cross-attention's index math is written but not tested: self-attention only.
  if (s.seqQ !== s.seqK) return "query and key sequence lengths differ (self-attention only)";
  if (s.seqQ % FLASH_ROWS || s.seqK % FLASH_ROWS) {
    return `sequence lengths must be multiples of ${FLASH_ROWS}`;
  }
  const ops = [s.q, s.k, s.v, s.o, s.dO, s.dQ, s.dK, s.dV].filter((x) => x !== undefined);
  for (const x of ops) {
    if ([x.offset, x.batch, x.head, x.row].some((n) => n % 8 !== 0)) {
      return "operand offsets and strides must be multiples of 8 elements";
    }
  }
  if ([s.o, s.dO, s.dQ, s.dK, s.dV].some((x) => x?.bias)) return "only Q, K and V may carry a bias";
  if ((s.batch * s.heads * s.seqQ * s.seqK) > 2 ** 32) return "more than 2^32 probabilities";
  if (s.dropout && !(s.dropout.p > 0 && s.dropout.p < 1)) return "dropout probability must be in (0, 1)";
  return undefined;
}

/** An f32 literal that rounds to Math.fround(x). */
export function f32(x: number): string {
  const s = String(Math.fround(x));
  return `${/[.eE]/.test(s) ? s : `${s}.0`}f`;
}

/** The kernels include only cuda_fp16.h, like the emitter's (NVRTC gets the toolkit's include folder). */
export const PRELUDE = (dropout: boolean, threads = THREADS) =>
  "#include <cuda_fp16.h>\n\n" + cudaPrelude({
    helpers: new Set([
      "bf_pack_half2",
      "bf_mma_m16n8k16",
      "bf_ldmatrix_x4",
      "bf_ldmatrix_x4_trans",
      ...(dropout ? ["bf_philox_block" as const] : []),
    ]),
    reductions: new Map(),
    warpWidth: 32,
    warps: threads / 32,
  });

/** `(b, h, row)`'s first element of operand x. */
export const rowAt = (name: string, x: FlashOperand, row: string) =>
  `(${name} + ${x.offset} + b * ${x.batch} + h * ${x.head} + (${row}) * ${x.row})`;

/**
 * Cooperative 16-byte copy by `threads` threads of `rows` rows × 64 halves (starting at row `row0` of
 * operand x) into `dst`; with a bias, each half widened, the bias added in f32 and rounded back (the
 * graph's f16(product + bias)).
 */
export const stageTile = (
  dst: string,
  name: string,
  x: FlashOperand,
  row0: string,
  rows = FLASH_ROWS,
  threads = THREADS,
) => {
  const load = `*reinterpret_cast<const uint4*>(${rowAt(name, x, `${row0} + r`)} + c)`;
  if (!x.bias) {
    return `  for (int i = threadIdx.x; i < ${rows * 8}; i += ${threads}) {
    const int r = i >> 3, c = (i & 7) * 8;
    *reinterpret_cast<uint4*>(&${dst}[r][c]) =
        ${load};
  }`;
  }
  const bias = `${name}_bias[${x.bias.offset} + h * ${x.bias.head} + c + j]`;
  return `  for (int i = threadIdx.x; i < ${rows * 8}; i += ${threads}) {
    const int r = i >> 3, c = (i & 7) * 8;
    uint4 w = ${load};
    __half* e = reinterpret_cast<__half*>(&w);
#pragma unroll
    for (int j = 0; j < 8; ++j) e[j] = __float2half_rn(__half2float(e[j]) + ${
    x.bias.dtype === "f16" ? `__half2float(${bias})` : bias
  });
    *reinterpret_cast<uint4*>(&${dst}[r][c]) = w;
  }`;
};

/** The bias parameters of the operands that have one, in order (q_bias, k_bias, v_bias). */
export const biasNames = (s: FlashAttentionSpec) => BIASED.filter(([x]) => s[x].bias).map(([, name]) => name);

/** Their parameter lines. */
export const biasParams = (s: FlashAttentionSpec) =>
  BIASED.filter(([x]) => s[x].bias).map(([x, name]) =>
    `\n    const ${s[x].bias!.dtype === "f16" ? "__half" : "float"}* __restrict__ ${name},`
  ).join("");

/** A 16×64 A operand (this warp's 16 rows of `src`) as four k-steps of fragments. */
export const loadA = (dst: string, src: string) =>
  `  unsigned int ${dst}[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) bf_ldmatrix_x4(${dst}[kk], &${src}[warp * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);`;

/**
 * acc[8][4] (+)= A · Bᵀ where A's fragments are `a` (16 × 64) and B's 64 rows are in shared `src`
 * ([n][k], k contiguous: K for scores, V for dP): ldmatrix without .trans, two n-tiles per call.
 */
export const mmaABt = (acc: string, a: string, src: string) =>
  `#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      unsigned int r[4];
      bf_ldmatrix_x4(r, &${src}[np * 16 + (lane & 7) + (lane >> 4) * 8][kk * 16 + ((lane >> 3) & 1) * 8]);
      const unsigned int b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      bf_mma_m16n8k16(${acc}[2 * np], ${a}[kk], b0);
      bf_mma_m16n8k16(${acc}[2 * np + 1], ${a}[kk], b1);
    }
  }`;

/**
 * acc[8][4] += P · B where P (16 × 64) is an accumulator fragment `p[8][4]` (the C layout is the A
 * layout: rows g, g+8, columns 2t, 2t+1) rounded to f16, and B's 64 rows are in shared `src` ([k][n], n
 * contiguous: V, dO, Q or K): ldmatrix .trans, two n-tiles per call.
 */
export const mmaPB = (acc: string, p: string, src: string) =>
  `#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const unsigned int pa[4] = {bf_pack_half2(${p}[2 * kk][0], ${p}[2 * kk][1]),
                                bf_pack_half2(${p}[2 * kk][2], ${p}[2 * kk][3]),
                                bf_pack_half2(${p}[2 * kk + 1][0], ${p}[2 * kk + 1][1]),
                                bf_pack_half2(${p}[2 * kk + 1][2], ${p}[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      unsigned int r[4];
      bf_ldmatrix_x4_trans(r, &${src}[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][np * 16 + (lane >> 4) * 8]);
      const unsigned int b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      bf_mma_m16n8k16(${acc}[2 * np], pa, b0);
      bf_mma_m16n8k16(${acc}[2 * np + 1], pa, b1);
    }
  }`;

export const zero = (name: string, n = 8) =>
  `  float ${name}[${n}][4];
#pragma unroll
  for (int i = 0; i < ${n}; ++i) ${name}[i][0] = ${name}[i][1] = ${name}[i][2] = ${name}[i][3] = 0.0f;`;

/** Stores acc[8][4] · factor (rows row0 and row0 + 8, columns 8·dt + 2t + {0, 1}) into operand x. */
export function storeRows(
  name: string,
  x: FlashOperand,
  acc: string,
  f0: string,
  f1: string,
  out: "f16" | "f32",
) {
  const put = (p: string, v: string) => out === "f16" ? `${p} = __float2half_rn(${v});` : `${p} = ${v};`;
  return `#pragma unroll
  for (int dt = 0; dt < 8; ++dt) {
    const int d = dt * 8 + 2 * t;
    ${put(`${rowAt(name, x, "row0")}[d]`, `${acc}[dt][0] * ${f0}`)}
    ${put(`${rowAt(name, x, "row0")}[d + 1]`, `${acc}[dt][1] * ${f0}`)}
    ${put(`${rowAt(name, x, "row0 + 8")}[d]`, `${acc}[dt][2] * ${f1}`)}
    ${put(`${rowAt(name, x, "row0 + 8")}[d + 1]`, `${acc}[dt][3] * ${f1}`)}
  }`;
}

/** The keep factor (0 or 1/(1-p)) of element `idx`'s uniform `bits` (24 high bits). */
const keepOf = (s: FlashAttentionSpec, bits: string) =>
  `(static_cast<float>((${bits}) >> 8) * (1.0f / 16777216.0f) >= ${f32(s.dropout!.p)} ? ${
    f32(1 / (1 - s.dropout!.p))
  } : 0.0f)`;

/**
 * z[8][4]: the keep factors of the thread's accumulator-layout elements, rows row0 and row0 + 8 (query
 * indices), columns key0 + 8·nt + 2t and + 1. A Philox block covers four consecutive keys of a row, held
 * by lanes t and t ^ 1: lane t draws the block of row row0 + 8·(t % 2), keeps its own two words and trades
 * the other two with its partner: each block is drawn once, not by both lanes.
 */
export const keepPairs = (s: FlashAttentionSpec, z: string, key0: string) =>
  `  float ${z}[8][4];
  {
    const int odd = t & 1;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const unsigned int idx = (static_cast<unsigned int>(bh * ${s.seqQ} + row0 + 8 * odd)) * ${s.seqK}u +
                               static_cast<unsigned int>(${key0} + nt * 8 + 4 * (t >> 1));
      const uint4 w = bf_philox_block(seed, step, ${s.dropout!.stream}u, idx);
      // Own words 2·odd and 2·odd + 1 are this lane's keys; the partner's keys are the other two.
      const unsigned int own0 = odd ? w.z : w.x, own1 = odd ? w.w : w.y;
      const unsigned int got0 = __shfl_xor_sync(0xffffffffu, odd ? w.x : w.z, 1, 32);
      const unsigned int got1 = __shfl_xor_sync(0xffffffffu, odd ? w.y : w.w, 1, 32);
      // Selects, not z[nt][2 * odd]: a runtime index would put z in local memory.
      ${z}[nt][0] = ${keepOf(s, "odd ? got0 : own0")};
      ${z}[nt][1] = ${keepOf(s, "odd ? got1 : own1")};
      ${z}[nt][2] = ${keepOf(s, "odd ? own0 : got0")};
      ${z}[nt][3] = ${keepOf(s, "odd ? own1 : got1")};
    }
  }`;

/** Thread coordinates; block `blk` of `rows` rows of (b, h); seed and step of the dropout site. */
const head = (s: FlashAttentionSpec, rows: number) =>
  `  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3, g = lane >> 2;
  const int bh = blockIdx.x / ${rows / FLASH_ROWS}, blk = blockIdx.x % ${rows / FLASH_ROWS};
  const int b = bh / ${s.heads}, h = bh % ${s.heads};${
    s.dropout ? "\n  const unsigned int seed = rng[0], step = rng[1];" : ""
  }`;

export const maskOf = (s: FlashAttentionSpec, key: string) => {
  if (!s.mask) return "";
  const m = `mask[${s.mask.offset} + b * ${s.mask.batch} + (${key})]`;
  const i = s.mask.fromInt;
  return i ? ` + (static_cast<float>(${m}) - ${f32(i.sub)}) * ${f32(i.mul)}` : ` + ${m}`;
};

/** The mask's kernel parameter line. */
export const maskParam = (s: FlashAttentionSpec) =>
  s.mask ? `\n    const ${s.mask.fromInt ? "int" : "float"}* __restrict__ mask,` : "";

/** The forward kernel: O and L. Parameters: q, k, v, [mask], [rng], o, lse. */
export function flashForward(s: FlashAttentionSpec): FlashKernel {
  const params = [
    "q",
    "k",
    "v",
    ...(s.mask ? ["mask"] : []),
    ...(s.dropout ? ["rng"] : []),
    ...biasNames(s),
    "o",
    "lse",
  ];
  const outT = s.out === "f16" ? "__half" : "float";
  const code = `${PRELUDE(!!s.dropout)}

// Flash attention forward: ${s.batch}×${s.heads} heads, ${s.seqQ} queries × ${s.seqK} keys, head dim 64${
    s.dropout ? `, dropout ${s.dropout.p} (stream ${s.dropout.stream})` : ""
  } (compiler/codegen/cuda_flash.ts).
extern "C" __global__ void __launch_bounds__(${THREADS}) bf_kernel(
    const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,${maskParam(s)}${
    s.dropout ? "\n    const unsigned int* __restrict__ rng," : ""
  }${biasParams(s)}
    ${outT}* __restrict__ o, float* __restrict__ lse) {
  __align__(16) __shared__ __half qs[${FLASH_ROWS}][${PAD}];
  __align__(16) __shared__ __half ks[${FLASH_ROWS}][${PAD}];
  __align__(16) __shared__ __half vs[${FLASH_ROWS}][${PAD}];
${head(s, s.seqQ)}
  const int row0 = blk * ${FLASH_ROWS} + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
${stageTile("qs", "q", s.q, `blk * ${FLASH_ROWS}`)}
  __syncthreads();
${loadA("qf", "qs")}
${zero("acc")}
  // -inf without math.h's INFINITY (NVRTC has no math.h).
  float m0 = __uint_as_float(0xff800000u), m1 = m0, l0 = 0.0f, l1 = 0.0f;
  for (int kb = 0; kb < ${s.seqK / FLASH_ROWS}; ++kb) {
    __syncthreads();  // every warp is done with the previous K and V tiles
${stageTile("ks", "k", s.k, `kb * ${FLASH_ROWS}`)}
${stageTile("vs", "v", s.v, `kb * ${FLASH_ROWS}`)}
    __syncthreads();
${zero("sc")}
${mmaABt("sc", "qf", "ks")}
    // Scale and mask, then the online softmax: new row maxima over the quad's 16 columns each.
    float x0 = m0, x1 = m1;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[nt][i] = sc[nt][i] * ${f32(s.scale)}${
    maskOf(s, `kb * ${FLASH_ROWS} + nt * 8 + 2 * t + (i & 1)`)
  };
      x0 = fmaxf(x0, fmaxf(sc[nt][0], sc[nt][1]));
      x1 = fmaxf(x1, fmaxf(sc[nt][2], sc[nt][3]));
    }
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1, 32));
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2, 32));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1, 32));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2, 32));
    const float a0 = expf(m0 - x0), a1 = expf(m1 - x1);  // 0 on the first tile (m = -inf)
    m0 = x0;
    m1 = x1;
    l0 *= a0;
    l1 *= a1;
#pragma unroll
    for (int dt = 0; dt < 8; ++dt) {
      acc[dt][0] *= a0;
      acc[dt][1] *= a0;
      acc[dt][2] *= a1;
      acc[dt][3] *= a1;
    }
    // Unnormalized probabilities; the row sums take them before dropout (softmax's denominator).
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      sc[nt][0] = expf(sc[nt][0] - m0);
      sc[nt][1] = expf(sc[nt][1] - m0);
      sc[nt][2] = expf(sc[nt][2] - m1);
      sc[nt][3] = expf(sc[nt][3] - m1);
      l0 += sc[nt][0] + sc[nt][1];
      l1 += sc[nt][2] + sc[nt][3];
    }
${
    s.dropout
      ? `${keepPairs(s, "z", `kb * ${FLASH_ROWS}`)}
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[nt][i] *= z[nt][i];
    }`
      : ""
  }
${mmaPB("acc", "sc", "vs")}
  }
  // Each lane summed its own 16 columns of a tile; the quad's four partial sums make the row's.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1, 32);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2, 32);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1, 32);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2, 32);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
${storeRows("o", s.o, "acc", "inv0", "inv1", s.out)}
  if (t == 0) {
    lse[bh * ${s.seqQ} + row0] = m0 + logf(l0);
    lse[bh * ${s.seqQ} + row0 + 8] = m1 + logf(l1);
  }
}
`;
  return {
    code,
    grid: [s.batch * s.heads * (s.seqQ / FLASH_ROWS), 1, 1],
    workgroupSize: THREADS,
    params,
  };
}

/**
 * D_r = Σ_d dO_rd·O_rd and L_r of the 64 query rows from `q0` into shared ds/ls: two threads per row, 32
 * columns each in increasing order, then their sum (the same order in both backward kernels).
 */
export const rowStats = (s: FlashAttentionSpec, q0: string) =>
  `  {
    const int r = threadIdx.x >> 1, c0 = (threadIdx.x & 1) * 32;
    const __half* orow = ${rowAt("o", s.o, `${q0} + r`)};
    const __half* drow = ${rowAt("dO", s.dO!, `${q0} + r`)};
    float sum = 0.0f;
    for (int d = c0; d < c0 + 32; ++d) sum += __half2float(orow[d]) * __half2float(drow[d]);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1, 32);
    if ((threadIdx.x & 1) == 0) {
      ds[r] = sum;
      ls[r] = lse[bh * ${s.seqQ} + ${q0} + r];
    }
  }`;

export const backwardParams = (s: FlashAttentionSpec, out: readonly string[]) => [
  "q",
  "k",
  "v",
  ...(s.mask ? ["mask"] : []),
  ...(s.dropout ? ["rng"] : []),
  ...biasNames(s),
  "o",
  "dO",
  "lse",
  ...out,
];

const backwardSignature = (s: FlashAttentionSpec, out: readonly string[]) => {
  const outT = s.out === "f16" ? "__half" : "float";
  return `extern "C" __global__ void __launch_bounds__(${THREADS}) bf_kernel(
    const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,${maskParam(s)}${
    s.dropout ? "\n    const unsigned int* __restrict__ rng," : ""
  }${biasParams(s)}
    const __half* __restrict__ o, const __half* __restrict__ dO, const float* __restrict__ lse,
    ${out.map((n) => `${outT}* __restrict__ ${n}`).join(", ")}) {
  __align__(16) __shared__ __half qs[${FLASH_ROWS}][${PAD}];
  __align__(16) __shared__ __half ks[${FLASH_ROWS}][${PAD}];
  __align__(16) __shared__ __half vs[${FLASH_ROWS}][${PAD}];
  __align__(16) __shared__ __half dos[${FLASH_ROWS}][${PAD}];
  __shared__ float ds[${FLASH_ROWS}], ls[${FLASH_ROWS}];`;
};

export function checkBackward(s: FlashAttentionSpec): void {
  if (!s.dO || !s.dQ || !s.dK || !s.dV) {
    throw new Error("flash attention backward: dO, dQ, dK and dV layouts needed");
  }
}

/** dQ, a block per 64 query rows looping over key tiles. Parameters: q, k, v, [mask], [rng], o, dO, lse, dq. */
export function flashBackwardDq(s: FlashAttentionSpec): FlashKernel {
  checkBackward(s);
  const code = `${PRELUDE(!!s.dropout)}

// Flash attention backward, dQ: ${s.batch}×${s.heads} heads, ${s.seqQ} queries × ${s.seqK} keys, head dim 64${
    s.dropout ? `, dropout ${s.dropout.p} (stream ${s.dropout.stream})` : ""
  } (compiler/codegen/cuda_flash.ts).
${backwardSignature(s, ["dq"])}
${head(s, s.seqQ)}
  const int row0 = blk * ${FLASH_ROWS} + warp * 16 + g;  // this thread's query rows: row0 and row0 + 8
${stageTile("qs", "q", s.q, `blk * ${FLASH_ROWS}`)}
${stageTile("dos", "dO", s.dO!, `blk * ${FLASH_ROWS}`)}
${rowStats(s, `blk * ${FLASH_ROWS}`)}
  __syncthreads();
${loadA("qf", "qs")}
${loadA("dof", "dos")}
  const float d0 = ds[warp * 16 + g], d1 = ds[warp * 16 + g + 8];
  const float l0 = ls[warp * 16 + g], l1 = ls[warp * 16 + g + 8];
${zero("dq_acc")}
  for (int kb = 0; kb < ${s.seqK / FLASH_ROWS}; ++kb) {
    __syncthreads();  // every warp is done with the previous K and V tiles
${stageTile("ks", "k", s.k, `kb * ${FLASH_ROWS}`)}
${stageTile("vs", "v", s.v, `kb * ${FLASH_ROWS}`)}
    __syncthreads();
${zero("sc")}
${mmaABt("sc", "qf", "ks")}
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sc[nt][i] = expf(sc[nt][i] * ${f32(s.scale)}${
    maskOf(s, `kb * ${FLASH_ROWS} + nt * 8 + 2 * t + (i & 1)`)
  } -
                         (i < 2 ? l0 : l1));
      }
    }
${zero("dp")}
${mmaABt("dp", "dof", "vs")}
${s.dropout ? keepPairs(s, "z", `kb * ${FLASH_ROWS}`) : ""}
    // dS = P ∘ (dP_d ∘ Z - D)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[nt][i] *= dp[nt][i]${s.dropout ? " * z[nt][i]" : ""} - (i < 2 ? d0 : d1);
    }
${mmaPB("dq_acc", "sc", "ks")}
  }
${storeRows("dq", s.dQ!, "dq_acc", f32(s.scale), f32(s.scale), s.out)}
}
`;
  return {
    code,
    grid: [s.batch * s.heads * (s.seqQ / FLASH_ROWS), 1, 1],
    workgroupSize: THREADS,
    params: backwardParams(s, ["dq"]),
  };
}

/**
 * dK and dV, a block per 64 key rows looping over query tiles (everything transposed: Sᵀ = K·Qᵀ, rows are
 * keys). Parameters: q, k, v, [mask], [rng], o, dO, lse, dk, dv.
 */
export function flashBackwardDkDv(s: FlashAttentionSpec): FlashKernel {
  checkBackward(s);
  // The keep factors of this thread's elements (queries 2t, 2t+1 of each n-tile; keys row0, row0 + 8).
  // A Philox block covers four consecutive keys, which four lanes hold (lanes 4j + t of a 16-lane half,
  // j = g % 4): lane j draws block j of the four its group needs ((query 2t + j % 2, keys of row j / 2)),
  // then a 4×4 exchange over lanes 4·(j ^ x) gives each lane word j of every block: one draw per element
  // instead of four.
  const keep = s.dropout
    ? `  float z[8][4];
    {
      const int j = g & 3;
      const unsigned int key0 = static_cast<unsigned int>(row0 - j + (j >> 1) * 8);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const unsigned int query = static_cast<unsigned int>(bh * ${s.seqQ} + qb * ${FLASH_ROWS} + nt * 8 + 2 * t + (j & 1));
        const uint4 w = bf_philox_block(seed, step, ${s.dropout.stream}u, query * ${s.seqK}u + key0);
        // Selects, not indexed arrays: a runtime index would put the words in local memory.
#define BF_WORD(n) ((n) == 0 ? w.x : (n) == 1 ? w.y : (n) == 2 ? w.z : w.w)
        const unsigned int own = BF_WORD(j);
        const unsigned int r1 = __shfl_xor_sync(0xffffffffu, BF_WORD(j ^ 1), 4, 32);
        const unsigned int r2 = __shfl_xor_sync(0xffffffffu, BF_WORD(j ^ 2), 8, 32);
        const unsigned int r3 = __shfl_xor_sync(0xffffffffu, BF_WORD(j ^ 3), 12, 32);
#undef BF_WORD
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int x = i ^ j;
          z[nt][i] = ${keepOf(s, "x == 0 ? own : x == 1 ? r1 : x == 2 ? r2 : r3")};
        }
      }
    }`
    : "";
  const code = `${PRELUDE(!!s.dropout)}

// Flash attention backward, dK and dV: ${s.batch}×${s.heads} heads, ${s.seqQ} queries × ${s.seqK} keys, head dim 64${
    s.dropout ? `, dropout ${s.dropout.p} (stream ${s.dropout.stream})` : ""
  } (compiler/codegen/cuda_flash.ts).
${backwardSignature(s, ["dk", "dv"])}
${head(s, s.seqK)}
  const int row0 = blk * ${FLASH_ROWS} + warp * 16 + g;  // this thread's keys: row0 and row0 + 8
${stageTile("ks", "k", s.k, `blk * ${FLASH_ROWS}`)}
${stageTile("vs", "v", s.v, `blk * ${FLASH_ROWS}`)}
  __syncthreads();
${loadA("kf", "ks")}
${loadA("vf", "vs")}
  const float mk0 = 0.0f${maskOf(s, "row0")}, mk1 = 0.0f${maskOf(s, "row0 + 8")};
${zero("dk_acc")}
${zero("dv_acc")}
  for (int qb = 0; qb < ${s.seqQ / FLASH_ROWS}; ++qb) {
    __syncthreads();  // every warp is done with the previous Q and dO tiles
${stageTile("qs", "q", s.q, `qb * ${FLASH_ROWS}`)}
${stageTile("dos", "dO", s.dO!, `qb * ${FLASH_ROWS}`)}
${rowStats(s, `qb * ${FLASH_ROWS}`)}
    __syncthreads();
${zero("st")}
${mmaABt("st", "kf", "qs")}
    // Pᵀ: rows are keys (mask mk), columns queries (logsumexp from ls)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        st[nt][i] = expf(st[nt][i] * ${f32(s.scale)} + (i < 2 ? mk0 : mk1) - ls[nt * 8 + 2 * t + (i & 1)]);
      }
    }
${keep}
    {
      float pd[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) pd[nt][i] = st[nt][i]${s.dropout ? " * z[nt][i]" : ""};
      }
${mmaPB("dv_acc", "pd", "dos")}
    }
${zero("dpt")}
${mmaABt("dpt", "vf", "dos")}
    // dSᵀ = Pᵀ ∘ (dP_dᵀ ∘ Zᵀ - D)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        st[nt][i] *= dpt[nt][i]${s.dropout ? " * z[nt][i]" : ""} - ds[nt * 8 + 2 * t + (i & 1)];
      }
    }
${mmaPB("dk_acc", "st", "qs")}
  }
${storeRows("dk", s.dK!, "dk_acc", f32(s.scale), f32(s.scale), s.out)}
${storeRows("dv", s.dV!, "dv_acc", "1.0f", "1.0f", s.out)}
}
`;
  return {
    code,
    grid: [s.batch * s.heads * (s.seqK / FLASH_ROWS), 1, 1],
    workgroupSize: THREADS,
    params: backwardParams(s, ["dk", "dv"]),
  };
}

/** Work and unique traffic of one launch of a flash kernel (the cost model's roofline terms). */
export interface FlashCost {
  readonly name: "forward" | "dq" | "dkdv" | "backward";
  /** Tensor-core FLOPs (2·M·N·K of every mma); the exp and Philox work on CUDA cores is not counted. */
  readonly flops: number;
  readonly bytesRead: number;
  readonly bytesWritten: number;
}

/**
 * The kernels' costs: GEMM FLOPs (forward: Q·Kᵀ and P·V; dQ: Q·Kᵀ, dO·Vᵀ, dS·K; dK/dV: K·Qᵀ, Pᵀ·dO,
 * V·dOᵀ, dSᵀ·Q: the two-kernel backward recomputes P twice; the one-kernel backward, "backward" in
 * flash_backward_fused.ts: Q·Kᵀ, dO·Vᵀ, dS·K, Pᵀ·dO, dSᵀ·Q), and each operand's bytes once (a tile re-read
 * by other blocks, or by the same block, is taken to hit L2, the traffic model's convention), without any
 * [S, S] tensor.
 */
export function flashCosts(s: FlashAttentionSpec): FlashCost[] {
  const bh = s.batch * s.heads, rows = bh * s.seqQ * FLASH_HEAD_DIM;
  const gemm = 2 * bh * s.seqQ * s.seqK * FLASH_HEAD_DIM;
  const f16 = 2 * rows, out = rows * (s.out === "f16" ? 2 : 4), lse = 4 * bh * s.seqQ;
  const bias = BIASED.reduce(
    (a, [x]) => a + (s[x].bias ? s.heads * FLASH_HEAD_DIM * (s[x].bias!.dtype === "f16" ? 2 : 4) : 0),
    0,
  );
  const side = (s.mask ? 4 * s.batch * s.seqK : 0) + (s.dropout ? 8 : 0) + bias;
  return [
    { name: "forward", flops: 2 * gemm, bytesRead: 3 * f16 + side, bytesWritten: out + lse },
    { name: "dq", flops: 3 * gemm, bytesRead: 5 * f16 + lse + side, bytesWritten: out },
    { name: "dkdv", flops: 4 * gemm, bytesRead: 5 * f16 + lse + side, bytesWritten: 2 * out },
    { name: "backward", flops: 5 * gemm, bytesRead: 5 * f16 + lse + side, bytesWritten: 3 * out },
  ];
}
