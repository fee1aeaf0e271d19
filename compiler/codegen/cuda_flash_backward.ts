/**
 * Flash attention backward as ONE kernel per (batch, head) when the whole sequence fits a block (issue 16,
 * sequence 64 or 128, head dim 64): the two-kernel backward (cuda_flash.ts, dK/dV over key blocks and dQ
 * over query blocks) reads Q, K, V, dO and O twice and recomputes P twice; this one reads each once and
 * computes P, dP and dS once, keeping P and dS in registers. Same mathematics and notation as cuda_flash.ts
 * (the schedule: DESIGN.md, notes: compiler/codegen/cuda_flash_backward.ts).
 */
import {
  backwardParams,
  biasParams,
  checkBackward,
  f32,
  FLASH_ROWS,
  flashIneligible,
  type FlashKernel,
  keepPairs,
  loadA,
  maskOf,
  maskParam,
  mmaABt,
  mmaPB,
  PAD,
  PRELUDE,
  rowAt,
  rowStats,
  stageTile,
  storeRows,
  zero,
} from "./cuda_flash.ts";
import type { FlashAttentionSpec } from "../passes/flash_match.ts";

/** The longest sequence one block holds (8 warps of 16 query rows). */
export const FUSED_MAX_SEQ = 128;

/** Why the one-kernel backward cannot run `s` (then the two-kernel path does), or undefined. */
export function fusedBackwardIneligible(s: FlashAttentionSpec): string | undefined {
  const why = flashIneligible(s);
  if (why) return why;
  if (s.seqQ > FUSED_MAX_SEQ) return `sequence ${s.seqQ} over ${FUSED_MAX_SEQ} (one block per head)`;
  return undefined;
}

/**
 * Pass 3 for one operand pair: acc = Aᵀ·B over all S queries for key block `kb`, where A's rows of the
 * block are this warp's packed registers `packed[kb]` (written to shared `xa` first) and B ([query][64],
 * operand `name`) is staged into `xb` when `stage` says so; stored ·`factor` into `dst`.
 */
function keyPass(
  s: FlashAttentionSpec,
  kb: number,
  packed: string,
  stage: string,
  dst: "dk" | "dv",
  factor: string,
): string {
  const S = s.seqQ, warps = S / 16, parts = warps / 4, tiles = 8 / parts;
  const x = dst === "dk" ? s.dK! : s.dV!;
  const put = (p: string, v: string) => s.out === "f16" ? `${p} = __float2half_rn(${v});` : `${p} = ${v};`;
  return `  {
    __syncthreads();  // every warp is done reading xa and xb
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      *reinterpret_cast<unsigned int*>(&xa[row0][nt * 8 + 2 * t]) = ${packed}[${kb}][nt][0];
      *reinterpret_cast<unsigned int*>(&xa[row0 + 8][nt * 8 + 2 * t]) = ${packed}[${kb}][nt][1];
    }
${stage}
    __syncthreads();
    // This warp's 16 keys of the block and its ${64 / parts} columns of the head dim.
    const int key = warp & 3, c0 = (warp >> 2) * ${64 / parts};
${zero("acc", tiles)}
#pragma unroll
    for (int kk = 0; kk < ${S / 16}; ++kk) {
      unsigned int a[4];  // Aᵀ's fragment: rows are keys, k runs over queries (ldmatrix .trans)
      bf_ldmatrix_x4_trans(a, &xa[kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8][key * 16 + ((lane >> 3) & 1) * 8]);
#pragma unroll
      for (int np = 0; np < ${tiles / 2}; ++np) {
        unsigned int r[4];
        bf_ldmatrix_x4_trans(r, &xb[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][c0 + np * 16 + (lane >> 4) * 8]);
        const unsigned int b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        bf_mma_m16n8k16(acc[2 * np], a, b0);
        bf_mma_m16n8k16(acc[2 * np + 1], a, b1);
      }
    }
    const int k0 = ${kb * FLASH_ROWS} + key * 16 + g;
#pragma unroll
    for (int dt = 0; dt < ${tiles}; ++dt) {
      const int d = c0 + dt * 8 + 2 * t;
      ${put(`${rowAt(dst, x, "k0")}[d]`, `acc[dt][0] * ${factor}`)}
      ${put(`${rowAt(dst, x, "k0")}[d + 1]`, `acc[dt][1] * ${factor}`)}
      ${put(`${rowAt(dst, x, "k0 + 8")}[d]`, `acc[dt][2] * ${factor}`)}
      ${put(`${rowAt(dst, x, "k0 + 8")}[d + 1]`, `acc[dt][3] * ${factor}`)}
    }
  }`;
}

/**
 * The one-kernel backward: dQ, dK and dV of one (b, h) per block. Parameters: q, k, v, [mask], [rng],
 * [biases], o, dO, lse, dq, dk, dv.
 */
export function flashBackwardFused(s: FlashAttentionSpec): FlashKernel {
  checkBackward(s);
  const why = fusedBackwardIneligible(s);
  if (why) throw new Error(`flash attention fused backward: ${why}`);
  const S = s.seqQ, threads = 2 * S, blocks = S / FLASH_ROWS;
  const outT = s.out === "f16" ? "__half" : "float";
  const scale = f32(s.scale);
  const tile = (dst: string, name: string, x: typeof s.q) => stageTile(dst, name, x, "0", S, threads);
  const passes: string[] = [];
  for (let kb = 0; kb < blocks; kb++) {
    passes.push(keyPass(s, kb, "pz", kb === 0 ? tile("xb", "dO", s.dO!) : "", "dv", "1.0f"));
  }
  for (let kb = 0; kb < blocks; kb++) {
    passes.push(keyPass(s, kb, "dsp", kb === 0 ? tile("xb", "q", s.q) : "", "dk", scale));
  }
  const code = `${PRELUDE(!!s.dropout, threads)}

// Flash attention backward in one kernel (dQ, dK, dV): ${s.batch}×${s.heads} heads, ${S} queries × ${S} keys, head dim 64${
    s.dropout ? `, dropout ${s.dropout.p} (stream ${s.dropout.stream})` : ""
  } (compiler/codegen/cuda_flash_backward.ts).
extern "C" __global__ void __launch_bounds__(${threads}) bf_kernel(
    const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,${maskParam(s)}${
    s.dropout ? "\n    const unsigned int* __restrict__ rng," : ""
  }${biasParams(s)}
    const __half* __restrict__ o, const __half* __restrict__ dO, const float* __restrict__ lse,
    ${outT}* __restrict__ dq, ${outT}* __restrict__ dk, ${outT}* __restrict__ dv) {
  __align__(16) __shared__ __half xa[${S}][${PAD}];
  __align__(16) __shared__ __half xb[${S}][${PAD}];
  __shared__ float ds[${S}], ls[${S}];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3, g = lane >> 2;
  const int bh = blockIdx.x, b = bh / ${s.heads}, h = bh % ${s.heads};${
    s.dropout ? "\n  const unsigned int seed = rng[0], step = rng[1];" : ""
  }
  const int row0 = warp * 16 + g;  // this thread's query rows: row0 and row0 + 8
${tile("xa", "q", s.q)}
${tile("xb", "dO", s.dO!)}
${rowStats(s, "0")}
  __syncthreads();
${loadA("qf", "xa")}
${loadA("dof", "xb")}
  const float d0 = ds[row0], d1 = ds[row0 + 8], l0 = ls[row0], l1 = ls[row0 + 8];
  __syncthreads();  // every warp has its Q and dO fragments
${tile("xa", "k", s.k)}
${tile("xb", "v", s.v)}
  __syncthreads();
${zero("dq_acc")}
  // P ∘ Z and dS of this thread's elements as f16 pairs (rows row0, row0 + 8), for pass 3.
  unsigned int pz[${blocks}][8][2], dsp[${blocks}][8][2];
#pragma unroll
  for (int kb = 0; kb < ${blocks}; ++kb) {
${zero("sc")}
${mmaABt("sc", "qf", `(xa + kb * ${FLASH_ROWS})`)}
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sc[nt][i] = expf(sc[nt][i] * ${scale}${maskOf(s, `kb * ${FLASH_ROWS} + nt * 8 + 2 * t + (i & 1)`)} -
                         (i < 2 ? l0 : l1));
      }
    }
${zero("dp")}
${mmaABt("dp", "dof", `(xb + kb * ${FLASH_ROWS})`)}
${s.dropout ? keepPairs(s, "z", `kb * ${FLASH_ROWS}`) : ""}
    // dS = P ∘ (dP_d ∘ Z - D)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      pz[kb][nt][0] = bf_pack_half2(sc[nt][0]${s.dropout ? " * z[nt][0]" : ""}, sc[nt][1]${
    s.dropout ? " * z[nt][1]" : ""
  });
      pz[kb][nt][1] = bf_pack_half2(sc[nt][2]${s.dropout ? " * z[nt][2]" : ""}, sc[nt][3]${
    s.dropout ? " * z[nt][3]" : ""
  });
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[nt][i] *= dp[nt][i]${s.dropout ? " * z[nt][i]" : ""} - (i < 2 ? d0 : d1);
      dsp[kb][nt][0] = bf_pack_half2(sc[nt][0], sc[nt][1]);
      dsp[kb][nt][1] = bf_pack_half2(sc[nt][2], sc[nt][3]);
    }
${mmaPB("dq_acc", "sc", `(xa + kb * ${FLASH_ROWS})`)}
  }
${storeRows("dq", s.dQ!, "dq_acc", scale, scale, s.out)}
${passes.join("\n")}
}
`;
  return {
    code,
    grid: [s.batch * s.heads, 1, 1],
    workgroupSize: threads,
    params: backwardParams(s, ["dq", "dk", "dv"]),
  };
}
