/**
 * The GLUE metrics, as GLUE's leaderboard and Hugging Face's glue_compute_metrics define them: accuracy;
 * F1 of the positive class (label 1) for MRPC and QQP; Matthews correlation for CoLA; Pearson and
 * Spearman correlation for STS-B (Spearman: Pearson of the ranks, tied values sharing their mean rank, as
 * scipy.stats.spearmanr does). Degenerate cases give 0 where sklearn gives 0 (F1 with no positives
 * predicted or present, MCC with a constant column) and NaN where scipy gives NaN (a constant column in a
 * correlation).
 */

export function accuracy(pred: readonly number[], gold: readonly number[]): number {
  same(pred, gold);
  if (pred.length === 0) return 0;
  let ok = 0;
  for (let i = 0; i < pred.length; i++) if (pred[i] === gold[i]) ok++;
  return ok / pred.length;
}

/** Counts of the binary confusion matrix with label 1 positive. */
function confusion(pred: readonly number[], gold: readonly number[]) {
  same(pred, gold);
  let tp = 0, fp = 0, fn = 0, tn = 0;
  for (let i = 0; i < pred.length; i++) {
    if (pred[i] === 1 && gold[i] === 1) tp++;
    else if (pred[i] === 1) fp++;
    else if (gold[i] === 1) fn++;
    else tn++;
  }
  return { tp, fp, fn, tn };
}

/** F1 of class 1: 2·TP / (2·TP + FP + FN). */
export function binaryF1(pred: readonly number[], gold: readonly number[]): number {
  const { tp, fp, fn } = confusion(pred, gold);
  return tp === 0 ? 0 : (2 * tp) / (2 * tp + fp + fn);
}

/** Matthews correlation coefficient of a binary task. */
export function matthews(pred: readonly number[], gold: readonly number[]): number {
  const { tp, fp, fn, tn } = confusion(pred, gold);
  const den = Math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn));
  return den === 0 ? 0 : (tp * tn - fp * fn) / den;
}

export function pearson(x: readonly number[], y: readonly number[]): number {
  same(x, y);
  const n = x.length;
  const mx = x.reduce((a, b) => a + b, 0) / n, my = y.reduce((a, b) => a + b, 0) / n;
  let sxy = 0, sxx = 0, syy = 0;
  for (let i = 0; i < n; i++) {
    const dx = x[i] - mx, dy = y[i] - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  return sxy / Math.sqrt(sxx * syy);
}

/** 1-based ranks, ties sharing the mean of the ranks they span. */
export function ranks(x: readonly number[]): number[] {
  const order = x.map((_, i) => i).sort((a, b) => x[a] - x[b]);
  const r = new Array<number>(x.length);
  for (let i = 0; i < order.length;) {
    let j = i;
    while (j + 1 < order.length && x[order[j + 1]] === x[order[i]]) j++;
    for (let k = i; k <= j; k++) r[order[k]] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return r;
}

export function spearman(x: readonly number[], y: readonly number[]): number {
  return pearson(ranks(x), ranks(y));
}

function same(a: readonly number[], b: readonly number[]): void {
  if (a.length !== b.length) throw new RangeError(`${a.length} predictions for ${b.length} labels`);
}
