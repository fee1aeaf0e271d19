/**
 * A plain SGD parameter update appended to a differentiated graph: `new:<p> = p - learning_rate * grad.p`
 * for every parameter, with the learning rate a graph input (f32[1]) so it can change per step. It makes
 * a whole training step (forward, backward, update) one graph, which fusion and the runtimes execute as
 * one plan; the LAMB/AdamW optimizers replace it with their own update graphs.
 */
import type { Graph } from "../ir/mod.ts";
import { GraphEditor } from "../compiler/graph/edit.ts";
import { GRAD_PREFIX } from "../compiler/training_graph/autodiff.ts";

export const LEARNING_RATE_INPUT = "learning_rate";
import { UPDATE_PREFIX } from "../plan/plan.ts";
export { UPDATE_PREFIX };

export function appendSgdUpdate(g: Graph): Graph {
  const b = new GraphEditor(g);
  const lr = g.add("input", [], { name: LEARNING_RATE_INPUT }, { shape: [1], dtype: "f32" });
  for (const [name, p] of g.sources("param")) {
    const grad = g.outputs.get(GRAD_PREFIX + name);
    if (grad === undefined) continue;
    const step = b.mul(b.broadcast(lr, b.shape(p.id)), grad);
    g.setOutput(UPDATE_PREFIX + name, b.sub(p.id, step));
  }
  return g;
}
