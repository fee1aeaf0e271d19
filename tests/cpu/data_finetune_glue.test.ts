/** GLUE TSV files (official layouts, small hand-written fixtures) to classification features. */
import assert from "node:assert/strict";
import {
  classificationFeatures,
  DatasetError,
  glueTask,
  parseGlue,
  readGlue,
} from "../../data/finetune/mod.ts";
import { defaultTokenizer } from "../../data/tokenizer/mod.ts";

const GLUE = new URL("../fixtures/finetune/glue/", import.meta.url).pathname;
const tok = await defaultTokenizer();
/** Ids looked up word by word in the vocabulary (not through the tokenizer). */
const idsOf = (...words: string[]) => words.map((w) => tok.tokenToId(w)!);

Deno.test("MRPC: header (with a byte-order mark) skipped, sentence pairs and labels", async () => {
  const train = await readGlue("mrpc", `${GLUE}MRPC`, "train");
  assert.equal(train.length, 4);
  assert.deepEqual(train.map((e) => e.label), [1, 0, 1, 0]);
  assert.equal(train[0].textA, "The council approved the new budget on Tuesday .");
  assert.equal(train[0].textB, "On Tuesday , the council passed the new budget .");
  assert.equal(train[2].textA, 'He said the report was " deeply flawed " .', "quotes are plain text");
  assert.equal((await readGlue("mrpc", `${GLUE}MRPC/`, "dev")).length, 2);
  const test = await readGlue("mrpc", `${GLUE}MRPC`, "test");
  assert.deepEqual(test.map((e) => [e.label, e.textB]), [[-1, "It was the team 's third win in a row ."]]);
});

Deno.test("MRPC features: [CLS] a [SEP] b [SEP], segment ids, padding, longest-first truncation", async () => {
  const dev = await readGlue("mrpc", `${GLUE}MRPC`, "dev");
  const [f] = classificationFeatures([dev[1]], tok, 16);
  // "Prices fell sharply in March ." / "The bank kept interest rates unchanged ."
  const a = idsOf("prices", "fell", "sharply", "in", "march", ".");
  const b = idsOf("the", "bank", "kept", "interest", "rates", "unchanged", ".");
  assert.deepEqual(f.input_ids, [101, ...a, 102, ...b, 102]);
  assert.deepEqual(f.token_type_ids, [...Array(8).fill(0), ...Array(8).fill(1)]);
  assert.deepEqual(f.attention_mask, Array(16).fill(1));
  assert.equal(f.label, 0);
  const [cut] = classificationFeatures([dev[1]], tok, 12);
  // Room for 9 of 6 + 7 tokens: the longer one loses a token each time, b on ties: (6,6) (6,5) (5,5) (5,4).
  assert.deepEqual(cut.input_ids, [101, ...a.slice(0, 5), 102, ...b.slice(0, 4), 102]);
  const [padded] = classificationFeatures([dev[1]], tok, 20);
  assert.deepEqual(padded.input_ids.slice(16), [0, 0, 0, 0]);
  assert.deepEqual(padded.attention_mask.slice(14), [1, 1, 0, 0, 0, 0]);
  assert.deepEqual(padded.token_type_ids.slice(14), [1, 1, 0, 0, 0, 0]);
});

Deno.test("SST-2 and CoLA layouts: single sentences, CoLA without a header, test sets unlabeled", async () => {
  const sst = await readGlue("sst-2", `${GLUE}SST-2`, "train");
  assert.deepEqual(sst.map((e) => e.label), [1, 0, 1, 0, 1]);
  assert.equal(sst[1].textA, "the plot is nothing but boilerplate clichés ");
  assert.equal(sst[0].textB, undefined);
  const [empty] = classificationFeatures([sst[4]], tok, 4);
  assert.deepEqual(empty.input_ids, [101, 102, 0, 0], "an empty sentence is [CLS] [SEP]");
  const sstTest = await readGlue("sst-2", `${GLUE}SST-2`, "test");
  assert.deepEqual(sstTest.map((e) => [e.label, e.textA.slice(0, 6)]), [[-1, "uneasy"], [-1, "this f"]]);

  const cola = await readGlue(glueTask("CoLA"), `${GLUE}CoLA`, "train");
  assert.deepEqual(cola.map((e) => e.label), [1, 0, 1, 0]);
  assert.equal(cola[1].textA, "They drank the pub.");
  const [f] = classificationFeatures([cola[1]], tok, 7);
  assert.deepEqual(f.input_ids, [101, ...idsOf("they", "drank", "the", "pub", "."), 102]);
  assert.equal(f.label, 0);
  assert.equal((await readGlue("cola", `${GLUE}CoLA`, "test"))[0].textA, "Bill whistled past the house.");
  assert.equal(glueTask("SST2"), "sst-2");
  assert.equal(glueTask("mrpc"), "mrpc");
  assert.equal(glueTask("QNLI"), "qnli");
  assert.throws(() => glueTask("XNLI"), /unknown GLUE task 'XNLI' \(known: MRPC, SST-2, CoLA, STS-B/);
});

Deno.test("malformed GLUE files: errors name the file and line", async () => {
  const bad = (task: "mrpc" | "sst-2" | "cola", split: "train" | "test", text: string, re: RegExp) =>
    assert.throws(() => parseGlue(task, split, text, "x/train.tsv"), (e: Error) => {
      assert.ok(e instanceof DatasetError);
      assert.match(e.message, re);
      return true;
    });
  const mrpcHead = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n";
  bad(
    "mrpc",
    "train",
    mrpcHead + "1\t1\t2\tonly three\n",
    /^x\/train\.tsv:2: expected 5 tab-separated columns, got 4$/,
  );
  bad(
    "mrpc",
    "train",
    mrpcHead + "1\t1\t2\ta\tb\nyes\t1\t2\ta\tb\n",
    /^x\/train\.tsv:3: label 'yes' is not one of mrpc's labels \(0, 1\)$/,
  );
  bad("mrpc", "train", "1\t1\t2\ta\tb\n", /^x\/train\.tsv:1: expected a header starting with 'Quality'/);
  bad(
    "sst-2",
    "test",
    "sentence\tlabel\nfine\t1\n",
    /^x\/train\.tsv:1: expected a header starting with 'index'/,
  );
  bad(
    "cola",
    "train",
    "gj04\t1\t\tok.\ngj04\t2\t\tbad label.\n",
    /^x\/train\.tsv:2: label '2' is not one of cola's labels \(0, 1\)$/,
  );
  bad("cola", "train", "gj04\t1\tok.\n", /^x\/train\.tsv:1: expected 4 tab-separated columns, got 3$/);
  bad("sst-2", "train", "sentence\tlabel\n\n", /^x\/train\.tsv: no examples$/);
  // Windows line ends and blank lines are fine.
  assert.equal(
    parseGlue("sst-2", "train", "sentence\tlabel\r\ngood\t1\r\n\r\nbad\t0\r\n", "w.tsv").length,
    2,
  );
  await assert.rejects(
    readGlue("mrpc", `${GLUE}nope`, "train"),
    /GLUE mrpc train file not found: .*nope\/train\.tsv/,
  );
});
