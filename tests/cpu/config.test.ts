/**
 * BERT configuration files: Hugging Face defaults, NVIDIA's bert_config.json, num_labels from id2label,
 * and errors that name the file and the field.
 */
import assert from "node:assert/strict";
import { ConfigError, parseBertConfig, readBertConfig } from "../../models/bert_config.ts";
import { labelsOf } from "../../textinfer/answer.ts";

/** The five fields without a Hugging Face default (sizes of a small model). */
const REQUIRED = {
  vocab_size: 99,
  hidden_size: 32,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  intermediate_size: 37,
};

function configError(f: () => unknown): ConfigError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof ConfigError, `expected a ConfigError, got ${e}`);
    return e;
  }
  assert.fail("no ConfigError");
}

Deno.test("config: missing optional fields get Hugging Face's BertConfig defaults", () => {
  const cfg = parseBertConfig({ ...REQUIRED }, "mini/config.json");
  assert.deepEqual(cfg, {
    ...REQUIRED,
    hidden_act: "gelu",
    hidden_dropout_prob: 0.1,
    attention_probs_dropout_prob: 0.1,
    max_position_embeddings: 512,
    type_vocab_size: 2,
    initializer_range: 0.02,
    layer_norm_eps: 1e-12,
    num_labels: 2,
  });
  assert.equal("architectures" in cfg, false);
});

Deno.test("config: given fields override the defaults, and HF-only extras are ignored", () => {
  const raw = {
    architectures: ["BertForQuestionAnswering"],
    model_type: "bert",
    ...REQUIRED,
    hidden_act: "gelu_new",
    hidden_dropout_prob: 0,
    attention_probs_dropout_prob: 0.25,
    max_position_embeddings: 64,
    type_vocab_size: 1,
    initializer_range: 0.05,
    layer_norm_eps: 1e-5,
    pad_token_id: 0,
    torch_dtype: "float32",
    transformers_version: "4.40.0",
  };
  const cfg = parseBertConfig(raw, "qa/config.json");
  assert.deepEqual(cfg.architectures, ["BertForQuestionAnswering"]);
  assert.equal(cfg.hidden_act, "gelu_new");
  assert.equal(cfg.hidden_dropout_prob, 0);
  assert.equal(cfg.attention_probs_dropout_prob, 0.25);
  assert.equal(cfg.max_position_embeddings, 64);
  assert.equal(cfg.type_vocab_size, 1);
  assert.equal(cfg.initializer_range, 0.05);
  assert.equal(cfg.layer_norm_eps, 1e-5);
  assert.equal("pad_token_id" in cfg, false);
  assert.equal("model_type" in cfg, false);
});

Deno.test("config: NVIDIA's bert_config.json (BERT-large, padded vocabulary) is accepted", () => {
  // The field set of NVIDIA DeepLearningExamples' bert_config.json: no layer_norm_eps, no architectures.
  const nvidia = {
    attention_probs_dropout_prob: 0.1,
    hidden_act: "gelu",
    hidden_dropout_prob: 0.1,
    hidden_size: 1024,
    initializer_range: 0.02,
    intermediate_size: 4096,
    max_position_embeddings: 512,
    num_attention_heads: 16,
    num_hidden_layers: 24,
    type_vocab_size: 2,
    vocab_size: 30528,
  };
  const cfg = parseBertConfig(nvidia, "bert_config.json");
  assert.equal(cfg.vocab_size, 30528);
  assert.equal(cfg.hidden_size, 1024);
  assert.equal(cfg.num_hidden_layers, 24);
  assert.equal(cfg.num_attention_heads, 16);
  assert.equal(cfg.intermediate_size, 4096);
  assert.equal(cfg.layer_norm_eps, 1e-12);
  assert.equal(cfg.num_labels, 2);
});

Deno.test("config: num_labels comes from id2label, unless given; the label names are kept", () => {
  const id2label = { 0: "negative", 1: "neutral", 2: "positive" };
  assert.equal(parseBertConfig({ ...REQUIRED, id2label }, "c.json").num_labels, 3);
  assert.deepEqual(labelsOf(parseBertConfig({ ...REQUIRED, id2label }, "c.json")), Object.values(id2label));
  assert.throws(
    () => parseBertConfig({ ...REQUIRED, id2label: { 0: 1 } }, "c.json"),
    /c.json: field 'id2label'/,
  );
  const five = Object.fromEntries([0, 1, 2, 3, 4].map((i) => [String(i), `LABEL_${i}`]));
  assert.equal(parseBertConfig({ ...REQUIRED, id2label: five, label2id: {} }, "c.json").num_labels, 5);
  assert.equal(parseBertConfig({ ...REQUIRED, num_labels: 7 }, "c.json").num_labels, 7);
  assert.equal(parseBertConfig({ ...REQUIRED, num_labels: 4, id2label }, "c.json").num_labels, 4);
});

Deno.test("config: a missing required field names the file and the field", () => {
  for (const field of Object.keys(REQUIRED)) {
    const raw: Record<string, unknown> = { ...REQUIRED };
    delete raw[field];
    const e = configError(() => parseBertConfig(raw, "models/x/config.json"));
    assert.match(e.message, /^models\/x\/config\.json: /);
    assert.ok(e.message.includes(`'${field}'`), e.message);
    assert.match(e.message, /missing/);
  }
});

Deno.test("config: sizes must be positive integers", () => {
  const bad: [string, unknown][] = [
    ["hidden_size", 32.5],
    ["vocab_size", -5],
    ["num_hidden_layers", 0],
    ["intermediate_size", "37"],
    ["max_position_embeddings", null],
    ["type_vocab_size", -1],
    ["num_labels", 2.5],
    ["num_attention_heads", Infinity],
  ];
  for (const [field, value] of bad) {
    const e = configError(() => parseBertConfig({ ...REQUIRED, [field]: value }, "sizes.json"));
    assert.match(e.message, /^sizes\.json: /);
    assert.ok(e.message.includes(`'${field}'`), e.message);
    assert.match(e.message, /positive integer/);
  }
});

Deno.test("config: dropout probabilities must be in [0, 1)", () => {
  for (const field of ["hidden_dropout_prob", "attention_probs_dropout_prob"]) {
    for (const value of [1, 1.5, -0.1, "0.1", NaN]) {
      const e = configError(() => parseBertConfig({ ...REQUIRED, [field]: value }, "drop.json"));
      assert.match(e.message, /^drop\.json: /);
      assert.ok(e.message.includes(`'${field}'`), e.message);
    }
    assert.equal(
      parseBertConfig({ ...REQUIRED, [field]: 0.999 }, "drop.json")[field as "hidden_dropout_prob"],
      0.999,
    );
  }
  for (const [field, value] of [["layer_norm_eps", 0], ["initializer_range", -0.02]] as const) {
    const e = configError(() => parseBertConfig({ ...REQUIRED, [field]: value }, "eps.json"));
    assert.ok(e.message.startsWith("eps.json: ") && e.message.includes(`'${field}'`), e.message);
  }
});

Deno.test("config: hidden_act must be a known activation", () => {
  for (const act of ["relu", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"]) {
    assert.equal(parseBertConfig({ ...REQUIRED, hidden_act: act }, "act.json").hidden_act, act);
  }
  for (const act of ["swishh", "GELU", "", 3]) {
    const e = configError(() => parseBertConfig({ ...REQUIRED, hidden_act: act }, "act.json"));
    assert.match(e.message, /^act\.json: field 'hidden_act'/);
    assert.match(e.message, /gelu/, "lists the accepted spellings");
  }
});

Deno.test("config: hidden_size must be divisible by num_attention_heads", () => {
  const e = configError(() =>
    parseBertConfig({ ...REQUIRED, hidden_size: 30, num_attention_heads: 4 }, "heads.json")
  );
  assert.match(e.message, /^heads\.json: /);
  assert.match(e.message, /hidden_size 30/);
  assert.match(e.message, /num_attention_heads 4/);
  assert.equal(
    parseBertConfig({ ...REQUIRED, hidden_size: 36, num_attention_heads: 12 }, "h.json").hidden_size,
    36,
  );
});

Deno.test("config: architectures must be a list of strings", () => {
  const e = configError(() => parseBertConfig({ ...REQUIRED, architectures: "BertModel" }, "arch.json"));
  assert.match(e.message, /^arch\.json: field 'architectures'/);
  configError(() => parseBertConfig({ ...REQUIRED, architectures: [1] }, "arch.json"));
});

Deno.test("config: a JSON value that is not an object is rejected", () => {
  for (const raw of [null, [], [REQUIRED], 42, "config", true, undefined]) {
    const e = configError(() => parseBertConfig(raw, "weird.json"));
    assert.match(e.message, /^weird\.json: expected a JSON object/, JSON.stringify(raw));
  }
});

Deno.test("config: readBertConfig reads a file and names it in errors", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-config-" });
  try {
    const good = `${dir}/config.json`;
    await Deno.writeTextFile(
      good,
      JSON.stringify({ ...REQUIRED, hidden_act: "relu", num_labels: 3 }, null, 2),
    );
    const cfg = readBertConfig(good);
    assert.equal(cfg.hidden_act, "relu");
    assert.equal(cfg.num_labels, 3);
    assert.equal(cfg.vocab_size, 99);

    const missing = `${dir}/nope/config.json`;
    const e1 = configError(() => readBertConfig(missing));
    assert.ok(e1.message.startsWith(`${missing}: `), e1.message);
    assert.match(e1.message, /cannot read/);

    const malformed = `${dir}/broken.json`;
    await Deno.writeTextFile(malformed, '{ "vocab_size": 99, "hidden_size": ');
    const e2 = configError(() => readBertConfig(malformed));
    assert.ok(e2.message.startsWith(`${malformed}: `), e2.message);
    assert.match(e2.message, /not valid JSON/);

    const invalid = `${dir}/invalid.json`;
    await Deno.writeTextFile(invalid, JSON.stringify({ ...REQUIRED, hidden_size: -32 }));
    const e3 = configError(() => readBertConfig(invalid));
    assert.ok(e3.message.startsWith(`${invalid}: `) && e3.message.includes("'hidden_size'"), e3.message);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("config: the committed HF fixture configs parse", () => {
  for (const name of ["pretraining", "classification", "qa", "pretraining-gamma"]) {
    const path = new URL(`../fixtures/hf-tiny/${name}/config.json`, import.meta.url).pathname;
    const cfg = readBertConfig(path);
    assert.equal(cfg.hidden_size % cfg.num_attention_heads, 0);
    assert.ok(Array.isArray(cfg.architectures) && cfg.architectures.length > 0, name);
    // The classification fixture lists three labels in id2label (and num_labels: 3).
    assert.equal(cfg.num_labels, name === "classification" ? 3 : 2, name);
  }
});
