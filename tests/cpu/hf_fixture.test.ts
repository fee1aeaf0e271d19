/**
 * The reference backend against an independent implementation: tools/make_hf_fixtures.py writes a
 * random tiny BERT in Hugging Face layout with outputs and loss gradients computed by PyTorch from the
 * equations (in f64, from the same f32 weights). Error is measured per tensor as
 * max|ours - expected| / max|expected|.
 */
import { BATCH_INPUTS } from "../../data/heldout.ts";
import assert from "node:assert/strict";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { defineBert, type Head, INFER_OUTPUTS } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { loadHfWeights } from "../../model_io/hf_checkpoint.ts";
import { readSafetensorsFile, toFloat64 } from "../../model_io/safetensors.ts";
import { runInference } from "../../runtime/infer.ts";
import { parseEncodedRows } from "../../model_io/infer_input.ts";
import { referenceBackend } from "../../runtime/reference/reference_backend.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";

const FX = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const expected = (await readSafetensorsFile(`${FX}expected.safetensors`)).tensors;

function expectedOf(name: string): Float64Array {
  const t = expected.get(name);
  assert.ok(t, `fixture has no tensor '${name}'`);
  return toFloat64(t);
}

function relError(actual: ArrayLike<number>, want: Float64Array): number {
  assert.equal(actual.length, want.length);
  let diff = 0, scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(actual[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
  }
  // Tensors that are exactly zero in exact math (the key biases' gradients) are judged absolutely.
  return scale === 0 ? diff : diff / scale;
}

async function inferHead(head: Head, dir: string, precision: "f32" | "f64", batchSize: number) {
  const cfg = readBertConfig(`${FX}${dir}/config.json`);
  const model = defineBert("fixture", cfg);
  const weights = await loadHfWeights(
    model.build({ head, mode: "infer", batchSize: 1, seqLen: 1 }),
    `${FX}${dir}`,
  );
  const rows = parseEncodedRows(await Deno.readTextFile(`${FX}inputs.jsonl`), "inputs.jsonl", {
    vocabSize: cfg.vocab_size,
    typeVocabSize: cfg.type_vocab_size,
    maxPositions: cfg.max_position_embeddings,
  });
  return runInference(rows, {
    batchSize,
    outputs: INFER_OUTPUTS[head],
    graphFor: (b, s) => model.build({ head, mode: "infer", batchSize: b, seqLen: s }),
    backend: referenceBackend(precision),
    weights,
  });
}

const HEADS: [Head, string][] = [
  ["pretraining", "pretraining"],
  ["pretraining", "pretraining-gamma"],
  ["classification", "classification"],
  ["qa", "qa"],
];

for (const [head, dir] of HEADS) {
  for (const precision of ["f64", "f32"] as const) {
    // Batch size 3 splits the 4 rows into batches padded to different lengths.
    for (const batchSize of [4, 3]) {
      Deno.test(`fixture forward: ${dir} (${precision}, batch ${batchSize}) matches PyTorch`, async () => {
        const out = await inferHead(head, dir, precision, batchSize);
        for (const { name } of INFER_OUTPUTS[head]) {
          const want = expectedOf(`${head}.${name}`);
          const got = out.get(name)!;
          assert.deepEqual(got.shape, expected.get(`${head}.${name}`)!.shape);
          const err = relError(got.data, want);
          // f64 differs from PyTorch's f64 only by the f32 rounding of the stored results.
          const tol = precision === "f64" ? 1e-7 : 1e-5;
          assert.ok(err <= tol, `${name}: relative error ${err} > ${tol}`);
        }
      });
    }
  }
}

for (const precision of ["f64", "f32"] as const) {
  Deno.test(`fixture pretraining loss and gradients (${precision}) match PyTorch`, async () => {
    const cfg = readBertConfig(`${FX}pretraining/config.json`);
    const [n, s] = expected.get("train.input_ids")!.shape;
    const p = expected.get("train.masked_lm_positions")!.shape[1];
    const g = defineBert("fixture", cfg).build({
      head: "pretraining",
      mode: "train",
      batchSize: n,
      seqLen: s,
      maxPredictions: p,
      dropout: false,
    });
    const weights = await loadHfWeights(g, `${FX}pretraining`);
    const feeds: Record<string, ArrayLike<number>> = Object.fromEntries(weights);
    for (const k of BATCH_INPUTS) feeds[k] = expectedOf(`train.${k}`);
    const out = evaluate(differentiate(g, "loss"), feeds, { precision });
    const tol = precision === "f64" ? 1e-7 : 1e-4;
    for (const name of ["loss", "mlm_loss", "nsp_loss"]) {
      const err = relError(out.get(name)!, expectedOf(`train.${name}`));
      assert.ok(err <= tol, `${name}: relative error ${err} > ${tol}`);
    }
    let checked = 0;
    for (const [name] of weights) {
      const err = relError(out.get(`grad.${name}`)!, expectedOf(`grad.${name}`));
      assert.ok(err <= tol, `grad.${name}: relative error ${err} > ${tol}`);
      checked++;
    }
    assert.equal(checked, 46, "every pretraining parameter's gradient is compared");
  });
}
