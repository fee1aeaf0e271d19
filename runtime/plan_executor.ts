/**
 * What every device executor of a plan does the same way: naming buffers, the step program checked
 * against the plan, running feeds → step → outputs, refusing use after destroy. A device class supplies
 * only what its device does differently: write, readMany, step, and what release() frees.
 */
import { type Plan, type PlanBuffer, storedSize } from "../plan/plan.ts";
import type { HostArray } from "./host.ts";

type DeviceErrorClass = new (message: string) => Error;

/** A step of the program as every device runs it: a launch, or a copy of the source's stored bytes. */
export type CheckedStep =
  | { readonly op: "launch"; readonly index: number; readonly kernel: number }
  | {
    readonly op: "copy";
    readonly index: number;
    readonly src: PlanBuffer;
    readonly dst: PlanBuffer;
    readonly bytes: number;
    /** Where the copy comes from and what it moves, for error messages. */
    readonly what: string;
  };

/** Buffer `id` of the plan; else the device's error naming `where` it was referred to. */
export function planBuffer(plan: Plan, id: number, where: string, DeviceError: DeviceErrorClass): PlanBuffer {
  const b = plan.buffers[id];
  if (!b) throw new DeviceError(`plan ${plan.graph}: ${where} refers to buffer ${id}, which it lacks`);
  return b;
}

/**
 * The step program, then the parameter updates as copies numbered after it, each launched kernel and copied
 * buffer checked to be in the plan and each copy to fit its destination (the plan's `bytes` counts a bool as
 * one byte; a copy moves the stored form).
 */
export function checkedSteps(plan: Plan, DeviceError: DeviceErrorClass): CheckedStep[] {
  const copy = (index: number, from: number, to: number, where: string): CheckedStep => {
    const src = planBuffer(plan, from, where, DeviceError), dst = planBuffer(plan, to, where, DeviceError);
    const bytes = storedSize(src), what = `${where}: '${src.name}' -> '${dst.name}'`;
    if (storedSize(dst) < bytes) {
      throw new DeviceError(`${what}: ${bytes} bytes do not fit in ${storedSize(dst)}`);
    }
    return { op: "copy", index, src, dst, bytes, what };
  };
  return [
    ...plan.steps.map((s, index): CheckedStep => {
      if (s.op !== "launch") return copy(index, s.src, s.dst, `step ${index}`);
      if (plan.kernels[s.kernel]) return { op: "launch", index, kernel: s.kernel };
      throw new DeviceError(`plan ${plan.graph}: step ${index} launches kernel ${s.kernel}, which it lacks`);
    }),
    ...plan.updates.map((u, i) => copy(plan.steps.length + i, u.value, u.param, `update ${i}`)),
  ];
}

export abstract class PlanExecutor {
  private destroyed = false;

  /** `DeviceError`: the device's error class, so every message of an executor names its backend. */
  protected constructor(readonly plan: Plan, private readonly DeviceError: DeviceErrorClass) {}

  /** The buffer a name or id refers to: graph inputs, params and outputs by name, any buffer by id or name. */
  buffer(target: string | number): PlanBuffer {
    const p = this.plan;
    const id = typeof target === "number"
      ? target
      : p.inputs[target] ?? p.params[target] ?? p.outputs[target] ??
        p.buffers.find((b) => b.name === target)?.id;
    const b = id === undefined ? undefined : p.buffers[id];
    if (b) return b;
    throw new this.DeviceError(
      typeof target === "number"
        ? `plan ${p.graph} has no buffer ${target}`
        : `plan ${p.graph} has no input, parameter or buffer '${target}'`,
    );
  }

  /** Writes host values into a buffer, converted to its stored form (f16/bf16 rounded, bool as u32 0/1). */
  abstract write(target: string | number, data: ArrayLike<number>): void;

  /** Reads buffers once the steps before have finished: Float32Array for floats, Int32Array, Uint32Array. */
  abstract readMany(targets: readonly (string | number)[]): Promise<HostArray[]>;

  read(target: string | number): Promise<HostArray> {
    return this.readMany([target]).then((r) => r[0]);
  }

  /** Runs the step program once, then the parameter updates. */
  abstract step(): Promise<void>;

  /** Writes `feeds` (by input or parameter name), steps, and reads the outputs (all of them by default). */
  async run(
    feeds: Readonly<Record<string, ArrayLike<number>>>,
    outputNames?: readonly string[],
  ): Promise<Record<string, HostArray>> {
    for (const [name, data] of Object.entries(feeds)) this.write(name, data);
    await this.step();
    const names = outputNames ?? Object.keys(this.plan.outputs);
    const missing = names.find((n) => this.plan.outputs[n] === undefined);
    if (missing !== undefined) {
      throw new this.DeviceError(`plan ${this.plan.graph} has no output '${missing}'`);
    }
    const values = await this.readMany(names.map((n) => this.plan.outputs[n]));
    return Object.fromEntries(names.map((n, i) => [n, values[i]]));
  }

  /** Frees the device's resources; later calls are refused. Idempotent. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.release();
  }

  protected abstract release(): void;

  /** Throws (the device's error) once destroyed; devices that can be lost add their own check. */
  protected alive(): void {
    if (this.destroyed) throw new this.DeviceError(`executor for ${this.plan.graph} was destroyed`);
  }
}
