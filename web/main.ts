/// <reference lib="dom" />
/**
 * The page's entry point (bundled by web/build.ts): opens WebGPU, loads the built-in tiny QA checkpoint
 * and answers its example on load (the time from page load to that answer is shown), then answers what
 * the person asks of the model they choose: a built-in tiny checkpoint or a folder from their disk.
 * `globalThis.bertfuse` exposes the same operations to the browser tests (tests/browser/).
 */
import type { Head } from "../models/bert.ts";
import type { EncodedRow } from "../model_io/infer_input.ts";
import { type GpuContext, openWebGPU } from "../runtime/webgpu/device.ts";
import { answerRequests, type InferRequest, type TextAnswer } from "../textinfer/mod.ts";
import type { ClassifyAnswer, FillMaskAnswer, QaAnswer } from "../textinfer/mod.ts";
import { type BrowserModel, openBrowserModel } from "./browser_model.ts";
import { type CheckpointSource, sourceFromFiles, sourceFromUrl } from "./checkpoint_source.ts";
import { renderClassify, renderFillMask, renderQa } from "./render.ts";

/** The examples the page starts with; every word is in the tiny checkpoints' vocabulary. */
const EXAMPLES: Record<Head, InferRequest> = {
  qa: {
    kind: "qa",
    question: "where did john grow up ?",
    context: "john grew up in paris . mary read a book in canada .",
  },
  classification: { kind: "text", text: "this movie is very good ." },
  pretraining: { kind: "text", text: "paris is the capital [MASK] france ." },
};

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

let gpu: GpuContext | undefined;
let model: BrowserModel | undefined;
let firstAnswerMs: number | undefined;

function status(text: string, error = false): void {
  const el = $("status");
  el.textContent = text;
  el.className = error ? "error" : "";
}

async function device(): Promise<GpuContext> {
  if (gpu) return gpu;
  const g = await openWebGPU();
  if ("unavailable" in g) throw new Error(`WebGPU: ${g.unavailable}`);
  $("adapter").textContent = `${g.description || "WebGPU adapter"}${g.hasF16 ? ", shader-f16" : ""}`;
  return gpu = g;
}

/** Shows the inputs of `head` and fills them with its example. */
function showInputs(head: Head): void {
  for (const h of ["qa", "classification", "pretraining"] as const) $(`form-${h}`).hidden = h !== head;
  const ex = EXAMPLES[head];
  if (ex.kind === "qa") {
    $<HTMLInputElement>("question").value = ex.question;
    $<HTMLTextAreaElement>("context").value = ex.context;
  } else if (head === "classification") {
    $<HTMLInputElement>("text").value = ex.text;
    $<HTMLInputElement>("text-pair").value = "";
  } else $<HTMLInputElement>("mask-text").value = ex.text;
}

async function load(src: CheckpointSource): Promise<BrowserModel> {
  status(`loading ${src.name} …`);
  model?.runner.destroy();
  model = undefined;
  const m = await openBrowserModel(src, await device());
  const c = m.config;
  $("model").textContent = `${m.name}: ${m.head}, ${c.num_hidden_layers} layers, hidden ${c.hidden_size}, ` +
    `${c.num_attention_heads} heads, vocabulary ${c.vocab_size}, ${c.max_position_embeddings} positions`;
  showInputs(m.head);
  status(`${m.name} loaded in ${m.loadMs.toFixed(0)} ms`);
  return model = m;
}

async function useTiny(head: Head): Promise<BrowserModel> {
  const index = await (await fetch("tiny/index.json")).json() as Record<string, string[]>;
  return load(sourceFromUrl(new URL(`tiny/${head}/`, location.href).href, head, index[head] ?? []));
}

/** The request the visible inputs describe. */
function requestFromInputs(head: Head): InferRequest {
  const v = (id: string) => $<HTMLInputElement>(id).value;
  if (head === "qa") return { kind: "qa", question: v("question"), context: v("context") };
  if (head === "classification") {
    return { kind: "text", text: v("text"), text_pair: v("text-pair") || undefined };
  }
  return { kind: "text", text: v("mask-text") };
}

async function ask(request: InferRequest): Promise<TextAnswer> {
  if (!model) throw new Error("no model loaded");
  const t0 = performance.now();
  const [answer] = await answerRequests(model.text, [{ request, at: "the page" }]);
  const ms = performance.now() - t0;
  const s = model.runner.last;
  const html = request.kind === "qa"
    ? renderQa(request.context, answer as QaAnswer)
    : model.head === "classification"
    ? renderClassify(answer as ClassifyAnswer)
    : renderFillMask(request.text, answer as FillMaskAnswer);
  $("answer").innerHTML = html;
  firstAnswerMs ??= performance.now();
  $("timing").textContent = `answered in ${ms.toFixed(0)} ms` +
    (s.compiled ? ` (compiling ${s.kernels} kernels for a new shape: ${s.compileMs.toFixed(0)} ms)` : "") +
    `; GPU run and read-back ${s.runMs.toFixed(1)} ms. First answer ${
      firstAnswerMs.toFixed(0)
    } ms after page load.`;
  status("");
  return answer;
}

/** Runs token-id rows through the loaded model; plain arrays so they cross the DevTools protocol. */
async function runRows(rows: EncodedRow[]): Promise<Record<string, { shape: number[]; data: number[] }>> {
  if (!model) throw new Error("no model loaded");
  const out = await model.runner.run(rows);
  return Object.fromEntries([...out].map(([k, v]) => [k, { shape: v.shape, data: Array.from(v.data) }]));
}

function guarded(f: () => Promise<unknown>): () => void {
  return () => {
    f().catch((e) => status(e instanceof Error ? e.message : String(e), true));
  };
}

function wire(): void {
  $<HTMLSelectElement>("tiny").addEventListener(
    "change",
    guarded(async () => {
      const head = $<HTMLSelectElement>("tiny").value as Head;
      await useTiny(head);
      await ask(EXAMPLES[head]);
    }),
  );
  $<HTMLInputElement>("folder").addEventListener(
    "change",
    guarded(async () => {
      const files = $<HTMLInputElement>("folder").files;
      if (files && files.length) await load(sourceFromFiles(files));
    }),
  );
  $("run").addEventListener("click", guarded(() => ask(requestFromInputs(model!.head))));
}

const ready = (async () => {
  wire();
  await useTiny("qa");
  await ask(EXAMPLES.qa);
})();
ready.catch((e) => status(e instanceof Error ? e.message : String(e), true));

Object.assign(globalThis, {
  bertfuse: {
    ready,
    firstAnswerMs: () => firstAnswerMs,
    adapter: () => gpu?.description,
    useTiny: async (head: Head) => {
      $<HTMLSelectElement>("tiny").value = head;
      await useTiny(head);
    },
    ask,
    runRows,
  },
});
