/**
 * Executes a Plan on a WebGPU device. Everything that can be made once is made in `create`: one GPU buffer
 * per memory-plan slot, one pipeline per distinct kernel source, one bind group per kernel. A step then
 * only records dispatches and copies into one command encoder and submits it.
 */
import { languageRefusal, type Plan, type PlanBuffer, type PlanKernel, storedSize } from "../../plan/plan.ts";
import { decodeHost, encodeHost, readRanges, round4 } from "./host_transfer.ts";
import type { HostArray } from "../host.ts";
import type { GpuContext } from "./device.ts";
import { tidy, validated, WebGPUError } from "./webgpu_errors.ts";
import { ResourceError } from "../../model_io/size_check.ts";
import type { Profile } from "../profile.ts";
import { type CheckedStep, checkedSteps, PlanExecutor } from "../plan_executor.ts";
import { profileSteps } from "./timing.ts";
import { type BoundRange, boundRanges } from "./range_bindings.ts";

/** One kernel ready to dispatch. */
export interface Launch {
  readonly kernel: PlanKernel;
  readonly pipeline: GPUComputePipeline;
  readonly bindGroup: GPUBindGroup;
  readonly grid: readonly [number, number, number];
}

/** A step as the encoder sees it: a dispatch, or a buffer copy with its byte size resolved. */
export type Encoded =
  | { readonly op: "launch"; readonly index: number; readonly launch: Launch }
  | {
    readonly op: "copy";
    readonly index: number;
    readonly src: GPUBuffer;
    readonly srcOffset: number;
    readonly dst: GPUBuffer;
    readonly dstOffset: number;
    readonly size: number;
  };

export class WebGPUExecutor extends PlanExecutor {
  private constructor(
    readonly ctx: GpuContext,
    plan: Plan,
    private readonly slots: readonly GPUBuffer[],
    readonly launches: readonly Launch[],
    /** Number of distinct pipelines (kernels with identical source share one). */
    readonly pipelineCount: number,
    private readonly program: readonly Encoded[],
  ) {
    super(plan, WebGPUError);
  }

  static async create(ctx: GpuContext, plan: Plan): Promise<WebGPUExecutor> {
    if (ctx.lost) throw new WebGPUError(`the WebGPU device was lost: ${ctx.lost}`);
    const { device } = ctx;
    const refusal = languageRefusal(plan, "wgsl", "the WebGPU backend");
    if (refusal) throw new WebGPUError(refusal);
    checkPlan(ctx, plan);

    const slotSize = plan.slots.map((s) => Math.max(4, round4(s.bytes)));
    for (const b of plan.buffers) {
      slotSize[b.slot] = Math.max(slotSize[b.slot], offsetOf(b) + round4(storedSize(b)));
    }
    const slots = await validated(
      device,
      "allocating the plan's buffers",
      () =>
        slotSize.map((size, i) =>
          device.createBuffer({
            label: slotLabel(plan, i),
            size,
            usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
          })
        ),
    );

    try {
      const pipelines = new Map<string, GPUComputePipeline>();
      const layouts = new Map<string, GPUBindGroupLayout>();
      const launches: Launch[] = [];
      for (const k of plan.kernels) {
        const wgsl = k.source;
        // The compiler gives identical kernels one source (its share-sources stage): one pipeline each.
        const key = wgsl.code;
        const ranges = boundRanges(plan, k.bindings);
        const layout = layoutFor(device, layouts, ranges);
        let pipeline = pipelines.get(key);
        if (!pipeline) {
          pipeline = await makePipeline(ctx, k, layout);
          pipelines.set(key, pipeline);
        }
        const bindGroup = await validated(
          device,
          `kernel ${k.name}: bind group`,
          () =>
            device.createBindGroup({
              label: k.name,
              layout,
              entries: ranges.map((r) => ({
                binding: r.binding,
                resource: { buffer: slots[r.slot], offset: r.offset, size: r.size },
              })),
            }),
        );
        launches.push({ kernel: k, pipeline, bindGroup, grid: wgsl.grid });
      }
      // The parameter updates are copies after the steps (checkedSteps numbers them on).
      const program = checkedSteps(plan, WebGPUError).map((s) => encodedStep(slots, launches, s));
      return new WebGPUExecutor(ctx, plan, slots, launches, pipelines.size, program);
    } catch (e) {
      for (const s of slots) s.destroy();
      throw e;
    }
  }

  /** The buffer a name or id refers to: graph inputs, params and outputs by name, any buffer by id or name. */
  /** The GPU buffer (the whole memory-plan slot) holding a plan buffer, for interop with other GPU code. */
  gpuBuffer(target: string | number): GPUBuffer {
    return this.slots[this.buffer(target).slot];
  }

  write(target: string | number, data: ArrayLike<number>): void {
    this.alive();
    const b = this.buffer(target);
    this.ctx.device.queue.writeBuffer(this.slots[b.slot], offsetOf(b), encodeHost(b, data));
  }

  /** Reads several buffers with one submission. */
  async readMany(targets: readonly (string | number)[]): Promise<HostArray[]> {
    this.alive();
    const bufs = targets.map((t) => this.buffer(t));
    const bytes = await readRanges(
      this.ctx.device,
      bufs.map((b) => ({ buffer: this.slots[b.slot], offset: offsetOf(b), size: storedSize(b) })),
    );
    return bufs.map((b, i) => decodeHost(b, bytes[i]));
  }

  /**
   * Runs the step program once: all launches and copies, then the parameter updates, in one command
   * encoder and one submission. Resolves once the work is submitted and validated, not when it is done.
   */
  async step(): Promise<void> {
    this.alive();
    const { device } = this.ctx;
    device.pushErrorScope("validation");
    const enc = device.createCommandEncoder({ label: this.plan.graph });
    encodeProgram(enc, this.program);
    device.queue.submit([enc.finish()]);
    const err = await device.popErrorScope();
    if (err) throw await this.attribute(err.message);
    this.raiseUncaptured();
  }

  /** Resolves when all submitted work has finished on the GPU. */
  async finish(): Promise<void> {
    await this.ctx.device.queue.onSubmittedWorkDone();
    this.raiseUncaptured();
  }

  /**
   * Per-launch GPU times over `iterations` steps (after one warm-up step), with timestamp queries when
   * the device has them, else wall-clock around each launch. Runs the program: buffers change as in step().
   */
  async profile(iterations = 5): Promise<Profile> {
    this.alive();
    return await profileSteps(this.ctx, this.plan, this.program, iterations, () => this.step());
  }

  protected release(): void {
    for (const s of this.slots) s.destroy();
  }

  protected override alive(): void {
    super.alive();
    if (this.ctx.lost) throw new WebGPUError(`the WebGPU device was lost: ${this.ctx.lost}`);
  }

  private raiseUncaptured(): void {
    const errs = this.ctx.uncaptured.splice(0);
    if (errs.length) {
      throw new WebGPUError(`WebGPU error during ${this.plan.graph}: ${tidy(errs.join("\n"))}`);
    }
  }

  /**
   * A step failed validation: encode each step alone until one fails, so the error names the kernel.
   * Encoding errors show at finish(); errors only a submission sees (a destroyed buffer, say) need each
   * step submitted alone, which runs the steps before the culprit again — the step had failed anyway.
   * Falls back to the bare message when no single step reproduces it.
   */
  private async attribute(message: string): Promise<WebGPUError> {
    const { device } = this.ctx;
    for (const submit of [false, true]) {
      for (const s of this.program) {
        device.pushErrorScope("validation");
        const enc = device.createCommandEncoder();
        encodeProgram(enc, [s]);
        const commands = enc.finish();
        if (submit) device.queue.submit([commands]);
        const err = await device.popErrorScope();
        if (err) return stepError(s, err.message);
      }
    }
    return new WebGPUError(`step of ${this.plan.graph}: ${tidy(message)}`);
  }
}

function stepError(s: Encoded, message: string): WebGPUError {
  const what = s.op === "launch"
    ? `kernel ${s.launch.kernel.name} (step ${s.index})`
    : `copy at step ${s.index}`;
  return new WebGPUError(`${what}: ${tidy(message)}`);
}

/** Where a buffer starts inside its slot (non-zero for the parts of a flat vector). */
const offsetOf = (b: PlanBuffer): number => b.offset ?? 0;

/** GPU buffer labels name the tensors in the slot, so driver messages about a buffer are readable. */
function slotLabel(plan: Plan, slot: number): string {
  const names = plan.buffers.filter((b) => b.slot === slot).map((b) => b.name);
  const shown = names.slice(0, 3).join(", ") + (names.length > 3 ? `, +${names.length - 3}` : "");
  return `slot ${slot} (${shown})`;
}

/** Records launches into compute passes (consecutive launches share one) and copies between them. */
export function encodeProgram(enc: GPUCommandEncoder, program: readonly Encoded[]): void {
  let pass: GPUComputePassEncoder | null = null;
  for (const s of program) {
    if (s.op === "launch") {
      pass ??= enc.beginComputePass();
      pass.setPipeline(s.launch.pipeline);
      pass.setBindGroup(0, s.launch.bindGroup);
      pass.dispatchWorkgroups(s.launch.grid[0], s.launch.grid[1], s.launch.grid[2]);
    } else {
      pass?.end();
      pass = null;
      if (s.size > 0) enc.copyBufferToBuffer(s.src, s.srcOffset, s.dst, s.dstOffset, s.size);
    }
  }
  pass?.end();
}

function encodedStep(slots: readonly GPUBuffer[], launches: readonly Launch[], s: CheckedStep): Encoded {
  if (s.op === "launch") return { op: "launch", index: s.index, launch: launches[s.kernel] };
  const { src, dst } = s;
  if (src.slot === dst.slot) throw new WebGPUError(`${s.what}: the two share memory slot ${src.slot}`);
  return {
    op: "copy",
    index: s.index,
    src: slots[src.slot],
    srcOffset: offsetOf(src),
    dst: slots[dst.slot],
    dstOffset: offsetOf(dst),
    size: round4(s.bytes),
  };
}

/**
 * Explicit layouts (not "auto"): an auto layout drops bindings the shader never reads, and binding them
 * would then fail. Kernels with the same binding signature share one layout.
 */
function layoutFor(
  device: GPUDevice,
  cache: Map<string, GPUBindGroupLayout>,
  ranges: readonly BoundRange[],
): GPUBindGroupLayout {
  const entries = ranges.map((r): GPUBindGroupLayoutEntry => ({
    binding: r.binding,
    visibility: GPUShaderStage.COMPUTE,
    buffer: { type: r.of.access === "read" ? "read-only-storage" : "storage" },
  }));
  const key = entries.map((e) => `${e.binding}:${e.buffer!.type}`).join(",");
  let layout = cache.get(key);
  if (!layout) {
    layout = device.createBindGroupLayout({ label: key, entries });
    cache.set(key, layout);
  }
  return layout;
}

async function makePipeline(
  ctx: GpuContext,
  k: PlanKernel,
  bindings: GPUBindGroupLayout,
): Promise<GPUComputePipeline> {
  const code = k.source!.code;
  if (/^\s*enable f16;/m.test(code) && !ctx.hasF16) {
    throw new WebGPUError(`kernel ${k.name} needs shader-f16, which adapter '${ctx.description}' lacks`);
  }
  const { device } = ctx;
  const module = await validated(
    device,
    `kernel ${k.name}: WGSL did not compile`,
    () => device.createShaderModule({ label: k.name, code }),
  );
  return await validated(device, `kernel ${k.name}: pipeline creation failed`, () => {
    const layout = device.createPipelineLayout({ label: k.name, bindGroupLayouts: [bindings] });
    return device.createComputePipeline({ label: k.name, layout, compute: { module, entryPoint: "main" } });
  });
}

/** What a user can change when a tensor is over a device limit (the plan's sizes follow batch and sequence). */
const LIMIT_HINT = "try a smaller batch size or sequence length, or another --backend (cpu, cuda)";

/**
 * Checks the plan against the device before anything is allocated, with errors that name the tensor. A
 * tensor over the device's buffer or binding limit is the user's to change (a smaller batch, another
 * backend): a ResourceError, one line, rather than a driver error from deep inside the allocation.
 */
function checkPlan(ctx: GpuContext, plan: Plan): void {
  const { maxStorageBufferBindingSize, maxBufferSize, maxStorageBuffersPerShaderStage } = ctx.limits;
  for (const b of plan.buffers) {
    if (b.dtype === "bf16") throw new WebGPUError(`buffer '${b.name}' is bf16: bf16 needs the CUDA backend`);
    if (!plan.slots[b.slot]) {
      throw new WebGPUError(`buffer '${b.name}' is in slot ${b.slot}, which the plan lacks`);
    }
    if (round4(storedSize(b)) > maxBufferSize) {
      throw new ResourceError(
        `tensor '${b.name}' [${b.shape.join(", ")}] ${b.dtype} needs ${round4(storedSize(b))} bytes, over ` +
          `maxBufferSize of ${maxBufferSize} bytes (adapter '${ctx.description}'); ${LIMIT_HINT}`,
      );
    }
  }
  for (const k of plan.kernels) {
    const missing = k.bindings.find((pb) => !plan.buffers[pb.buffer]);
    if (missing) {
      throw new WebGPUError(`kernel ${k.name} binds buffer ${missing.buffer}, which the plan lacks`);
    }
    const ranges = boundRanges(plan, k.bindings);
    if (ranges.length > maxStorageBuffersPerShaderStage) {
      throw new WebGPUError(
        `kernel ${k.name} binds ${ranges.length} buffer ranges, over maxStorageBuffersPerShaderStage ` +
          `${maxStorageBuffersPerShaderStage}`,
      );
    }
    // A buffer over the binding limit was split into ranges by the compiler when it knew this adapter's
    // limit (plan/binding_ranges.ts); a plan compiled without it (or for a larger one) cannot bind it.
    for (const r of ranges) {
      const b = plan.buffers[r.of.buffer];
      if (r.size > maxStorageBufferBindingSize) {
        throw new ResourceError(
          `kernel ${k.name}: tensor '${b.name}' [${
            b.shape.join(", ")
          }] ${b.dtype} binds ${r.size} bytes at once, ` +
            `over maxStorageBufferBindingSize of ${maxStorageBufferBindingSize} bytes (adapter ` +
            `'${ctx.description}'): the plan was compiled for a larger binding limit; compile it for this adapter`,
        );
      }
    }
    type Range = { name: string; start: number; end: number };
    const writers = new Map<number, Range[]>();
    const readers = new Map<number, Range[]>();
    for (const pb of k.bindings) {
      const b = plan.buffers[pb.buffer];
      // WebGPU rejects a writable binding that overlaps another binding of the same buffer, and (in wgpu,
      // which tracks usage per buffer) a read-only binding beside a writable one even where the ranges are
      // disjoint: ranges of one flat vector may share a dispatch only as disjoint read_write bindings.
      const range = { name: b.name, start: offsetOf(b), end: offsetOf(b) + round4(storedSize(b)) };
      const others = [
        ...(writers.get(b.slot) ?? []),
        ...(pb.access !== "read" ? readers.get(b.slot) ?? [] : []),
      ];
      const clash = others.find((o) =>
        pb.access === "read" || readers.has(b.slot) || (o.start < range.end && range.start < o.end)
      );
      if (clash !== undefined) {
        throw new WebGPUError(
          `kernel ${k.name}: bindings '${clash.name}' and '${b.name}' share memory slot ${b.slot} and one is written`,
        );
      }
      const into = pb.access === "read" ? readers : writers;
      into.set(b.slot, [...(into.get(b.slot) ?? []), range]);
    }
  }
}
