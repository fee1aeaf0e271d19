/**
 * The page's model runner: BERT graphs compiled in the browser for the adapter it has, run with the WebGPU
 * executor. Rows are padded to a sequence-length bucket (powers of two from 16, and the model's maximum)
 * so that a few shapes are compiled rather than one per text length; padded keys are masked, so padding
 * never changes an answer. Weights are written once per compiled shape and stay on the device.
 *
 * The browser build is, like engine/, a place where the compiler and the runtime meet: it imports the
 * WGSL emitter and the WebGPU executor directly rather than engine/backends.ts, whose table also holds
 * the CUDA row (FFI) that has no place in a page.
 */
import { webgpuTarget } from "../compiler/targets/target.ts";
import type { Kernel } from "../compiler/kernel_ir/ir.ts";
import { softwareAdapter } from "../runtime/webgpu/software.ts";
import { emitWGSL } from "../compiler/codegen/wgsl.ts";
import { compileGraph } from "../compiler/driver/compile.ts";
import { QUIET } from "../compiler/pipeline/debug.ts";
import type { Graph } from "../ir/mod.ts";
import { type BertModel, type Head, INFER_OUTPUTS } from "../models/bert.ts";
import type { EncodedRow } from "../model_io/infer_input.ts";
import type { GpuContext } from "../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../runtime/webgpu/webgpu_executor.ts";
import type { RowOutput } from "../textinfer/mod.ts";

/** Kernels without name and description, so identical fusions share one source and one pipeline. */
const emitShared = (k: Kernel) => emitWGSL({ ...k, name: k.kind, about: [] });

/** What the page shows about the work behind an answer. */
export interface RunStats {
  /** Shapes compiled for this run (0 when all were cached) and the time spent compiling them. */
  compiled: number;
  compileMs: number;
  /** The last compiled plan's kernel count. */
  kernels: number;
  runMs: number;
}

export function seqBuckets(maxPositions: number): number[] {
  const b: number[] = [];
  for (let s = 16; s < maxPositions; s *= 2) b.push(s);
  b.push(maxPositions);
  return b;
}

export class WebGPURunner {
  private readonly executors = new Map<string, Promise<WebGPUExecutor>>();
  private readonly buckets: number[];
  readonly last: RunStats = { compiled: 0, compileMs: 0, kernels: 0, runMs: 0 };

  constructor(
    private readonly gpu: GpuContext,
    private readonly model: BertModel,
    private readonly head: Head,
    private readonly weights: Map<string, Float32Array>,
  ) {
    this.buckets = seqBuckets(model.config.max_position_embeddings);
  }

  private executor(batch: number, seqLen: number): Promise<WebGPUExecutor> {
    const key = `${batch}x${seqLen}`;
    let ex = this.executors.get(key);
    if (!ex) {
      ex = (async () => {
        const t0 = performance.now();
        const g: Graph = this.model.build({ head: this.head, mode: "infer", batchSize: batch, seqLen });
        // Fused for this adapter: no kernel binds more storage buffers than it allows per stage.
        const { plan } = compileGraph(g, {
          fuse: true,
          target: { ...webgpuTarget(softwareAdapter(this.gpu) !== undefined), emit: emitShared },
          flags: QUIET,
          maxBindings: this.gpu.limits.maxStorageBuffersPerShaderStage,
          maxBindingBytes: this.gpu.limits.maxStorageBufferBindingSize,
        });
        const e = await WebGPUExecutor.create(this.gpu, plan);
        for (const [name, data] of this.weights) {
          if (plan.params[name] !== undefined) e.write(name, data);
        }
        this.last.compiled++;
        this.last.compileMs += performance.now() - t0;
        this.last.kernels = plan.kernels.length;
        return e;
      })();
      ex.catch(() => this.executors.delete(key));
      this.executors.set(key, ex);
    }
    return ex;
  }

  /**
   * Runs all rows in one batch; outputs in runtime/infer.ts's layout: [N, ...], or [N, S, ...] for
   * per-token outputs with S the longest row (positions past a row's length are 0).
   */
  async run(rows: EncodedRow[]): Promise<Map<string, RowOutput>> {
    Object.assign(this.last, { compiled: 0, compileMs: 0 });
    const n = rows.length;
    const maxLen = Math.max(...rows.map((r) => r.input_ids.length));
    const s = this.buckets.find((b) => b >= maxLen) ?? maxLen;
    const ex = await this.executor(n, s);
    const t0 = performance.now();
    for (const field of ["input_ids", "token_type_ids", "attention_mask"] as const) {
      const buf = new Int32Array(n * s);
      rows.forEach((r, i) => buf.set(r[field], i * s));
      ex.write(field, buf);
    }
    await ex.step();
    const specs = INFER_OUTPUTS[this.head];
    const values = await ex.readMany(specs.map((o) => ex.plan.outputs[o.name]));
    this.last.runMs = performance.now() - t0;
    const out = new Map<string, RowOutput>();
    specs.forEach((spec, k) => {
      const v = values[k] as Float32Array;
      const buf = ex.plan.buffers[ex.plan.outputs[spec.name]];
      const tail = buf.shape.slice(spec.perToken ? 2 : 1);
      const inner = tail.reduce((a, b) => a * b, 1);
      if (!spec.perToken) {
        out.set(spec.name, { shape: [n, ...tail], data: v.slice(0, n * inner) });
        return;
      }
      const data = new Float32Array(n * maxLen * inner);
      rows.forEach((r, i) => {
        data.set(v.subarray(i * s * inner, (i * s + r.input_ids.length) * inner), i * maxLen * inner);
      });
      out.set(spec.name, { shape: [n, maxLen, ...tail], data });
    });
    return out;
  }

  destroy(): void {
    for (const e of this.executors.values()) e.then((x) => x.destroy(), () => {});
    this.executors.clear();
  }
}
