/**
 * How many bindings a fused kernel needs: one per buffer it reads or writes, except that a buffer over
 * the device's binding limit is bound as several ranges (plan/binding_ranges.ts), each a binding. Fusion
 * keeps a merged kernel within the device's bindings per shader stage by this count.
 */
import type { Graph, NodeId } from "../../ir/mod.ts";
import { numel } from "../../ir/dtype.ts";
import { rangeCount } from "../../plan/binding_ranges.ts";
import { storedBytes } from "../../plan/plan.ts";

/**
 * The bindings `values` take under `maxBindingBytes` (unlimited: one each). A value's bytes are counted
 * at its own dtype's stored width, an upper bound: storage may round it to f16 later, never wider.
 */
export function bindingCount(g: Graph, values: Iterable<NodeId>, maxBindingBytes?: number): number {
  let count = 0;
  for (const x of values) {
    const { shape, dtype } = g.nodes[x].type;
    count += rangeCount(numel(shape) * storedBytes(dtype), maxBindingBytes);
  }
  return count;
}
