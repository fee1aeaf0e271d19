/** `deno task infer`: run a Hugging Face BERT checkpoint on JSON-lines input, write safetensors. */
import { fileURLToPath } from "node:url";
import { defineBert, type Head, headOf, INFER_OUTPUTS } from "../models/bert.ts";
import { readBertConfig } from "../models/bert_config.ts";
import type { Graph } from "../ir/mod.ts";
import { loadHfWeights } from "../model_io/hf_checkpoint.ts";
import { writeSafetensorsFile } from "../model_io/safetensors.ts";
import { runInference } from "../runtime/infer.ts";
import { InputError, parseEncodedRows } from "../model_io/infer_input.ts";
import { BACKEND_NAMES, describeChoice, openBackend } from "../engine/choose_backend.ts";
import { oneOf, parseFlags, positiveInt, runMain, UsageError } from "./common.ts";

const here = (rel: string) => fileURLToPath(new URL(rel, import.meta.url));
const DEFAULT_CHECKPOINT = here("../tests/fixtures/hf-tiny/pretraining");
const DEFAULT_INPUT = here("../tests/fixtures/hf-tiny/inputs.jsonl");
const DEFAULT_OUTPUT = "out/infer.safetensors";

const HELP = `
deno task infer [--checkpoint DIR] [--input FILE.jsonl] [--output FILE.safetensors]
                [--head pretraining|classification|qa] [--batch-size N]
                [--backend reference|webgpu|cuda|auto] [--no-fuse] [--precision f32|f64]

Runs BERT inference on token ids and writes the outputs as float32 safetensors under Hugging Face's
output names.

  --checkpoint DIR   folder with config.json and model.safetensors (Hugging Face layout)
                     default: the tiny random checkpoint in tests/fixtures/hf-tiny/pretraining
  --input FILE       JSON lines {"input_ids":[...],"token_type_ids":[...],"attention_mask":[...]};
                     token_type_ids default to 0 and attention_mask to 1; rows may differ in length
                     default: tests/fixtures/hf-tiny/inputs.jsonl
  --output FILE      where to write the outputs (default: ${DEFAULT_OUTPUT})
  --head H           pretraining: prediction_logits [N,S,V], seq_relationship_logits [N,2]
                     classification: logits [N,C]
                     qa: start_logits [N,S], end_logits [N,S]
                     default: from the config's "architectures", else pretraining
  --batch-size N     rows per batch; each batch is padded to its longest row (default 8)
  --backend B        reference (default; the CPU interpreter), webgpu (fused kernels on navigator.gpu;
                     without a GPU set DENO_WEBGPU_BACKEND=vulkan to use Mesa's lavapipe), cuda (fused
                     kernels on an NVIDIA GPU through the driver; needs --allow-ffi, which the task has), or
                     auto (cuda if a driver and GPU are there, else webgpu if an adapter is, else reference;
                     the choice and why go to stderr)
  --no-fuse          webgpu, cuda: one kernel per primitive op (the unfused baseline)
  --precision P      reference backend arithmetic: f32 (default, rounds every f32 result) or f64

S is the longest row; positions past a row's own length are padding and are written as 0.
`;

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    checkpoint: { type: "string" },
    input: { type: "string" },
    output: { type: "string" },
    head: { type: "string" },
    "batch-size": { type: "string" },
    backend: { type: "string" },
    "no-fuse": { type: "boolean" },
    precision: { type: "string" },
  }, HELP);
  const backendName = oneOf("backend", values.backend, BACKEND_NAMES, "reference");
  if (values["no-fuse"] && backendName === "reference") {
    throw new UsageError("--no-fuse applies to --backend webgpu, cuda or auto");
  }
  const precision = oneOf("precision", values.precision, ["f32", "f64"], "f32");
  const batchSize = positiveInt("batch-size", values["batch-size"], 8);
  const dir = values.checkpoint ?? DEFAULT_CHECKPOINT;
  const inputPath = values.input ?? DEFAULT_INPUT;
  const outputPath = values.output ?? DEFAULT_OUTPUT;
  if (values.checkpoint === undefined && values.input === undefined) {
    console.error("no --checkpoint/--input given: running the built-in tiny checkpoint on its sample input");
  }

  const config = readBertConfig(`${dir.replace(/\/$/, "")}/config.json`);
  const head: Head = values.head === undefined
    ? headOf(config)
    : oneOf("head", values.head, ["pretraining", "classification", "qa"], "pretraining");
  let inputText: string;
  try {
    inputText = await Deno.readTextFile(inputPath);
  } catch (e) {
    throw new InputError(`${inputPath}: cannot read (${(e as Error).message})`);
  }
  const rows = parseEncodedRows(inputText, inputPath, {
    vocabSize: config.vocab_size,
    typeVocabSize: config.type_vocab_size,
    maxPositions: config.max_position_embeddings,
  });

  const model = defineBert(dir, config);
  const graphs = new Map<string, Graph>();
  const graphFor = (b: number, s: number) => {
    const key = `${b}x${s}`;
    if (!graphs.has(key)) graphs.set(key, model.build({ head, mode: "infer", batchSize: b, seqLen: s }));
    return graphs.get(key)!;
  };
  const weights = await loadHfWeights(graphFor(1, 1), dir);
  const choice = await openBackend(backendName);
  if (backendName === "auto") console.error(describeChoice(choice));
  const backend = choice.graphBackend({ fuse: !values["no-fuse"], precision });

  const t0 = performance.now();
  const results = await runInference(rows, {
    batchSize,
    outputs: INFER_OUTPUTS[head],
    graphFor,
    backend,
    weights,
    onBatch: (done, total) => {
      if (total > batchSize) console.error(`  ${done}/${total} rows`);
    },
  });
  const ms = performance.now() - t0;

  const slash = outputPath.lastIndexOf("/");
  if (slash > 0) await Deno.mkdir(outputPath.slice(0, slash), { recursive: true });
  try {
    await writeSafetensorsFile(
      outputPath,
      new Map(
        [...results].map(([name, r]) => [name, { dtype: "F32" as const, shape: r.shape, data: r.data }]),
      ),
      { checkpoint: dir, head, backend: backend.name, rows: String(rows.length) },
    );
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.PermissionDenied) {
      throw new UsageError(`${outputPath}: cannot write (${e.message})`);
    }
    throw e;
  }
  console.log(
    `${rows.length} rows, head ${head}, backend ${backend.name}: ${ms.toFixed(0)} ms (${
      (rows.length / (ms / 1000)).toFixed(1)
    } rows/s)`,
  );
  for (const [name, r] of results) console.log(`  ${name} [${r.shape.join(", ")}]`);
  console.log(`wrote ${outputPath}`);
});
