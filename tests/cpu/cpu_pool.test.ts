/**
 * The CPU backend's thread pool (runtime/cpu/pool.c) against the reference interpreter, on oneDNN's and
 * OpenBLAS's sgemm where each is installed and always on the backend's own (sgemm.c): GEMMs large enough to be cut
 * into blocks of rows (m > n) or of columns (n > m), with each operand transposed or not (a block's
 * operand addresses differ for each), batched GEMMs run one entry per task, kernels over many workgroups
 * run in chunks claimed by the pool's threads, and small GEMMs (one call) past each of sgemm.c's blocking
 * sizes (KC 256, MC 96, NC 2048) with ragged edges. Fresh random inputs each.
 */
import assert from "node:assert/strict";
import { randomFeeds } from "../../cases/random_feeds.ts";
import type { Graph } from "../../ir/graph.ts";
import { ModelBuilder } from "../../dsl/mod.ts";
import { F32_TOL } from "../util/fused_check.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";
import { openPool } from "../../runtime/cpu/pool.ts";
import { ROOT } from "../util/cli.ts";

const cpu = await testCpu();
const GEMMS = (["onednn", "openblas", "own"] as const).filter((e) =>
  e === "own" || (e === "onednn" ? cpu.ctx?.onednn : cpu.ctx?.blas)
);
const TRANSPOSES = [[false, false], [false, true], [true, false], [true, true]] as const;
const ᵀ = (t: boolean) => (t ? "ᵀ" : "");

/** Runs g on the pool with `gemms`' sgemm, fresh inputs, and checks that `calls` GEMMs were sgemm calls. */
async function check(gemms: (typeof GEMMS)[number], g: Graph, calls: number) {
  const s = Math.floor(Math.random() * 2 ** 31);
  const r = await checkCpuAgainstReference({ ...cpu.ctx!, gemms }, g, randomFeeds(g, s), {
    fuse: true,
    tol: F32_TOL,
  });
  assert.equal(r.libraryGemms, calls, `seed ${s}: GEMMs run as sgemm`);
}

for (const gemms of GEMMS) {
  for (const [m, n, k] of [[300, 40, 72], [40, 300, 72]]) {
    for (const [transposeA, transposeB] of TRANSPOSES) {
      const blocks = m > n ? "rows" : "columns";
      Deno.test({
        name: `pool GEMM on ${gemms} sgemm ${m}x${n}x${k} in blocks of ${blocks}, A${ᵀ(transposeA)} B${
          ᵀ(transposeB)
        }`,
        ignore: !cpu.ctx,
        fn: async () => {
          const b = new ModelBuilder("pool_gemm");
          const a = b.input("a", "f32", transposeA ? [k, m] : [m, k]);
          const w = b.input("w", "f32", transposeB ? [n, k] : [k, n]);
          // A tanh after the product: the epilogue kernel reads the whole result, blocks included.
          b.output("y", a.matmul(w, { transposeA, transposeB }).tanh());
          await check(gemms, b.graph, 1);
        },
      });
    }
  }

  Deno.test({
    name: `pool on ${gemms} sgemm: a batched GEMM (one task per entry), a kernel over many workgroups`,
    ignore: !cpu.ctx,
    fn: async () => {
      const b = new ModelBuilder("pool_batched");
      b.output("p", b.input("q", "f32", [12, 48, 40]).matmul(b.input("v", "f32", [12, 40, 56])));
      b.output("e", b.input("x", "f32", [700, 96]).mul(3).exp());
      await check(gemms, b.graph, 1);
    },
  });
}

Deno.test({
  name: "own sgemm: single calls past KC (k 300), MC (m 100) and NC (n 2100), ragged, every transpose",
  ignore: !cpu.ctx,
  fn: async () => {
    const b = new ModelBuilder("own_sgemm_blocking");
    for (const [m, n, k] of [[3, 40, 300], [100, 5, 300], [5, 2100, 20]]) {
      for (const [transposeA, transposeB] of TRANSPOSES) {
        const at = `${m}_${+transposeA}${+transposeB}`;
        const a = b.input(`a${at}`, "f32", transposeA ? [k, m] : [m, k]);
        b.output(
          `y${at}`,
          a.matmul(b.input(`w${at}`, "f32", transposeB ? [n, k] : [k, n]), { transposeA, transposeB }),
        );
      }
    }
    await check("own", b.graph, 12);
  },
});

Deno.test({
  name: "BERTFUSE_BLAS picks the GEMM library: none, onednn, openblas, a library's path; a missing one warns",
  ignore: !cpu.ctx,
  fn: async () => {
    const picked = async (value: string) => {
      const code =
        `import { openCpu } from "${ROOT}runtime/cpu/cpu_context.ts"; console.log(openCpu().gemms);`;
      const env = { BERTFUSE_BLAS: value }, piped = { stdout: "piped", stderr: "piped" } as const;
      const out = await new Deno.Command(Deno.execPath(), { args: ["eval", code], env, ...piped }).output();
      return `${new TextDecoder().decode(out.stdout).trim()} ${new TextDecoder().decode(out.stderr)}`.trim();
    };
    const { onednn, blas } = cpu.ctx!;
    assert.match(await picked("none"), /^own warning: oneDNN not used .*OpenBLAS not used/);
    for (const [lib, name] of [[blas, "openblas"], [onednn, "onednn"]] as const) {
      assert.equal(await picked(name), lib ? name : "own");
      if (lib) assert.equal(await picked(lib.path), name);
    }
    assert.match(
      await picked("/nowhere/libdnnl.so.2"),
      /^own warning: oneDNN not found.*\/nowhere\/libdnnl\.so\.2/,
    );
  },
});

Deno.test({
  name: "pool: an arena's pages are faulted in before the first step, and it stays zero",
  ignore: !cpu.ctx,
  fn: async () => {
    const pool = await openPool(cpu.ctx!);
    const arena = new Uint8Array((64 << 20) + 4099).subarray(3), before = Deno.memoryUsage().rss; // ragged ends
    pool.lib.symbols.bf_arena_prepare(arena, BigInt(arena.byteLength));
    const grown = Deno.memoryUsage().rss - before;
    assert.ok(grown > 60 << 20, `resident memory grew by ${grown} bytes of ${arena.byteLength}`);
    assert.equal(arena.findIndex((x) => x !== 0), -1);
  },
});
