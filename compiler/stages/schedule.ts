/**
 * The step program: one launch per kernel in fusion's order, then a copy for each graph output that is an
 * input or parameter itself (into a buffer of its own); the plan's named inputs, parameters, outputs and
 * the updates a step carries to the next; and what each step reads and writes, for the memory plan.
 */
import { UPDATE_PREFIX } from "../../plan/plan.ts";
import type { PlanStep } from "../../plan/plan.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import { nodeBuffer } from "./buffers.ts";
import { type KernelState, need, type StateBuffer } from "./state.ts";

const NAME = "schedule";

export const scheduleStage: Stage<KernelState> = {
  name: NAME,
  about: "the step program (a launch per kernel, copies for outputs that are inputs), entry points, updates",
  run: (s) => {
    const kernels = need(s.kernels, "lowered kernels", NAME);
    const bufferOfNode = need(s.bufferOfNode, "buffers", NAME);
    const buffers: StateBuffer[] = [...need(s.buffers, "buffers", NAME)];
    const steps: PlanStep[] = kernels.map((_, i) => ({ op: "launch", kernel: i }));
    const outputs: Record<string, number> = {};
    for (const [name, id] of s.graph.outputs) {
      const src = bufferOfNode.get(id)!;
      if (buffers[src].role === "output") {
        outputs[name] = src;
      } else {
        // An output that is an input or parameter itself: copy it into a buffer of its own.
        const dst = nodeBuffer(s, buffers, id, "output", name);
        buffers.push(dst);
        steps.push({ op: "copy", src, dst: dst.id, bytes: buffers[src].bytes });
        outputs[name] = dst.id;
      }
    }
    const inputs: Record<string, number> = {};
    const params: Record<string, number> = {};
    for (const b of buffers) {
      if (b.role === "input") inputs[b.name] = b.id;
      if (b.role === "param") params[b.name] = b.id;
    }
    const updates = Object.entries(outputs)
      .filter(([name]) => name.startsWith(UPDATE_PREFIX))
      .map(([name, value]) => {
        // The state a step carries to the next: a parameter, an input (optimizer moments, counters) or a
        // flat vector assembled in place (all parameters at once).
        const target = name.slice(UPDATE_PREFIX.length);
        const param = params[target] ?? inputs[target] ?? outputs[target];
        if (param === undefined) throw new Error(`output '${name}' updates no parameter, input or output`);
        return { param, value };
      });
    // A library GEMM's step also writes and reads its scratch (the epilogue's other buffers are the
    // template kernel's), so the scratch lives exactly during that step.
    const access = steps.map((st) => {
      if (st.op !== "launch") return { reads: [st.src], writes: [st.dst] };
      const scratch = s.gemmOf?.get(st.kernel)?.scratch;
      const extra = scratch === undefined ? [] : [scratch];
      return launchAccess(kernels[st.kernel].bindings, extra);
    });
    return { ...s, buffers, schedule: { steps, inputs, params, outputs, updates, access } };
  },
};

/** What a launch reads and writes, by buffer: its bindings, and `extra` (a library call's scratch) both. */
function launchAccess(
  bindings: Kernel["bindings"],
  extra: readonly number[] = [],
): { reads: number[]; writes: number[] } {
  return {
    reads: [...bindings.filter((b) => b.access !== "write").map((b) => b.buffer), ...extra],
    writes: [...bindings.filter((b) => b.access !== "read").map((b) => b.buffer), ...extra],
  };
}
