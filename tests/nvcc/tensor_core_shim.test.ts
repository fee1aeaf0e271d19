/**
 * The tensor-core helpers of the CUDA prelude (bf_mma_m16n8k16, bf_ldmatrix_x4/x2 and their .trans forms,
 * bf_pack_half2): on the CPU shim (tests/util/cuda_cpu.ts emulates them as warp collectives with the PTX
 * ISA's fragment layouts) a test kernel computes D = A·B + C five ways (fragments packed by hand from the
 * documented layout, and every ldmatrix variant feeding the mma) on random f16 inputs, each compared with
 * a scalar product; the same kernel compiles for sm_90 with nvcc (the inline-PTX spelling), and its PTX
 * holds the instructions. Without g++ or nvcc the respective test is reported as ignored.
 */
import assert from "node:assert/strict";
import { cudaPrelude } from "../../compiler/codegen/cuda_prelude.ts";
import { seededRandom } from "../../cases/random.ts";
import { decodeF16, encodeF16 } from "../../numeric/half.ts";
import { CXX, cxxVersion, runSourceOnCpu } from "../util/cuda_cpu.ts";
import { NVCC, NVCC_STRICT, nvccVersion } from "../util/nvcc.ts";

const BLOCKS = 2, WARPS = 2, PATHS = 5;

const prelude = cudaPrelude({
  helpers: new Set([
    "bf_pack_half2",
    "bf_mma_m16n8k16",
    "bf_ldmatrix_x4",
    "bf_ldmatrix_x4_trans",
    "bf_ldmatrix_x2",
    "bf_ldmatrix_x2_trans",
  ]),
  reductions: new Map(),
  warpWidth: 32,
  warps: WARPS,
});

// Per warp: A 16x16 (row-major), B 16x16 as B[k][n], C 16x16 f32; D[path] 16x16 f32. The product is two
// m16n8k16 tiles (n 0..7 and 8..15).
const KERNEL = String.raw`
extern "C" __global__ void __launch_bounds__(64) tc_test(const __half* ga, const __half* gb, const float* gc,
                                                         float* gd) {
  __align__(16) __shared__ __half as[${WARPS}][16][24];
  __align__(16) __shared__ __half bk[${WARPS}][16][24];  // B[k][n], k-major (like V in attention)
  __align__(16) __shared__ __half bn[${WARPS}][16][24];  // B[k][n] stored as [n][k] (like K)
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int base = (blockIdx.x * ${WARPS} + w) * 256;
  for (int i = lane; i < 256; i += 32) {
    as[w][i / 16][i % 16] = ga[base + i];
    bk[w][i / 16][i % 16] = gb[base + i];
    bn[w][i % 16][i / 16] = gb[base + i];
  }
  __syncthreads();
  auto A = [&](int r, int c) { return __half2float(ga[base + r * 16 + c]); };
  auto B = [&](int k, int n) { return __half2float(gb[base + k * 16 + n]); };
  unsigned int a_hand[4] = {bf_pack_half2(A(g, 2 * t), A(g, 2 * t + 1)),
                            bf_pack_half2(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
                            bf_pack_half2(A(g, 2 * t + 8), A(g, 2 * t + 9)),
                            bf_pack_half2(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
  unsigned int a[4];
  bf_ldmatrix_x4(a, &as[w][lane % 16][(lane / 16) * 8]);
  for (int path = 0; path < ${PATHS}; ++path) {
    unsigned int b[2][2];
    if (path == 0) {
      for (int nt = 0; nt < 2; ++nt) {
        b[nt][0] = bf_pack_half2(B(2 * t, nt * 8 + g), B(2 * t + 1, nt * 8 + g));
        b[nt][1] = bf_pack_half2(B(2 * t + 8, nt * 8 + g), B(2 * t + 9, nt * 8 + g));
      }
    } else if (path == 1) {  // x2 over [n][k]: matrix 0 = k 0..7, matrix 1 = k 8..15
      for (int nt = 0; nt < 2; ++nt) bf_ldmatrix_x2(b[nt], &bn[w][nt * 8 + lane % 8][((lane / 8) % 2) * 8]);
    } else if (path == 2) {  // x2.trans over [k][n]: rows k 0..15 of the n-tile's columns
      for (int nt = 0; nt < 2; ++nt) bf_ldmatrix_x2_trans(b[nt], &bk[w][lane % 16][nt * 8]);
    } else if (path == 3) {  // x4.trans: both n-tiles at once
      unsigned int r[4];
      bf_ldmatrix_x4_trans(r, &bk[w][lane % 8 + ((lane / 8) % 2) * 8][(lane / 16) * 8]);
      b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
    } else {  // x4 over [n][k]: both n-tiles at once
      unsigned int r[4];
      bf_ldmatrix_x4(r, &bn[w][lane % 8 + (lane / 16) * 8][((lane / 8) % 2) * 8]);
      b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
    }
    for (int nt = 0; nt < 2; ++nt) {
      float c[4];
      for (int i = 0; i < 4; ++i) c[i] = gc[base + (g + 8 * (i >> 1)) * 16 + nt * 8 + 2 * t + (i & 1)];
      bf_mma_m16n8k16(c, path == 0 ? a_hand : a, b[nt]);
      for (int i = 0; i < 4; ++i) {
        gd[(path * ${
  BLOCKS * WARPS
} * 256) + base + (g + 8 * (i >> 1)) * 16 + nt * 8 + 2 * t + (i & 1)] = c[i];
      }
    }
  }
}
`;

const version = await cxxVersion();
const noCxx = version ? "" : ` (${CXX} not found)`;

Deno.test({
  name: `tensor-core fragments on the CPU shim: mma.m16n8k16 and ldmatrix vs a scalar product${noCxx}`,
  ignore: !version,
  async fn() {
    const r = seededRandom(Date.now() >>> 0);
    const n = BLOCKS * WARPS * 256;
    const a = decodeF16(encodeF16(Float64Array.from({ length: n }, () => r.normal())));
    const b = decodeF16(encodeF16(Float64Array.from({ length: n }, () => r.normal())));
    const c = Float32Array.from({ length: n }, () => r.normal());
    const main = `${KERNEL}
static std::vector<__half> ga(${n}), gb(${n});
static std::vector<float> gc(${n}), gd(${PATHS * n});
static void run() { tc_test(ga.data(), gb.data(), gc.data(), gd.data()); }
int main() {
  if (std::fread(ga.data(), 2, ${n}, stdin) != ${n} || std::fread(gb.data(), 2, ${n}, stdin) != ${n} ||
      std::fread(gc.data(), 4, ${n}, stdin) != ${n}) return 2;
  bf_launch(${BLOCKS}u, ${WARPS * 32}u, true, run);
  std::fwrite(gd.data(), 4, ${PATHS * n}, stdout);
  return 0;
}`;
    const input = new Uint8Array(n * 8);
    input.set(new Uint8Array(encodeF16(a).buffer), 0);
    input.set(new Uint8Array(encodeF16(b).buffer), n * 2);
    input.set(new Uint8Array(c.buffer), n * 4);
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-tc-" });
    try {
      const out = await runSourceOnCpu(dir, `${prelude}\n${main}`, input);
      const d = new Float32Array(out.slice().buffer);
      assert.equal(d.length, PATHS * n);
      for (let path = 0; path < PATHS; path++) {
        let worst = 0;
        for (let m = 0; m < BLOCKS * WARPS; m++) {
          for (let i = 0; i < 16; i++) {
            for (let j = 0; j < 16; j++) {
              let s = c[m * 256 + i * 16 + j], mag = Math.abs(s);
              for (let k = 0; k < 16; k++) {
                const p = a[m * 256 + i * 16 + k] * b[m * 256 + k * 16 + j];
                s += p;
                mag += Math.abs(p);
              }
              const got = d[path * n + m * 256 + i * 16 + j];
              worst = Math.max(worst, Math.abs(got - s) / (mag * 2 ** -20 + 1e-30));
            }
          }
        }
        // f32 sums of 17 terms: within 2^-20 of the magnitude sum (17 roundings of 2^-24 each).
        assert.ok(worst <= 1, `path ${path}: error ${worst.toFixed(3)} × 2^-20 of Σ|a·b|`);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

const nvcc = await nvccVersion();

Deno.test({
  name: `tensor-core helpers compile for sm_90 with nvcc (inline PTX)${nvcc ? "" : ` (${NVCC} not found)`}`,
  ignore: !nvcc,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-tc-nvcc-" });
    try {
      const src = `${dir}/tc.cu`;
      await Deno.writeTextFile(src, `#include <cuda_fp16.h>\n${prelude}\n${KERNEL}`);
      const ptx = await new Deno.Command(NVCC, {
        args: [...NVCC_STRICT, "-ptx", src, "-o", `${dir}/tc.ptx`],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.ok(ptx.success, new TextDecoder().decode(ptx.stderr));
      const text = await Deno.readTextFile(`${dir}/tc.ptx`);
      for (
        const instr of [
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
          "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
          "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
          "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
          "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
        ]
      ) assert.ok(text.includes(instr), `PTX lacks ${instr}`);
      const obj = await new Deno.Command(NVCC, {
        args: [...NVCC_STRICT, "-c", src, "-o", `${dir}/tc.o`],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.ok(obj.success, new TextDecoder().decode(obj.stderr));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
