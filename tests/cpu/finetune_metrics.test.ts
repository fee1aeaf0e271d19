/**
 * Fine-tuning metrics against hand-worked cases: GLUE's accuracy, F1, Matthews correlation, Pearson and
 * Spearman; the official SQuAD scripts' answer normalisation (articles, punctuation, whitespace, case),
 * v1.1's scoring (every question counts) and v2.0's HasAns / NoAns split and best threshold.
 */
import assert from "node:assert/strict";
import { accuracy, binaryF1, matthews, pearson, ranks, spearman } from "../../data/finetune/glue_metrics.ts";
import {
  exactMatch,
  f1Score,
  normalizeAnswer,
  squadV1Eval,
  squadV2Eval,
} from "../../data/finetune/squad_eval.ts";
import { naiveBayesAccuracy, naiveBayesPredict } from "../../data/finetune/naive_bayes.ts";
import type { SquadExample } from "../../data/finetune/squad.ts";
import { kebabFlags } from "../../cli/flag_spelling.ts";
import { progressFields } from "../../training/progress.ts";

const close = (a: number, b: number, tol = 1e-12) => assert.ok(Math.abs(a - b) <= tol, `${a} vs ${b}`);

Deno.test("GLUE metrics on a worked confusion matrix: TP 3, FP 1, FN 2, TN 4", () => {
  const gold = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0];
  const pred = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0];
  assert.equal(accuracy(pred, gold), 0.7);
  close(binaryF1(pred, gold), 6 / 9); // 2*3 / (2*3 + 1 + 2)
  close(matthews(pred, gold), (3 * 4 - 1 * 2) / Math.sqrt(4 * 5 * 5 * 6)); // 10 / sqrt(600)
  assert.equal(binaryF1([0, 0], [0, 0]), 0); // sklearn: no positives at all gives 0
  assert.equal(matthews([1, 1, 1], [1, 0, 1]), 0); // a constant prediction column
});

Deno.test("Pearson and Spearman: exact, anti-correlated, monotone and tied cases", () => {
  close(pearson([1, 2, 3], [2, 4, 6]), 1);
  close(pearson([1, 2, 3], [3, 2, 1]), -1);
  // x = 1..4, y = 1, 3, 2, 4: cov 4/4... sum dx*dy = 4, sxx = 5, syy = 5 -> 0.8
  close(pearson([1, 2, 3, 4], [1, 3, 2, 4]), 0.8);
  close(spearman([1, 10, 100, 1000], [2, 3, 5, 7]), 1); // monotone, not linear
  assert.deepEqual(ranks([10, 20, 20, 30]), [1, 2.5, 2.5, 4]);
  // scipy.stats.spearmanr([1,2,3,4],[1,2,2,3]) = 0.9486832980505138
  close(spearman([1, 2, 3, 4], [1, 2, 2, 3]), 0.9486832980505138, 1e-12);
});

Deno.test("SQuAD normalisation: case, punctuation, articles as whole words, whitespace", () => {
  assert.equal(normalizeAnswer("The  Eiffel\tTower."), "eiffel tower");
  assert.equal(normalizeAnswer("an anthem, a theme"), "anthem theme"); // 'an' inside 'anthem' stays
  assert.equal(normalizeAnswer("Theatre"), "theatre");
  assert.equal(normalizeAnswer("U.S.A."), "usa"); // punctuation is removed, not replaced by a space
  assert.equal(normalizeAnswer("rock-'n'-roll"), "rocknroll");
  assert.equal(normalizeAnswer(" \n "), "");
  assert.equal(exactMatch("the Denver Broncos", "Denver Broncos!"), 1);
  close(f1Score("Denver Broncos team", "the Denver Broncos"), 0.8); // p 2/3, r 1
  assert.equal(f1Score("", ""), 1); // v2.0: both empty
  assert.equal(f1Score("Broncos", ""), 0);
});

const ex = (id: string, answers: string[]): SquadExample => {
  const rest = { title: "", question: "", context: "", isImpossible: answers.length === 0 };
  return { id, answers: answers.map((text) => ({ text, start: 0 })), ...rest };
};

Deno.test("SQuAD v1.1 official scoring: best gold per question, a missing prediction scores 0", () => {
  const data = [ex("a", ["Denver Broncos", "The Broncos"]), ex("b", ["1990"]), ex("c", ["Paris"])];
  const r = squadV1Eval(data, new Map([["a", "broncos"], ["b", "in 1990"]]));
  close(r.exact_match, (100 * 1) / 3); // a: "broncos" equals "The Broncos" normalised; b: no; c: missing
  close(r.f1, (100 * (1 + 2 / 3 + 0)) / 3); // b: p 1/2, r 1 -> 2/3
});

Deno.test("SQuAD v2.0 official scoring: HasAns, NoAns and the best no-answer threshold", () => {
  const data = [ex("h1", ["Warsaw"]), ex("h2", ["Vistula river"]), ex("n1", []), ex("n2", [])];
  const preds = new Map([["h1", "Warsaw"], ["h2", "Oder"], ["n1", ""], ["n2", "Kraków"]]);
  const na = new Map([["h1", -2], ["h2", 1], ["n1", 3], ["n2", 0.5]]);
  const r = squadV2Eval(data, preds, na);
  [r.exact, r.HasAns_exact!, r.NoAns_exact!].forEach((x) => close(x, 50)); // h1 and n1 right
  assert.deepEqual([r.total, r.HasAns_total, r.NoAns_total], [4, 2, 2]);
  // Start from "all no-answer": 2 of 4. In na order h1 (+1 -> 3, thresh -2), n2 (-1), h2 (+0), n1 (0).
  close(r.best_exact!, 75);
  assert.equal(r.best_exact_thresh, -2);
  assert.equal(squadV2Eval(data, preds).best_exact, undefined);
});

Deno.test("bag-of-words Naive Bayes by hand: add-one smoothing; unseen words and padding skipped", () => {
  const row = (ids: number[], label: number, attention_mask = ids.map(() => 1)) => ({
    input_ids: ids,
    attention_mask,
    label,
  });
  // Class 0 counts 1:3 2:1 3:1 (5 words), class 1 2:1 3:2 (3 words); 3 words known; priors 2/3, 1/3.
  const train = [row([1, 1, 2], 0), row([1, 3], 0), row([2, 3, 3], 1)];
  // [1]: 2/3*4/8 vs 1/3*1/6; [3,3]: 2/3*(2/8)^2 vs 1/3*(3/6)^2; [2,9] (9 unseen): 2/3*2/8 vs 1/3*2/6;
  // [3,3,1] with the 1 padded is [3,3] (counted, it would go to class 0: 1/48 vs 1/72).
  const dev = [row([1], 0), row([3, 3], 1), row([2, 9], 1), row([3, 3, 1], 1, [1, 1, 0])];
  assert.deepEqual(naiveBayesPredict(train, dev, 2), [0, 1, 0, 1]);
  assert.equal(naiveBayesAccuracy(train, dev, 2), 0.75);
});

Deno.test("NVIDIA's snake_case option spelling becomes kebab case; values and positionals are kept", () => {
  assert.deepEqual(
    kebabFlags("--init_checkpoint=a_b/c_d --do_train --max_seq_length 12 x_y -- --keep_me".split(" ")),
    ["--init-checkpoint=a_b/c_d", "--do-train", "--max-seq-length", "12", "x_y", "--", "--keep_me"],
  );
});

Deno.test("finetune: the progress line calls the task's batch accuracy 'acc', not 'mlm acc'", () => {
  const fields = progressFields({ step: 3, loss: 0.5, accuracy: 0.625 }, 10, undefined);
  assert.ok(fields.includes("acc 62.5%"), fields.join("  "));
  assert.ok(!fields.some((f) => f.startsWith("mlm")), fields.join("  "));
});
