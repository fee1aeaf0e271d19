/** What a backend offers the drivers: run a graph on named feeds and return its named outputs. */
import type { Graph } from "../ir/mod.ts";

export interface Backend {
  readonly name: string;
  run(
    g: Graph,
    feeds: Record<string, ArrayLike<number>>,
    outputs?: string[],
  ): Promise<Map<string, Float32Array | Float64Array>>;
}

/**
 * A compiled training or inference step held on a device: inputs, parameters and state written by name,
 * one step run, outputs and state read back. The WebGPU, CUDA and reference executors all offer it.
 */
export interface StepExecutor {
  write(name: string, data: ArrayLike<number>): void;
  read(name: string): Promise<ArrayLike<number>>;
  step(): Promise<void>;
  destroy(): void;
}
