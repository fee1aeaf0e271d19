/**
 * The learning-rate schedule of NVIDIA's BERT pre-training: linear warmup, then polynomial decay to zero
 * at the last step. A pure function, so the host can log it and tests can check the device-side schedule
 * against it.
 *
 * Definitions, from NVIDIA DeepLearningExamples PyTorch/LanguageModeling/BERT (schedulers.py,
 * `PolyWarmUpScheduler`; option names from run_pretraining.py, see /work/shared/reference/
 * nvidia-bert-pytorch-readme-excerpt.txt: `--learning_rate`, `--warmup_proportion`, `--max_steps`):
 *
 *   progress = step / total_steps
 *   lr = base * progress / warmup_proportion     while progress < warmup_proportion
 *   lr = base * (1 - progress) ** degree         afterwards
 *
 * `degree` defaults to 0.5, the class default that run_pretraining.py uses (some versions of that script
 * pass degree=1.0, i.e. linear decay; google-research/bert's optimization.py also decays linearly).
 *
 * Which step: NVIDIA's scheduler sets lr from the optimizer's own step count plus one before each
 * update, so the k-th applied update (k = 1, 2, ...) uses lr(k), and a step skipped for a gradient
 * overflow does not advance the schedule. Pass the 1-based number of the update about to be applied
 * (the trainer's optimizer step after incrementing), not the count of batches seen.
 *
 * Note the step down at the end of warmup: the rate climbs to just under `base`, then the decay branch
 * starts at base * (1 - warmupProportion) ** degree (about 0.85 base for NVIDIA's phase 1), because the
 * decay is measured from step 0, not from the end of warmup. That is NVIDIA's schedule and we keep it.
 *
 * Two deliberate differences: past `totalSteps` the rate is 0 (NVIDIA's formula would take a fractional
 * power of a negative number and give NaN), and warmupProportion 0 means no warmup (NVIDIA would divide
 * 0 by 0 only at step 0, which it never evaluates).
 */

import { DEFAULT_DEGREE, type ScheduleOptions } from "../optimizer/feeds.ts";
export { DEFAULT_DEGREE, type ScheduleOptions };

export class ScheduleError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ScheduleError";
  }
}

/** Throws a ScheduleError naming the first bad option. */
export function checkSchedule(o: ScheduleOptions): void {
  const bad = (what: string) => {
    throw new ScheduleError(`learning-rate schedule: ${what}`);
  };
  if (!Number.isFinite(o.base) || o.base < 0) bad(`base rate ${o.base} is not a non-negative number`);
  if (!(o.warmupProportion >= 0 && o.warmupProportion < 1)) {
    bad(`warmup proportion ${o.warmupProportion} is outside [0, 1)`);
  }
  if (!Number.isSafeInteger(o.totalSteps) || o.totalSteps < 1) {
    bad(`total steps ${o.totalSteps} is not a positive integer`);
  }
  const degree = o.degree ?? DEFAULT_DEGREE;
  if (!Number.isFinite(degree) || degree <= 0) bad(`degree ${degree} is not a positive number`);
}

/** The learning rate for the `step`-th optimizer update (1-based; see the file comment). */
export function learningRate(step: number, o: ScheduleOptions): number {
  checkSchedule(o);
  if (!Number.isSafeInteger(step) || step < 0) {
    throw new ScheduleError(`learning-rate schedule: step ${step} is not a non-negative integer`);
  }
  const progress = step / o.totalSteps;
  if (progress < o.warmupProportion) return o.base * progress / o.warmupProportion;
  if (progress >= 1) return 0;
  return o.base * (1 - progress) ** (o.degree ?? DEFAULT_DEGREE);
}

/** The first step that is past warmup: lr(step) has reached the decay branch. */
export function firstDecayStep(o: ScheduleOptions): number {
  checkSchedule(o);
  // Smallest integer s with s / total >= warmup, computed with the same division as learningRate so the
  // boundary agrees with it bit for bit (warmup * total can round differently from s / total).
  let s = Math.max(0, Math.floor(o.warmupProportion * o.totalSteps) - 1);
  while (s / o.totalSteps < o.warmupProportion) s++;
  return s;
}
