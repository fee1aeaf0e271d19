/**
 * Tile shapes for the matmul template (compiler/lower/matmul_template.ts) and the choice among them. The
 * choice is a pure function of the problem shape, never of the device, so generated kernels are
 * byte-identical on every machine. The candidates are tuned for lavapipe, where fat micro-tiles win;
 * compile time matters too: see FAT_TILES (measurements: DESIGN.md, notes: compiler/lower/matmul_tiles.ts).
 */
import { nextPow2 } from "../targets/shapes.ts";

/**
 * One tiling: a workgroup computes a `tm`×`tn` tile of C, stepping K by `tk` through shared memory; each
 * thread owns an `rm`×`rn` micro-tile, so a workgroup has (tm/rm)·(tn/rn) threads.
 */
export interface MatmulTiles {
  readonly tm: number;
  readonly tn: number;
  readonly tk: number;
  readonly rm: number;
  readonly rn: number;
}

export const threadsOf = (t: MatmulTiles): number => (t.tm / t.rm) * (t.tn / t.rn);

/**
 * Upper bound of the template's workgroup memory for `t`, in bytes: both slabs padded by a word per k
 * row, plus the staging block of one micro-tile row per thread.
 */
export const sharedBytesOf = (t: MatmulTiles): number =>
  4 * (t.tk * (t.tm + 1) + t.tk * (t.tn + 1) + (t.tm / t.rm) * t.tn);

/**
 * The fat tile: fastest per flop on lavapipe, but its 256 accumulators per thread make LLVM take 2–4 s
 * to compile it (8×8: ~0.5 s), so it is chosen only for problems of at least `FAT_MIN_FLOPS`, where a
 * hundred launches save more than that (at 2^28 flops a launch takes ~50 ms with 8×8 tiles, ~30 ms fat).
 */
export const FAT_TILES: MatmulTiles = { tm: 128, tn: 128, tk: 8, rm: 16, rn: 16 };
export const FAT_MIN_FLOPS = 2 ** 28;

/** The other candidates, in order of preference (fastest per useful flop on lavapipe first). */
export const REGULAR_TILES: readonly MatmulTiles[] = [
  { tm: 64, tn: 64, tk: 16, rm: 8, rn: 8 },
  { tm: 32, tn: 32, tk: 16, rm: 4, rn: 4 },
  { tm: 16, tn: 16, tk: 16, rm: 2, rn: 2 },
];

export const TILE_CANDIDATES: readonly MatmulTiles[] = [FAT_TILES, ...REGULAR_TILES];

/**
 * Relative speed of each candidate per computed multiply-add on lavapipe, from the 512³ measurements above
 * (GFLOP/s): fat 8.0, 64×64/8×8 5.1, 32×32/4×4 2.7, 16×16/2×2 1.6.
 */
const SPEED = new Map<MatmulTiles, number>([
  [FAT_TILES, 8.0],
  [REGULAR_TILES[0], 5.1],
  [REGULAR_TILES[1], 2.7],
  [REGULAR_TILES[2], 1.6],
]);

/**
 * Enough workgroups that the CI machine's two cores both get work (at 128×128×1024, two or four 64×64 tiles
 * beat one 128×128 tile). Two, not more: the MLM head's input gradient (40 × 128 with K = 30,522) ran in
 * 170 ms as eight 32×32 tiles and 85 ms as two 64×64 ones on lavapipe. A discrete GPU wants far more
 * workgroups (and split-K for such shapes); these tiles are tuned for the CPU device CI runs on.
 */
export const MIN_WORKGROUPS = 2;

/**
 * The candidate with the best useful throughput — its speed times the fraction of the C elements it
 * computes that are in range — among those giving at least MIN_WORKGROUPS workgroups (else the smallest
 * tile). A skinny problem (m = 40 masked positions against a 30,522-word vocabulary) is thus better served
 * by 64×64 tiles that are 62% useful than by 16×16 tiles that are 83% useful but 3× slower per flop. K steps
 * shrink for short K so a slab is not mostly zeros.
 */
export function chooseTiles(m: number, n: number, k: number, batch: number): MatmulTiles {
  const wgs = (t: MatmulTiles) => batch * Math.ceil(m / t.tm) * Math.ceil(n / t.tn);
  const fat = 2 * batch * m * n * k >= FAT_MIN_FLOPS;
  const candidates = (fat ? TILE_CANDIDATES : REGULAR_TILES).filter((t) => wgs(t) >= MIN_WORKGROUPS);
  const score = (t: MatmulTiles) => SPEED.get(t)! * usefulFraction(t, m, n);
  const pick = candidates.length
    ? candidates.reduce((best, t) => (score(t) > score(best) ? t : best))
    : REGULAR_TILES[REGULAR_TILES.length - 1];
  const tk = Math.min(pick.tk, Math.max(4, nextPow2(k)));
  return tk === pick.tk ? pick : { ...pick, tk };
}

/** In-range elements over computed elements of C. */
export function usefulFraction(t: MatmulTiles, m: number, n: number): number {
  return (m * n) / (Math.ceil(m / t.tm) * t.tm * Math.ceil(n / t.tn) * t.tn);
}
