/**
 * Compiler bugs the fuzzer found that are not fixed yet, by the message they fail with. The CI tests
 * report a failure matching one of these as known (with its replay command) instead of failing the run,
 * so an unrelated change is not blocked; any other failure fails the run. Remove an entry when its bug is
 * fixed: the fixed seeds then pass like all others. `deno task fuzz` exits 1 on known failures too.
 */
export interface KnownBug {
  readonly pattern: RegExp;
  readonly what: string;
  /** Seeds of the fixed range that show it (fused; replay with --fused). */
  readonly seeds: readonly number[];
}

export const KNOWN_BUGS: readonly KnownBug[] = [
  {
    pattern: /pass 'lower' failed: cannot compute %\d+ reduce_sum inside a kernel at this index/,
    what: "fusion joins a reduction over axes [0,1,2] of a tensor whose axis 0 has size 1 with one over " +
      "[1,2] (the same rows, other axes lists); lowering then cannot compute it (e.g. x·rsqrt(mean(x²)+1) " +
      "and its gradient at batch 1)",
    seeds: [28, 98, 102, 130, 139],
  },
  {
    pattern: /after stage 'fusion-consumers': fused kernel \d+ writes nothing/,
    what: "consumer merging leaves a kernel with no output (batched GEMMs around a softmax)",
    seeds: [59, 159],
  },
  {
    pattern: /after stage 'fusion-consumers': kernel \d+ reads %\d+, which kernel \d+ writes no earlier/,
    what: "consumer merging moves a root so that a kernel reads it before it is written (LayerNorm " +
      "backward next to a linear layer, mixed precision)",
    seeds: [115, 117],
  },
];

export function knownBug(message: string): KnownBug | undefined {
  return KNOWN_BUGS.find((b) => b.pattern.test(message));
}
