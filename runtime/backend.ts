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
