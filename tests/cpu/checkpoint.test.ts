/** Hugging Face checkpoint mapping: spellings, tied decoder, strict errors, write -> read round trips. */
import assert from "node:assert/strict";
import { defineBert } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import {
  CheckpointError,
  loadHfWeights,
  mapHfTensors,
  writeHfCheckpoint,
} from "../../model_io/hf_checkpoint.ts";
import { parseSafetensors, readSafetensorsFile, serializeSafetensors } from "../../model_io/safetensors.ts";
import { initParams } from "../../model_io/init_params.ts";

const FX = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const cfg = readBertConfig(`${FX}pretraining/config.json`);
const model = defineBert("ckpt-test", cfg);
const graph = (head: "pretraining" | "classification" | "qa") =>
  model.build({ head, mode: "infer", batchSize: 1, seqLen: 4 });

Deno.test("old LayerNorm spelling (gamma/beta) and a stored tied decoder load to the same weights", async () => {
  const g = graph("pretraining");
  const a = await loadHfWeights(g, `${FX}pretraining`);
  const b = await loadHfWeights(g, `${FX}pretraining-gamma`);
  assert.equal(a.size, 46);
  for (const [name, w] of a) assert.deepEqual(b.get(name), w, name);
  // The decoder weight is not a separate parameter: it is the word embedding matrix.
  assert.ok(!g.sources("param").has("cls.predictions.decoder.weight"));
});

async function tensorsOf(dir: string) {
  return (await readSafetensorsFile(`${FX}${dir}/model.safetensors`)).tensors;
}

Deno.test("missing, extra and mis-shaped tensors are named in one CheckpointError", async () => {
  const g = graph("pretraining");
  const t = new Map(await tensorsOf("pretraining"));
  t.delete("cls.seq_relationship.bias");
  t.set("something.extra", t.get("cls.predictions.bias")!);
  const ln = t.get("bert.embeddings.LayerNorm.weight")!;
  t.set("bert.embeddings.LayerNorm.weight", { ...ln, shape: [2, 16] });
  assert.throws(
    () => mapHfTensors(g, t, "bad.safetensors"),
    (e: Error) =>
      e instanceof CheckpointError && e.message.startsWith("bad.safetensors:") &&
      e.message.includes("1 missing (cls.seq_relationship.bias [2])") &&
      e.message.includes("1 unexpected (something.extra [99])") &&
      e.message.includes("bert.embeddings.LayerNorm.weight is [2,16], expected [32]"),
  );
});

Deno.test("a checkpoint of another head is refused with a hint", async () => {
  await assert.rejects(
    () => loadHfWeights(graph("qa"), `${FX}pretraining`),
    (e: Error) => e instanceof CheckpointError && /was it saved for another head\?/.test(e.message),
  );
});

Deno.test("integer tensors are refused as parameters", async () => {
  const t = new Map(await tensorsOf("qa"));
  t.set("qa_outputs.bias", { dtype: "I32", shape: [2], bytes: new Uint8Array(8) });
  assert.throws(() => mapHfTensors(graph("qa"), t, "x"), /qa_outputs\.bias is I32/);
});

Deno.test("a missing model.safetensors names the path", async () => {
  await assert.rejects(
    () => loadHfWeights(graph("qa"), "/nonexistent-dir"),
    /nonexistent-dir\/model\.safetensors: not found/,
  );
});

Deno.test("files saved from a bare BertModel (no 'bert.' prefix) load", async () => {
  const g = model.build({ head: "qa", mode: "infer", batchSize: 1, seqLen: 4 });
  const t = await tensorsOf("qa");
  const bare = new Map([...t].map(([k, v]) => [k.replace(/^bert\./, ""), v]));
  const a = mapHfTensors(g, t, "a"), b = mapHfTensors(g, bare, "b");
  for (const [name, w] of a) assert.deepEqual(b.get(name), w);
});

for (const dtype of ["F32", "F16", "BF16"] as const) {
  Deno.test(`writeHfCheckpoint (${dtype}) round-trips through loadHfWeights`, async () => {
    const g = graph("classification");
    const weights = initParams(g, 7);
    const dir = await Deno.makeTempDir();
    try {
      await writeHfCheckpoint(
        dir,
        g,
        { ...cfg, architectures: ["BertForSequenceClassification"] },
        weights,
        dtype,
      );
      const back = await loadHfWeights(g, dir);
      const round = dtype === "F32"
        ? (x: number) => Math.fround(x)
        : dtype === "F16"
        ? (x: number) => Math.f16round(x)
        : undefined;
      for (const [name, w] of weights) {
        const r = back.get(name)!;
        for (let i = 0; i < w.length; i++) {
          if (round) assert.equal(r[i], round(w[i]), `${name}[${i}]`);
          else assert.ok(Math.abs(r[i] - w[i]) <= Math.abs(w[i]) * 2 ** -8, `${name}[${i}] bf16`);
        }
      }
      assert.deepEqual(readBertConfig(`${dir}/config.json`).architectures, ["BertForSequenceClassification"]);
      // No temporary files are left behind.
      const names = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
      assert.deepEqual(names, ["config.json", "model.safetensors"]);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("written checkpoints are byte-identical run to run", () => {
  const g = graph("qa");
  const w = initParams(g, 3);
  const bytes = () =>
    serializeSafetensors(
      new Map([...w].map(([k, v]) => [k, { dtype: "F32" as const, shape: [v.length], data: v }])),
    );
  assert.deepEqual(bytes(), bytes());
  assert.equal(parseSafetensors(bytes(), "x").tensors.size, w.size);
});
