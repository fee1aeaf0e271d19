/**
 * Checkpoints a Hugging Face user can open: config.json names the head's architecture (and labels), and
 * the tokenizer files sit beside it. The vocabulary is read back by our reader and by the npm package
 * @huggingface/tokenizers (a second implementation), which must give the same ids for random text.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { defineBert } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { numel } from "../../ir/mod.ts";
import {
  CheckpointError,
  readCheckpoint,
  verifyCheckpoint,
  writeCheckpoint,
} from "../../training/checkpoint.ts";
import { writeHfCheckpoint } from "../../model_io/hf_checkpoint.ts";
import { hfHeadConfig } from "../../model_io/hf_head_files.ts";
import { BertTokenizer, readVocabFile } from "../../data/tokenizer/mod.ts";
import { seededRandom } from "../../cases/random.ts";

const FX = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] || 1;
const rng = seededRandom(SEED);
const tokens = Deno.readTextFileSync(`${FX}qa/vocab.txt`).split("\n").slice(0, -1);

function modelFor(dir: string, head: "pretraining" | "classification" | "qa") {
  const cfgPath = `${FX}${dir}/config.json`;
  const cfg = readBertConfig(cfgPath);
  const graph = defineBert("head-files-test", cfg).build({ head, mode: "infer", batchSize: 1, seqLen: 4 });
  const weights = new Map<string, Float32Array>();
  for (const [name, node] of graph.sources("param")) {
    weights.set(name, Float32Array.from({ length: numel(node.type.shape) }, () => rng.normal()));
  }
  return { graph, weights, config: JSON.parse(Deno.readTextFileSync(cfgPath)) };
}

/** HF's tokenizer.json for a vocab.txt read with tokenizer_config.json's casing, as from_pretrained builds. */
function hfFromFolder(dir: string): HfTokenizer {
  const vocabLines = Deno.readTextFileSync(join(dir, "vocab.txt")).split("\n").slice(0, -1);
  const tc = JSON.parse(Deno.readTextFileSync(join(dir, "tokenizer_config.json")));
  const sm = JSON.parse(Deno.readTextFileSync(join(dir, "special_tokens_map.json")));
  const vocab = Object.fromEntries(vocabLines.map((t, i) => [t, i]));
  return new HfTokenizer({
    normalizer: {
      type: "BertNormalizer",
      clean_text: true,
      handle_chinese_chars: tc.tokenize_chinese_chars,
      strip_accents: tc.strip_accents,
      lowercase: tc.do_lower_case,
    },
    pre_tokenizer: { type: "BertPreTokenizer" },
    model: {
      type: "WordPiece",
      unk_token: sm.unk_token,
      continuing_subword_prefix: "##",
      max_input_chars_per_word: 100,
      vocab,
    },
    post_processor: {
      type: "BertProcessing",
      sep: [sm.sep_token, vocab[sm.sep_token]],
      cls: [sm.cls_token, vocab[sm.cls_token]],
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    added_tokens: [],
  }, { do_lower_case: tc.do_lower_case });
}

/** Random text from the vocabulary's words and pieces, mixed case, with unknown words. */
function randomText(): string {
  const words = tokens.filter((t) => !t.startsWith("[") && !t.startsWith("##"));
  const out: string[] = [];
  for (let i = 0; i < 12; i++) {
    let w = words[Math.floor(rng.uniform() * words.length)];
    if (rng.uniform() < 0.3) w = w.toUpperCase();
    if (rng.uniform() < 0.2) w += "ed";
    if (rng.uniform() < 0.1) w = "zebra";
    out.push(w);
  }
  return out.join(" ");
}

Deno.test("a pre-training checkpoint carries the tokenizer; both tokenizers read it back alike", async () => {
  const run = await Deno.makeTempDir({ prefix: "bertfuse-headfiles-" });
  try {
    const { graph, weights, config } = modelFor("pretraining", "pretraining");
    const { dir, manifest } = await writeCheckpoint(run, 3, {
      model: {
        graph,
        config,
        weights,
        head: { head: "pretraining", tokenizer: { tokens, lowerCase: true } },
      },
      optimizer: new Map([["m", new Float32Array([1, 2])]]),
      state: { step: 3, optimizerStep: 3, lossScaler: {}, schedule: {}, rng: {}, loader: {}, args: {} },
    });
    assert.deepEqual(manifest.files.map((f) => f.name), [
      "config.json",
      "model.safetensors",
      "optimizer.safetensors",
      "special_tokens_map.json",
      "tokenizer_config.json",
      "trainer_state.json",
      "vocab.txt",
    ]);
    await verifyCheckpoint(dir);
    await readCheckpoint(dir, { graph });
    const c = JSON.parse(await Deno.readTextFile(join(dir, "config.json")));
    assert.deepEqual(c.architectures, ["BertForPreTraining"]);
    assert.equal(c.model_type, "bert");
    // The fields BertConfig needs to rebuild the model.
    for (
      const k of [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "max_position_embeddings",
        "type_vocab_size",
        "layer_norm_eps",
      ]
    ) {
      assert.equal(c[k], config[k], k);
    }
    assert.equal(c.id2label, undefined);
    const tc = JSON.parse(await Deno.readTextFile(join(dir, "tokenizer_config.json")));
    assert.equal(tc.do_lower_case, true);
    assert.equal(tc.tokenizer_class, "BertTokenizer");
    assert.equal(tc.model_max_length, config.max_position_embeddings);

    const ours = new BertTokenizer(await readVocabFile(join(dir, "vocab.txt"), !tc.do_lower_case));
    assert.equal(ours.vocabSize, tokens.length);
    const hf = hfFromFolder(dir);
    for (let i = 0; i < 20; i++) {
      const text = randomText();
      const theirs = hf.encode(text, { add_special_tokens: false }).ids;
      assert.deepEqual(ours.ids(text), theirs, `${JSON.stringify(text)} (seed ${SEED})`);
      assert.ok(theirs.some((id) => id !== ours.special.unk), "the text is mostly known words");
    }
  } finally {
    await Deno.remove(run, { recursive: true });
  }
});

Deno.test("classification: id2label/label2id/num_labels; one output is regression; QA names its class", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-headfiles-" });
  try {
    const { graph, weights, config } = modelFor("classification", "classification");
    const labels = ["negative", "neutral", "positive"];
    const written = await writeHfCheckpoint(dir, graph, config, weights, "F32", {
      head: "classification",
      labels,
      tokenizer: { tokens, lowerCase: false },
    });
    assert.deepEqual(written.sort(), [
      "config.json",
      "model.safetensors",
      "special_tokens_map.json",
      "tokenizer_config.json",
      "vocab.txt",
    ]);
    const c = JSON.parse(await Deno.readTextFile(join(dir, "config.json")));
    assert.deepEqual(c.architectures, ["BertForSequenceClassification"]);
    assert.deepEqual(c.id2label, { "0": "negative", "1": "neutral", "2": "positive" });
    assert.deepEqual(c.label2id, { negative: 0, neutral: 1, positive: 2 });
    assert.equal(c.num_labels, 3);
    assert.equal(readBertConfig(join(dir, "config.json")).num_labels, 3);
    assert.equal(
      JSON.parse(await Deno.readTextFile(join(dir, "tokenizer_config.json"))).do_lower_case,
      false,
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), written.sort(), "no temporaries");

    const reg = hfHeadConfig({ ...config, num_labels: 1 }, {
      head: "classification",
      labels: ["similarity"],
    });
    assert.equal(reg.problem_type, "regression");
    assert.deepEqual(reg.id2label, { "0": "similarity" });
    const qa = hfHeadConfig(config, { head: "qa" });
    assert.deepEqual(qa.architectures, ["BertForQuestionAnswering"]);
    assert.equal(qa.id2label, undefined);
    assert.throws(
      () => hfHeadConfig(config, { head: "classification", labels: ["a", "b"] }),
      /2 labels for num_labels 3/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a vocabulary without [MASK] is refused before anything is written", async () => {
  const run = await Deno.makeTempDir({ prefix: "bertfuse-headfiles-" });
  try {
    const { graph, weights, config } = modelFor("qa", "qa");
    const bad = tokens.filter((t) => t !== "[MASK]");
    await assert.rejects(
      writeCheckpoint(run, 1, {
        model: { graph, config, weights, head: { head: "qa", tokenizer: { tokens: bad, lowerCase: true } } },
        optimizer: new Map(),
        state: { step: 1, optimizerStep: 1, lossScaler: {}, schedule: {}, rng: {}, loader: {}, args: {} },
      }),
      (e: unknown) => e instanceof CheckpointError && /has no \[MASK\]/.test(e.message),
    );
    assert.deepEqual([...Deno.readDirSync(run)], [], "no checkpoint folder, no temporaries");
  } finally {
    await Deno.remove(run, { recursive: true });
  }
});
