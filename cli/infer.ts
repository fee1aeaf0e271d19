/**
 * `deno task infer`: run a Hugging Face BERT checkpoint on token ids (JSON lines in, safetensors out) or on
 * text (questions, texts, fill-mask; JSON answers on stdout, textinfer/ does the work).
 */
import { fileURLToPath } from "node:url";
import { defineBert, type Head, headOf, INFER_OUTPUTS } from "../models/bert.ts";
import { readBertConfig } from "../models/bert_config.ts";
import type { Graph } from "../ir/mod.ts";
import { loadHfWeights } from "../model_io/hf_checkpoint.ts";
import { writeSafetensorsFile } from "../model_io/safetensors.ts";
import { runInference } from "../runtime/infer.ts";
import { InputError, parseEncodedRows } from "../model_io/infer_input.ts";
import { describeChoice, openBackend } from "../engine/choose_backend.ts";
import { backendFlags, checkpointFolder, oneOf, parseFlags, positiveInt, runMain } from "./common.ts";
import { stringFlags, UsageError } from "./common.ts";
import { checkFileOutput, io } from "../model_io/outputs.ts";
import { checkConfigAgainstWeights, readSafetensorsHeader } from "../model_io/config_check.ts";
import { checkModelSize } from "../model_io/size_check.ts";
import { verifyIfTrainingCheckpoint } from "../training/checkpoint.ts";
import { isTokenIdInput, parseRequests, prepareRequests, runPrepared } from "../textinfer/mod.ts";
import { openTextModel } from "../textinfer/checkpoint.ts";
import { requestsFromFlags, TEXT_FLAGS, TEXT_HELP, textOptions, tinyCheckpointFor } from "./infer_text.ts";
import { kebabFlags } from "./flag_spelling.ts";
import { readUtf8 } from "../data/read_bounded.ts";

const here = (rel: string) => fileURLToPath(new URL(rel, import.meta.url));
const TINY = here("../tests/fixtures/hf-tiny");
const DEFAULT_CHECKPOINT = `${TINY}/pretraining`;
const DEFAULT_INPUT = here("../tests/fixtures/hf-tiny/inputs.jsonl");
const DEFAULT_OUTPUT = "out/infer.safetensors";

const HELP = `
deno task infer [--checkpoint DIR] [--input FILE.jsonl] [--output FILE.safetensors]
                [--question Q --context C | --text T [--text-pair U]]
                [--head pretraining|classification|qa] [--batch-size N]
                [--backend auto|reference|cpu|webgpu|cuda] [--no-fuse] [--precision f32|f64]

Runs BERT inference on token ids and writes the outputs as float32 safetensors under Hugging Face's
output names.

  --checkpoint DIR   folder with config.json and model.safetensors (Hugging Face layout)
                     default: the tiny random checkpoint in tests/fixtures/hf-tiny/pretraining
  --input FILE       JSON lines {"input_ids":[...],"token_type_ids":[...],"attention_mask":[...]};
                     token_type_ids default to 0 and attention_mask to 1; rows may differ in length
                     (- reads standard input); default: tests/fixtures/hf-tiny/inputs.jsonl
  --output FILE      where to write the outputs (default: ${DEFAULT_OUTPUT}); never an input, and an
                     existing file only if an earlier infer wrote it
  --head H           pretraining: prediction_logits [N,S,V], seq_relationship_logits [N,2]
                     classification: logits [N,C]
                     qa: start_logits [N,S], end_logits [N,S]
                     default: from the config's "architectures", else pretraining
  --batch-size N     rows per batch; each batch is padded to its longest row (default 8)
  --backend B        auto (default: cuda when the driver sees a GPU, else webgpu on a real GPU adapter,
                     else cpu when there is a C compiler, else reference; the choice and why go to
                     stderr), cuda (fused kernels through the driver), webgpu (fused kernels on
                     navigator.gpu; without a GPU set DENO_WEBGPU_BACKEND=vulkan to use Mesa's lavapipe),
                     cpu (fused C kernels built with cc, GEMMs on oneDNN or OpenBLAS) or reference (the CPU
                     interpreter: slow, the outputs the others are checked against)
  --no-fuse          cpu, webgpu, cuda: one kernel per primitive op (the unfused baseline)
  --precision P      --backend reference's arithmetic: f32 (default, rounds every f32 result) or f64

S is the longest row; positions past a row's own length are padding and are written as 0.
${TEXT_HELP}`;

await runMain(async () => {
  const { values } = parseFlags(kebabFlags(Deno.args), {
    ...stringFlags("checkpoint input output head batch-size backend precision"),
    "no-fuse": { type: "boolean" },
    ...TEXT_FLAGS,
  }, HELP);
  const backendFlag = backendFlags(values);
  const batchSize = positiveInt("batch-size", values["batch-size"], 8);
  const inputPath = values.input ?? DEFAULT_INPUT;
  let inputText: string | undefined;
  // Text requests come from flags, or from an --input whose first line has no "input_ids".
  let requests = requestsFromFlags(values);
  if (requests && values.input !== undefined) {
    throw new UsageError("--input and --question/--text exclude each other");
  }
  if (!requests && values.input !== undefined) {
    inputText = await readInput(inputPath);
    if (!isTokenIdInput(inputText)) requests = parseRequests(inputText, inputPath);
  }
  if (requests && values.output !== undefined) {
    throw new UsageError("--output is for token-id input; text answers go to stdout");
  }
  const dir = values.checkpoint ?? (requests ? tinyCheckpointFor(requests, TINY) : DEFAULT_CHECKPOINT);
  const outputPath = values.output ?? DEFAULT_OUTPUT;
  if (values.checkpoint === undefined && requests) {
    console.error(`no --checkpoint given: the built-in tiny random checkpoint ${dir} (meaningless answers)`);
  } else if (values.checkpoint === undefined && values.input === undefined) {
    console.error("no --checkpoint/--input given: running the built-in tiny checkpoint on its sample input");
  }

  if (!requests) {
    await checkFileOutput(outputPath, {
      label: `--output ${outputPath}`,
      inputs: [dir, inputPath],
      isOurs: async (p) => {
        const meta = (await readSafetensorsHeader(p))?.__metadata__ as Record<string, unknown> | undefined;
        return meta !== undefined && "checkpoint" in meta && "head" in meta && "backend" in meta;
      },
      oursLooksLike: "a safetensors file written by deno task infer",
    });
  }
  // Integrity and sanity before anything is built: a training checkpoint's manifest, and a config that
  // agrees with the weights it comes with.
  checkpointFolder("--checkpoint", dir);
  await verifyIfTrainingCheckpoint(dir);
  const config = readBertConfig(`${dir.replace(/\/$/, "")}/config.json`);
  await checkConfigAgainstWeights(dir, config);
  const head: Head = values.head === undefined
    ? headOf(config)
    : oneOf("head", values.head, ["pretraining", "classification", "qa"], "pretraining");
  inputText ??= requests ? "" : await readInput(inputPath);
  const rows = requests ? [] : parseEncodedRows(inputText, inputPath, {
    vocabSize: config.vocab_size,
    typeVocabSize: config.type_vocab_size,
    maxPositions: config.max_position_embeddings,
  });

  const longest = rows.reduce((m, r) => Math.max(m, r.input_ids.length), 1);
  checkModelSize(config, {
    mode: "infer",
    batchSize: requests ? batchSize : Math.min(batchSize, rows.length || 1), // batches hold at most every row
    seqLen: requests ? config.max_position_embeddings : longest,
    what: dir,
  });
  const model = defineBert(dir, config);
  const graphs = new Map<string, Graph>();
  const graphFor = (b: number, s: number) => {
    const key = `${b}x${s}`;
    if (!graphs.has(key)) graphs.set(key, model.build({ head, mode: "infer", batchSize: b, seqLen: s }));
    return graphs.get(key)!;
  };
  const weights = await loadHfWeights(graphFor(1, 1), dir);
  // Text: the tokenizer and every request are checked before a backend opens.
  const outputs = INFER_OUTPUTS[head];
  const textModel = requests &&
    await openTextModel(
      dir,
      config,
      head,
      (rs) => runInference(rs, { batchSize, outputs, graphFor, backend, weights, onBatch: tenths() }),
    );
  const prepared = textModel && prepareRequests(textModel, requests!, textOptions(values));
  const choice = await openBackend(backendFlag.name);
  if (backendFlag.name === "auto") console.error(describeChoice(choice));
  const backend = choice.graphBackend(backendFlag);
  if (textModel && prepared) {
    await runPrepared(textModel, prepared, (a) => console.log(JSON.stringify(a)));
    return;
  }

  const t0 = performance.now();
  const results = await runInference(rows, {
    batchSize,
    outputs,
    graphFor,
    backend,
    weights,
    onBatch: (done, total) => {
      if (total > batchSize) console.error(`  ${done}/${total} rows`);
    },
  });
  const ms = performance.now() - t0;

  const slash = outputPath.lastIndexOf("/");
  await io(outputPath, "write", async () => {
    if (slash > 0) await Deno.mkdir(outputPath.slice(0, slash), { recursive: true });
    const tensors = [...results].map(([name, r]) => [name, { dtype: "F32" as const, ...r }] as const);
    const meta = { checkpoint: dir, head, backend: backend.name, rows: String(rows.length) };
    await writeSafetensorsFile(outputPath, new Map(tensors), meta);
  });
  console.log(
    `${rows.length} rows, head ${head}, backend ${backend.name}: ${ms.toFixed(0)} ms (${
      (rows.length / (ms / 1000)).toFixed(1)
    } rows/s)`,
  );
  for (const [name, r] of results) console.log(`  ${name} [${r.shape.join(", ")}]`);
  console.log(`wrote ${outputPath}`);
});

/** Progress of a long run (a long QA context is thousands of windows): a line each tenth of the rows. */
function tenths(): (done: number, total: number) => void {
  let said = 0;
  return (done, total) => {
    if (total < 100 || Math.floor((10 * done) / total) <= said) return;
    said = Math.floor((10 * done) / total);
    console.error(`  ${done}/${total} rows`);
  };
}

function readInput(path: string): Promise<string> {
  return readUtf8(path, { what: "input", fail: (m) => new InputError(m) });
}
