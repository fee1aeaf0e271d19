/**
 * Randomized graphs — elementwise chains, reductions over random axes, broadcasts back, permutes and
 * reshapes — compiled fused and unfused on WebGPU and compared with the reference interpreter. Each seed
 * is a different graph; a failure names the seed so it reproduces.
 */
import assert from "node:assert/strict";
import { fuseGraph } from "../../compiler/fusion/fuse.ts";
import { ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { Graph } from "../../ir/mod.ts";
import { checkAgainstReference, F32_TOL } from "../util/fused_check.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { type Rng, seededRandom } from "../../cases/random.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const SHAPE = [3, 5, 8];

/** A random graph over [3,5,8] tensors; every op keeps values in a tame range (no overflow to inf). */
function randomGraph(seed: number): Graph {
  const r: Rng = seededRandom(seed);
  const m = new ModelBuilder(`random-${seed}`);
  const pool: Tensor[] = [m.input("a", "f32", SHAPE), m.input("b", "f32", SHAPE)];
  const pick = () => pool[r.int(0, pool.length)];
  const steps = r.int(6, 14);
  for (let i = 0; i < steps; i++) {
    const x = pick();
    let y: Tensor;
    switch (r.int(0, 9)) {
      case 0:
        y = x.tanh();
        break;
      case 1:
        y = x.mul(0.5).exp();
        break;
      case 2:
        y = x.add(pick()).mul(0.5);
        break;
      case 3:
        y = x.mul(pick());
        break;
      case 4: {
        // A reduction over a random axis, broadcast back through a binary op.
        const axis = r.int(0, 3);
        y = x.sub(x.sum(axis).mul(1 / SHAPE[axis]));
        break;
      }
      case 5: {
        const axis = r.int(0, 3);
        y = x.sub(x.max(axis).stopGradient()).exp();
        break;
      }
      case 6: {
        // A small tensor broadcast over the rest.
        const shape = SHAPE.map((d, k) => (k === r.int(0, 3) ? d : 1));
        y = x.add(m.input(`s${i}`, "f32", shape));
        break;
      }
      case 7:
        y = x.permute([0, 2, 1]).reshape([3, 8, 5]).permute([0, 2, 1]).mul(x.abs().add(1).sqrt());
        break;
      default:
        y = m.where(x.gt(pick()), x, pick().neg());
    }
    pool.push(y);
  }
  m.output("out", pool[pool.length - 1]);
  m.output("side", pool[Math.floor(pool.length / 2)].sum([0, 1, 2], false));
  return m.graph;
}

Deno.test({
  name: "random graphs: fused and unfused WebGPU plans match the reference interpreter (24 seeds)",
  ignore: !gpu.ctx,
  fn: async () => {
    for (let seed = 1; seed <= 24; seed++) {
      const g = randomGraph(seed);
      const feeds = randomFeeds(g, seed * 31);
      for (const fuse of [true, false]) {
        try {
          await checkAgainstReference(gpu.ctx!, g, feeds, { fuse, tol: F32_TOL });
        } catch (e) {
          throw new Error(`seed ${seed} (${fuse ? "fused" : "unfused"}): ${(e as Error).message}`);
        }
      }
      const f = fuseGraph(g, { fuse: true }).kernels.length;
      const u = fuseGraph(g, { fuse: false }).kernels.length;
      assert.ok(f <= u, `seed ${seed}: fused ${f} > unfused ${u}`);
    }
  },
});
