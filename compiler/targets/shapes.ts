/**
 * Workgroup shapes a target profile gives reductions and loops: how many threads share a row or a column,
 * how many rows a row-block kernel walks. Fusion, the column-sums pass and lowering all ask these, so they
 * live beside the profile's knobs rather than in one of those stages.
 */
import type { TargetProfile } from "./profiles.ts";

export const LOOP_WORKGROUP = 256;
/** Threads per column of a split column sum where the profile does not size them to fill the device. */
export const SPLIT_GROUPS = 16;
/** Each thread of a split column sum adds at least this many terms before the workgroup combine. */
export const MIN_SPLIT_TERMS = 2;

/**
 * How many threads of a workgroup share each output of a column sum (`outputs` outputs, `rowLen` terms
 * each); 1: a thread per output, not split. Where the profile names a thread count to fill (a GPU), the
 * fewest (a power of two) that launch that many, so that a short column sum of few columns (the second
 * pass of a two-pass column sum: 256 parts × 1,024 columns) is not left to a sixteenth of the device;
 * else SPLIT_GROUPS (lavapipe, where a workgroup is a loop on one core and a thread more buys nothing).
 */
export function columnGroups(profile: TargetProfile, outputs: number, rowLen: number): number {
  if (rowLen < profile.columnSplitMinRows) return 1;
  if (!profile.columnFillThreads) return SPLIT_GROUPS;
  let groups = 1;
  while (
    groups * 2 <= LOOP_WORKGROUP && groups * 2 * MIN_SPLIT_TERMS <= rowLen &&
    outputs * groups < profile.columnFillThreads
  ) groups *= 2;
  return groups;
}

/** Most rows a row-block kernel walks per workgroup (FusedKernel.rowBlock). */
export const MAX_BLOCK_ROWS = 32;
/** Most elements of a row one thread of a row-block kernel owns: its per-part sums live in registers. */
const MAX_BLOCK_COLUMNS_PER_THREAD = 16;

/**
 * Threads per row of a reduction over trailing axes: a workgroup's (coalesced loads on a GPU), or 0 where
 * the profile has one thread walk each row (short rows; lavapipe and the CPU for many rows).
 */
export function rowWorkgroup(profile: TargetProfile, rows: number, rowLen: number): number {
  if (rowLen <= 32 || rows >= profile.perThreadMinRows) return 0;
  return Math.min(profile.reduceWorkgroupMax, Math.max(32, nextPow2(rowLen)));
}

/**
 * Can a row kernel over `rows` rows of `rowLen` walk several rows per workgroup and sum their columns
 * (FusedKernel.rowBlock)? Where the profile gives each row a workgroup whose threads own the same
 * columns of every row, few enough for registers.
 */
function rowBlockable(profile: TargetProfile, rows: number, rowLen: number): boolean {
  const wg = rowWorkgroup(profile, rows, rowLen);
  return wg > 0 && rowLen % wg === 0 && rowLen / wg <= MAX_BLOCK_COLUMNS_PER_THREAD;
}

/**
 * Rows per workgroup for a row kernel that also sums columns over its rows (fusion/row_blocks.ts): the
 * most (a power of two, up to MAX_BLOCK_ROWS) whose workgroups launch at least 15/16 of the profile's
 * `columnFillThreads`; 1 where rows are not a workgroup's each or nothing says what fills the device.
 * Why not all of it: the part sums cost 16 bytes per column per block of rows (two sums, written and
 * read back), against the ~10 bytes per element a LayerNorm backward moves, so doubling the rows past
 * the fill wins while the share of the device the cost model gives (targets/h100.ts saturatingThreads)
 * stays above about 11/12. BERT-large at batch 64 on an H100: 8,192 rows of 1,024, 256 threads a row,
 * 16 rows a workgroup (512 workgroups, 131,072 threads: 97% of the 135,168 that keep its memory busy;
 * the cost model: 38.708 ms a step against 38.802 with 8 rows); 32 would launch half of it.
 */
export function blockRows(profile: TargetProfile, rows: number, rowLen: number): number {
  if (!rowBlockable(profile, rows, rowLen) || !profile.columnFillThreads) return 1;
  const wg = rowWorkgroup(profile, rows, rowLen);
  const fills = (b: number) => (rows / b) * wg * 16 >= profile.columnFillThreads * 15;
  let b = 1;
  while (b * 2 <= MAX_BLOCK_ROWS && rows % (b * 2) === 0 && fills(b * 2)) b *= 2;
  return b;
}

/** The least power of two at or above `x` (1 for x ≤ 1). */
export function nextPow2(x: number): number {
  let p = 1;
  while (p < x) p *= 2;
  return p;
}
