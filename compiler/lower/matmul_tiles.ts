/**
 * Tile shapes for the WGSL matmul template (compiler/lower/matmul_template.ts), and the deterministic
 * choice among them from the problem shape alone (never from the device), so that generated kernels are
 * byte-identical on every machine.
 */

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

/** Candidates from the biggest tile down; the choice walks this list. */
export const TILE_CANDIDATES: readonly MatmulTiles[] = [
  { tm: 64, tn: 64, tk: 16, rm: 4, rn: 4 },
  { tm: 32, tn: 64, tk: 16, rm: 4, rn: 4 },
  { tm: 64, tn: 32, tk: 16, rm: 4, rn: 4 },
  { tm: 32, tn: 32, tk: 16, rm: 4, rn: 4 },
  { tm: 16, tn: 32, tk: 16, rm: 2, rn: 4 },
  { tm: 32, tn: 16, tk: 16, rm: 4, rn: 2 },
  { tm: 16, tn: 16, tk: 16, rm: 2, rn: 2 },
];

/**
 * The largest candidate whose tiles are at least `MIN_USEFUL` full (the fraction of computed C elements
 * that are in range), so a 33×17 problem does not run a 64×64 tile of which 86% is padding. Among equally
 * useful candidates the bigger tile wins: it reads each operand element fewer times from memory.
 */
const MIN_USEFUL = 0.75;

export function chooseTiles(m: number, n: number, _k: number, _batch: number): MatmulTiles {
  for (const t of TILE_CANDIDATES) {
    if (usefulFraction(t, m, n) >= MIN_USEFUL) return t;
  }
  // Nothing is mostly full (e.g. 5×3): take the tile that wastes least, the smallest on ties.
  let best = TILE_CANDIDATES[TILE_CANDIDATES.length - 1];
  for (const t of TILE_CANDIDATES) {
    if (usefulFraction(t, m, n) > usefulFraction(best, m, n)) best = t;
  }
  return best;
}

/** In-range elements over computed elements. */
export function usefulFraction(t: MatmulTiles, m: number, n: number): number {
  return (m * n) / (Math.ceil(m / t.tm) * t.tm * Math.ceil(n / t.tn) * t.tn);
}
