/**
 * Target profiles: what lowering tunes for a kind of device, by name, rather than as constants that suit
 * one device and hurt another: `lavapipe` and `cpu`, where a workgroup is a loop on one CPU core (a row
 * reduction is one invocation per row), and `webgpu-gpu` and `cuda-sm90`, real GPUs (a workgroup per row,
 * coalesced). Binding limits are the adapter's, not a profile's: KernelOptions.maxBindings, passed by the
 * backend that opened it (engine/backends.ts). Measurements: DESIGN.md, notes: compiler/targets/profiles.ts.
 */

import { H100_SXM } from "./h100.ts";

export interface TargetProfile {
  readonly name: ProfileName;
  readonly about: string;
  /**
   * A row reduction (reduced axes trailing, rows longer than 32) takes one thread per row when it has at
   * least this many rows, else a workgroup per row. Infinity: always a workgroup per row.
   */
  readonly perThreadMinRows: number;
  /** The largest workgroup a workgroup-per-row reduction uses (a power of two). */
  readonly reduceWorkgroupMax: number;
  /**
   * Threads per column of a scatter-add, each owning every owners-th row of the table (shapes.ts
   * lowerScatter): 1 is a serial loop per column; a GPU needs enough to fill it.
   */
  readonly scatterOwners: number;
  /**
   * A scatter-add into a table of at most this many rows becomes a masked column sum (compiler/
   * scatter_sums.ts), split into parts like any long column sum. The owner lowering gives such a table
   * only rows × columns threads each walking every index, where the column sum gives parts × rows ×
   * columns; but each row's sum reads every update, so past a few rows the re-reads cost more than the
   * threads gain. 0: never (a workgroup is a loop on one core, nothing to fill).
   */
  readonly scatterMaskedMaxRows: number;
  /**
   * A column sum over at least this many rows shares each column among several threads of a workgroup
   * (shapes.ts columnGroups, lowerReduce). Infinity on the CPU: a workgroup is a loop there, and the
   * shared-memory combine with its barriers cost more than it spread (BERT-tiny's training step: 22.4 ->
   * 16.2 ms of column sums without it, 2-core machine).
   */
  readonly columnSplitMinRows: number;
  /**
   * How many threads a split column sum should launch (shapes.ts columnGroups takes the fewest
   * threads per column, a power of two up to a workgroup, that reach it); 0: SPLIT_GROUPS per column,
   * where a workgroup is a loop on one core (lavapipe) and more threads only add combine steps.
   */
  readonly columnFillThreads: number;
  /**
   * Reductions over one space and axes that each move at most this many bytes, neither waiting for the
   * other, merge into one kernel (fusion/horizontal.ts): on a GPU a launch costs as much as megabytes of
   * traffic. 0: none (lavapipe and the CPU, where a dispatch is cheap next to the serial work).
   */
  readonly smallReductionBytes: number;
  /**
   * A column sum over many rows is split into up to this many parts first (compiler/passes/split_column_sums.ts), as
   * few as give its first pass `columnFillThreads` threads where that is set.
   */
  readonly columnSumParts: number;
  /**
   * QKᵀ, softmax and PV fused into one attention kernel (compiler/fusion/attention.ts) where nothing else
   * reads the probabilities. Off where GEMMs run on a library and the attention kernel does not: on CUDA
   * (until a tensor-core attention kernel exists, issue 16) and on the CPU (BLAS), the two GEMMs as library
   * calls beat it (the cost model at bert-large inference, batch 1: 6.9 ms of 8.0 in the fused kernels).
   * "always" also skips its shape rule (fusion/attention.ts attentionPays), for bench/attention.ts.
   */
  readonly fuseAttention: boolean | "always";
  /**
   * Training's self-attentions (head dim 64, sequence a multiple of 64) run as flash-attention kernels
   * written in CUDA C for sm_90 (stages/flash_attention.ts); only a CUDA target may set it.
   */
  readonly flashAttention: boolean;
}

export type ProfileName = "lavapipe" | "cpu" | "webgpu-gpu" | "cuda-sm90";

const SERIAL_ROWS = {
  perThreadMinRows: 256,
  reduceWorkgroupMax: 256,
  scatterOwners: 1,
  scatterMaskedMaxRows: 0,
  columnSumParts: 1,
  columnSplitMinRows: 256,
  columnFillThreads: 0,
  smallReductionBytes: 0,
};
// 128 owners × BERT-large's 1,024 columns = 131,072 threads: about what keeps an H100's memory busy.
// Column sums in up to 256 parts: a bias gradient over 8,192 tokens is 256 × 1,024 first-pass threads of 32
// rows each (the cost model at batch 64: 1,032 sequences/s with 128 parts, 1,123 with 256).
const ROW_PER_WORKGROUP = {
  perThreadMinRows: Infinity,
  reduceWorkgroupMax: 256,
  scatterOwners: 128,
  // 8: the most rows (a power of two) at which the masked sum still wins if every row's re-read of the
  // updates came from DRAM, not L2 (the cost model, 8,192 tokens × 1,024 f16 columns: 54 µs against the
  // owner lowering's 95; at 12 rows 80 against 68). BERT's token types are 2 rows: 742 -> 13 µs.
  scatterMaskedMaxRows: 8,
  columnSumParts: 256,
  // Any column sum whose outputs alone leave the device idle is split; columnGroups takes the threads per
  // column that fill it, each adding at least two terms (the second pass of a bias gradient, 256 parts ×
  // 1,024 columns: 128 threads a column, 131,072 in all, where SPLIT_GROUPS gave 16,384; the cost model:
  // 4.9 -> 2.4 µs each, 42.364 -> 42.058 ms a step at batch 64).
  columnSplitMinRows: 4,
  // What keeps an H100's memory busy, as the cost model has it (targets/h100.ts saturatingThreads).
  columnFillThreads: H100_SXM.saturatingThreads,
  // A launch (2 µs on an H100, targets/h100.ts) is the time of about 6 MB of its traffic; a LayerNorm
  // backward's second pass reads 8 MiB of part sums (BERT-large, batch 64), so 16 MiB takes those.
  smallReductionBytes: 16 << 20,
};

export const PROFILES: Readonly<Record<ProfileName, TargetProfile>> = {
  lavapipe: {
    name: "lavapipe",
    about: "software Vulkan (CI): one thread per row",
    ...SERIAL_ROWS,
    fuseAttention: true,
    flashAttention: false,
  },
  cpu: {
    name: "cpu",
    about: "emitted C on CPU cores: one thread per row or column; attention's GEMMs on BLAS",
    ...SERIAL_ROWS,
    columnSplitMinRows: Infinity,
    fuseAttention: false,
    flashAttention: false,
  },
  "webgpu-gpu": {
    name: "webgpu-gpu",
    about: "a GPU through WebGPU: a workgroup per row, coalesced loads",
    ...ROW_PER_WORKGROUP,
    fuseAttention: true,
    flashAttention: false,
  },
  "cuda-sm90": {
    name: "cuda-sm90",
    about: "an H100 (sm_90) through CUDA: a block per row, warp-shuffle reductions, coalesced loads; " +
      "attention's GEMMs on cuBLASLt",
    ...ROW_PER_WORKGROUP,
    fuseAttention: false,
    flashAttention: true,
  },
};

/** The profile a compile uses when none is named: today's behaviour, tuned for where tests run. */
export const DEFAULT_PROFILE = PROFILES.lavapipe;

export const PROFILE_NAMES = Object.keys(PROFILES) as ProfileName[];
