/**
 * Which seeds a CI run checks: a fixed range 1..fixed, the same every run (a regression there is a
 * regression), plus `extra` consecutive seeds starting at one derived from the commit, so each commit
 * explores graphs no earlier run saw while a given commit always checks the same ones. FUZZ_SEED
 * overrides the commit's seed (CI can pass one; it is also the way to replay a CI run elsewhere).
 */

/** FNV-1a of a string, folded into [2^20, 2^31): far above the fixed range. */
export function seedOfText(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return 2 ** 20 + (h % (2 ** 31 - 2 ** 20));
}

/** The first seed of this commit's range: FUZZ_SEED, else a hash of `git rev-parse HEAD`, else 2^20. */
export async function commitSeed(): Promise<{ seed: number; from: string }> {
  const env = Deno.env.get("FUZZ_SEED");
  if (env !== undefined) {
    if (!/^\d+$/.test(env)) throw new Error(`FUZZ_SEED must be a non-negative integer, got '${env}'`);
    return { seed: Number(env), from: "FUZZ_SEED" };
  }
  try {
    const out = await new Deno.Command("git", {
      args: ["rev-parse", "HEAD"],
      stdout: "piped",
      stderr: "null",
    })
      .output();
    const head = new TextDecoder().decode(out.stdout).trim();
    if (out.success && head) return { seed: seedOfText(head), from: `commit ${head.slice(0, 12)}` };
  } catch {
    // no git: the fixed fallback below
  }
  return { seed: 2 ** 20, from: "no git (fixed fallback)" };
}

/** The CI seeds: 1..fixed, then `extra` from `start`. */
export function ciSeeds(fixed: number, start: number, extra: number): number[] {
  return [
    ...Array.from({ length: fixed }, (_, i) => i + 1),
    ...Array.from({ length: extra }, (_, i) => start + i),
  ];
}
