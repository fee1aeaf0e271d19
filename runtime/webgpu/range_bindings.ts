/**
 * What a kernel's bindings become on the device: one WebGPU binding per range of each plan binding. A
 * buffer over the adapter's binding limit was split by the compiler into ranges (plan/binding_ranges.ts);
 * the kernel's WGSL declares one array per range at consecutive @binding numbers, and this binds them.
 */
import { firstBindingNumbers, rangesOf } from "../../plan/binding_ranges.ts";
import { numel } from "../../ir/dtype.ts";
import { type Plan, type PlanBinding, storedBytes, storedSize } from "../../plan/plan.ts";
import { round4 } from "./host_transfer.ts";

/** One WebGPU binding: a byte range of a plan buffer's slot. */
export interface BoundRange {
  readonly binding: number;
  /** The plan binding it belongs to. */
  readonly of: PlanBinding;
  readonly slot: number;
  readonly offset: number;
  readonly size: number;
}

/** Every WebGPU binding of a kernel, in @binding order. */
export function boundRanges(plan: Plan, bindings: readonly PlanBinding[]): BoundRange[] {
  const ordered = [...bindings].sort((a, b) => a.index - b.index);
  const elements = ordered.map((pb) => numel(plan.buffers[pb.buffer].shape));
  const first = firstBindingNumbers(
    ordered.map((pb, i) => ({ elements: elements[i], rangeElements: pb.rangeElements })),
  );
  return ordered.flatMap((pb, i) => {
    const b = plan.buffers[pb.buffer];
    const start = b.offset ?? 0;
    const total = round4(storedSize(b));
    if (pb.rangeElements === undefined) {
      return [{ binding: first[i], of: pb, slot: b.slot, offset: start, size: total }];
    }
    const step = pb.rangeElements * storedBytes(b.dtype);
    return Array.from(
      { length: rangesOf({ elements: elements[i], rangeElements: pb.rangeElements }) },
      (_, r) => ({
        binding: first[i] + r,
        of: pb,
        slot: b.slot,
        offset: start + r * step,
        size: Math.min(step, total - r * step),
      }),
    );
  });
}
