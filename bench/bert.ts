/**
 * `deno task bench:bert`: BERT training and inference throughput on a backend (CUDA, WebGPU), fused vs
 * unfused in one run, in the result format of bench/results/ that the peers (bench/peers/) print too:
 * {"device","date","command","threads","blas","peers","cases":[{"name","impl","seq_per_s","ms","min_ms",
 * "max_ms","load","peak_bytes"}]}. On a GPU: `deno task bench:bert --model models/bert-large.ts --precision
 * fp16` gives the issue's cases (train at sequence 128 with 20 predictions; inference at batch 64 and 1).
 *
 * Both sides run the same batches; rounds alternate between them so drift on a noisy machine hits both
 * alike. A round submits a few steps back to back and waits once; the median, fastest and slowest rounds
 * are reported with the load average read just before each side's first timed round, so that a contended
 * run shows as one. Our cases also get the executor's profile of one step, split into GEMMs, the optimizer
 * update and the rest. Model FLOP utilisation is printed for training against the plan's own FLOP count
 * (and, for BERT-large at 128, the 240.6 GFLOP per sequence of DESIGN.md's reference).
 *
 * The peers (PyTorch eager and torch.compile, ONNX Runtime for inference, JAX for training and inference;
 * CPU, fp32, our thread count) run after all our cases, one process at a time, so that no peer ever runs
 * beside our timing; rounds do not alternate with them, as an idle peer process's thread pools would spin
 * beside ours. The "blas" record names OpenBLAS's build, the core whose kernels it runs and the OPENBLAS_*
 * variables that chose them.
 *
 * A figure measured is never thrown away by a later failure: each case is printed as soon as it is
 * measured and the --json file is rewritten (atomically) with every case so far; a part that fails (a
 * size the device cannot hold, a compile error) becomes one line naming the part and the cause, the other
 * parts still run, and the exit code is 1 at the end. BERTFUSE_BENCH_FAULT=TEXT makes every part whose
 * name contains TEXT fail as if it had (for tests/cpu/bench_bert_partial.test.ts; e.g. "infer-b1").
 */
import { buildModelGraph } from "../optimizer/model_graph.ts";
import { optimizerFeeds } from "../optimizer/feeds.ts";
import { flatLayoutOf } from "../optimizer/flat_layout.ts";
import { OPT } from "../optimizer/update.ts";
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { BACKEND_NAMES, openBackend } from "../engine/choose_backend.ts";
import type { Graph } from "../ir/mod.ts";
import { defineBert } from "../models/bert.ts";
import { loadModel } from "../models/load.ts";
import { initParamsParallel } from "../model_io/init_params_parallel.ts";
import type { Plan } from "../plan/plan.ts";
import { flatFromParams } from "../training/run_state.ts";
import { oneOf, parseFlags, positiveInt, runMain, UsageError, userMessage } from "../cli/common.ts";
import { checkFileOutput, OutputError, writeFileAtomic } from "../model_io/outputs.ts";
import type { Profile } from "../runtime/profile.ts";
import { openGemmLibrary } from "../runtime/cpu/blas.ts";
import { loadAverage, median, type Shares, type Steppable, stepShares, timeRound } from "./step_timing.ts";

/** A peer's exit status when its library is missing (bench/peers/peer_common.py MISSING). */
const PEER_MISSING = 3;

/** An executor the bench times, and profiles where it can (each runtime's executor has profile()). */
type Profiled = Steppable & { destroy(): void; profile?(iterations: number): Promise<Profile> };

const HELP = `
deno task bench:bert [--model M] [--backend auto|cuda|webgpu|cpu] [--precision fp32|fp16|bf16]
                     [--mode train|infer|finetune|all] [--batch-size N] [--infer-batch-size N] [--seq-len S]
                     [--max-predictions P] [--rounds N] [--steps-per-round N] [--json FILE] [--peer|--no-peer]
                     [--python EXE]

Sequences/s of a BERT training step (forward, backward, fused LAMB) and of inference, fused and unfused
in one run. Defaults: BERT-tiny, batch 8, sequence 64, 10 predictions (the default train run); on a GPU
use e.g. --model models/bert-large.ts --precision fp16 --batch-size 64 --seq-len 128 --max-predictions 20.

  --mode M              train, infer (batch --infer-batch-size, and batch 1 for latency) or all (default);
                        finetune: deno task finetune's step (two-class head, BERT's Adam), not in all
  --rounds N            timed rounds per side, alternating (default 5)
  --steps-per-round N   steps submitted back to back per round (default 4)
  --json FILE           write {"device","date","command","cases":[...]} (bench/results/ format), rewritten
                        after every measured case; "failed": [{"part","cause"}] lists parts that failed
  --peer, --no-peer     run the peers on the CPU, fp32, on the same shapes, one at a time after our cases, and
                        print the ratios (default: on with --backend cpu): PyTorch eager and torch.compile
                        (bench/peers/torch_bert.py), ONNX Runtime inference (onnx_bert.py), JAX (jax_bert.py);
                        a peer whose library is missing is one line, and null under "peers" in the JSON
  --python EXE          the Python that runs the peers (default python3)
`;

/** FLOP per sequence of a BERT-large training step at sequence 128 with 20 predictions (DESIGN.md). */
const BERT_LARGE_S128_TRAIN_FLOP = 240.6e9;

interface Case {
  name: string;
  impl: string;
  seq_per_s: number;
  /** The median round's ms per step, and the fastest and slowest round's. */
  ms: number;
  min_ms: number;
  max_ms: number;
  /** The first step of a fresh executor alone (its arena's pages, first submissions). */
  first_ms?: number;
  /** The 1-, 5- and 15-minute load averages just before the side's timed rounds (null: not on Linux). */
  load: number[] | null;
  peak_bytes: number;
  kernels: number;
  tflops?: number;
}

/** The peers, each its own process (bench/peers/), and what each measures. */
const PEERS = [
  {
    name: "torch",
    script: "torch_bert.py",
    what: ["train", "infer"],
    args: ["--device=cpu", "--precision=fp32"],
  },
  { name: "onnxruntime", script: "onnx_bert.py", what: ["infer"], args: [] },
  { name: "jax", script: "jax_bert.py", what: ["train", "infer"], args: [] },
];

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    model: { type: "string" },
    backend: { type: "string" },
    precision: { type: "string" },
    mode: { type: "string" },
    "batch-size": { type: "string" },
    "infer-batch-size": { type: "string" },
    "seq-len": { type: "string" },
    "max-predictions": { type: "string" },
    rounds: { type: "string" },
    "steps-per-round": { type: "string" },
    json: { type: "string" },
    peer: { type: "boolean" },
    "no-peer": { type: "boolean" },
    python: { type: "string" },
  }, HELP);
  const model = await loadModel(values.model ?? new URL("../models/bert-tiny.ts", import.meta.url).pathname);
  const request = oneOf("backend", values.backend, BACKEND_NAMES, "auto");
  const precision = oneOf<Precision>("precision", values.precision, ["fp32", "fp16", "bf16"], "fp32");
  const mode = oneOf("mode", values.mode, ["train", "infer", "finetune", "all"], "all");
  const batch = positiveInt("batch-size", values["batch-size"], 8);
  const inferBatch = positiveInt("infer-batch-size", values["infer-batch-size"], 64);
  const seq = positiveInt("seq-len", values["seq-len"], 64);
  const preds = positiveInt("max-predictions", values["max-predictions"], 10);
  const rounds = positiveInt("rounds", values.rounds, 5);
  const perRound = positiveInt("steps-per-round", values["steps-per-round"], 4);
  // The JSON output may replace only an earlier result file, and is checked before minutes of work.
  if (values.json) {
    await checkFileOutput(values.json, {
      label: `--json ${values.json}`,
      isOurs: isResultFile,
      oursLooksLike: "a bench result file (JSON with device, command and cases)",
    });
  }
  const choice = await openBackend(request);
  if (!choice.row.language) {
    throw new UsageError("bench:bert needs a compiling backend (cuda, webgpu or cpu)");
  }
  const device = choice.device;
  console.error(`backend ${choice.kind}: ${choice.why}`);

  const cases: Case[] = [];
  const failed: { part: string; cause: string }[] = [];
  const command = `deno task bench:bert ${Deno.args.join(" ")}`.trim();
  /** Threads of our CPU pool (from the first CPU executor); the peers get as many. */
  let threads: number | undefined;
  /** Each peer's version, null where its library is missing; absent before the peers run. */
  const peers: Record<string, string | null> = {};
  const blas = blasRecord(choice.kind);
  const save = async () => {
    if (!values.json) return;
    const out = {
      device,
      date: new Date().toISOString().slice(0, 10),
      command,
      threads: threads ?? null,
      blas,
      ...(Object.keys(peers).length ? { peers } : {}),
      cases,
      ...(failed.length ? { failed } : {}),
    };
    await writeFileAtomic(values.json, JSON.stringify(out, null, 2) + "\n");
  };
  const record = async (c: Case & Partial<Shares>) => {
    cases.push(c);
    const shares = c.gemm_ms === undefined
      ? ""
      : `; profile: GEMM ${c.gemm_ms.toFixed(1)}, other ${c.other_ms!.toFixed(1)}, optimizer ${
        c.optimizer_ms!.toFixed(1)
      }, outside kernels ${c.copy_ms!.toFixed(1)} ms`;
    console.log(
      `measured ${c.name} ${c.impl}: ${c.ms.toFixed(2)} ms (min ${c.min_ms.toFixed(2)}, max ${
        c.max_ms.toFixed(2)
      }${
        c.first_ms ? `; first step ${c.first_ms.toFixed(0)} ms, ${(c.first_ms / c.ms).toFixed(2)}×` : ""
      }), ${c.seq_per_s.toFixed(1)} seq/s, load ${c.load?.join(" ") ?? "unknown"}${shares}`,
    );
    await save();
  };
  /**
   * One part of the run (a case's compile and timing, the peer): its failure is one line naming the part
   * and the cause, and the run goes on, keeping every figure measured before. A failure of the --json
   * write itself is the user's to fix now, so it stops the run.
   */
  const fault = Deno.env.get("BERTFUSE_BENCH_FAULT");
  const part = async (name: string, body: () => Promise<void>) => {
    try {
      if (fault && name.includes(fault)) throw new Error(`injected fault (BERTFUSE_BENCH_FAULT=${fault})`);
      await body();
    } catch (e) {
      if (e instanceof OutputError) throw e;
      const cause = userMessage(e) ?? (e instanceof Error ? e.message : String(e)).split("\n")[0];
      failed.push({ part: name, cause });
      console.error(`bench:bert: ${name} failed: ${cause}`);
      await save();
    }
  };
  /**
   * Times one case, fused and unfused, rounds alternating. A side that does not compile (say, a size the
   * device cannot hold) is its own failed part; the other side is still timed and recorded.
   */
  const measure = async (name: string, g: Graph, feeds: Record<string, ArrayLike<number>>, seqs: number) => {
    const sides: {
      fuse: boolean;
      ex: Profiled;
      plan: Plan;
      peak: number;
      flops: number;
      kernels: number;
      times: number[];
      first?: number;
      load?: number[] | null;
    }[] = [];
    try {
      for (const fuse of [true, false]) {
        await part(`${name} ${fuse ? "fused" : "unfused"}`, async () => {
          const opened = await choice.compile(g, fuse);
          const ex = opened.executor as typeof opened.executor & Profiled;
          const plan: Plan = opened.compiled!.plan;
          threads ??= (ex as { ctx?: { threads?: number } }).ctx?.threads;
          sides.push({
            fuse,
            ex,
            plan,
            peak: plan.slots.reduce((a, s) => a + s.bytes, 0),
            flops: plan.kernels.reduce((a, k) => a + k.flops, 0),
            kernels: plan.kernels.length,
            times: [],
          });
          for (const [n, v] of Object.entries(feeds)) ex.write(n, v);
        });
      }
      await part(`${name} timing`, async () => {
        for (const s of sides) s.first = await timeRound(s.ex, 1);
        for (const s of sides) await timeRound(s.ex, perRound); // warm-up
        for (let r = 0; r < rounds; r++) {
          for (const s of sides) {
            if (r === 0) s.load = loadAverage();
            s.times.push(await timeRound(s.ex, perRound));
          }
        }
        for (const s of sides) {
          const ms = median(s.times);
          // One step under the executor's profile, after the timed rounds so that it changes none of them.
          const shares = await s.ex.profile?.(1).then((p) => stepShares(s.plan, p), (e) => {
            console.error(`bench:bert: ${name}: no profile (${(e as Error).message.split("\n")[0]})`);
          });
          await record({
            name,
            impl: s.fuse ? "bertfuse" : "bertfuse-unfused",
            seq_per_s: seqs / (ms / 1000),
            ms,
            min_ms: Math.min(...s.times),
            max_ms: Math.max(...s.times),
            first_ms: s.first,
            load: s.load ?? null,
            peak_bytes: s.peak,
            kernels: s.kernels,
            tflops: s.flops / (ms / 1000) / 1e12,
            ...shares,
          });
        }
      });
    } finally {
      for (const s of sides) s.ex.destroy();
    }
  };

  // Token ids and labels: any fixed values do (timing does not depend on them); a small LCG keeps runs equal.
  let state = 12345;
  const r = {
    int: (lo: number, hi: number) => lo + ((state = (state * 1103515245 + 12345) >>> 0) % (hi - lo)),
  };
  const V = model.config.vocab_size;
  const tokens = (B: number) => ({
    input_ids: Int32Array.from({ length: B * seq }, () => r.int(0, V)),
    token_type_ids: Int32Array.from({ length: B * seq }, (_, i) => (i % seq >= seq / 2 ? 1 : 0)),
    attention_mask: new Int32Array(B * seq).fill(1),
  });
  const tag = `${model.name}`;
  if (mode === "finetune") {
    await part(`${tag}-finetune`, async () => {
      // deno task finetune's step: the sentence-classification head (two labels, as the built-in task) and
      // BERT's Adam (AdamW with its schedule), everything else as in pre-training.
      const g = buildModelGraph({
        model: defineBert(`${model.name}-cls2`, { ...model.config, num_labels: 2 }),
        mode: "train",
        head: "classification",
        precision,
        batchSize: batch,
        seqLen: seq,
        optimizer: { kind: "adamw", dynamicScale: precision === "fp16" },
      });
      const layout = flatLayoutOf(g);
      await measure(`${tag}-finetune-s${seq}-${precision}`, g, {
        ...optimizerFeeds(
          layout,
          { base: 1e-4, warmupProportion: 0.1, totalSteps: 1000 },
          { step: 0, lossScale: precision === "fp16" ? 2 ** 16 : 1 },
        ),
        [OPT.flatParams]: flatFromParams(await initParamsParallel(g, 1), layout),
        ...tokens(batch),
        labels: Int32Array.from({ length: batch }, () => r.int(0, 2)),
        rng_key: [1, 0],
      }, batch);
    });
  }
  if (mode === "train" || mode === "all") {
    await part(`${tag}-train`, async () => {
      const g = buildModelGraph({
        model,
        mode: "train",
        precision,
        batchSize: batch,
        seqLen: seq,
        maxPredictions: preds,
        optimizer: { kind: "lamb", dynamicScale: precision === "fp16" },
      });
      const layout = flatLayoutOf(g);
      const feeds: Record<string, ArrayLike<number>> = {
        ...optimizerFeeds(
          layout,
          { base: 6e-3, warmupProportion: 0.1, totalSteps: 1000 },
          { step: 0, lossScale: precision === "fp16" ? 2 ** 16 : 1 },
        ),
        [OPT.flatParams]: flatFromParams(await initParamsParallel(g, 1), layout),
        ...tokens(batch),
        masked_lm_positions: Int32Array.from({ length: batch * preds }, () => r.int(0, seq)),
        masked_lm_ids: Int32Array.from({ length: batch * preds }, () => r.int(0, V)),
        next_sentence_labels: Int32Array.from({ length: batch }, () => r.int(0, 2)),
        rng_key: [1, 0],
      };
      await measure(`${tag}-train-s${seq}-${precision}`, g, feeds, batch);
    });
  }
  if (mode === "infer" || mode === "all") {
    for (const B of [inferBatch, 1]) {
      await part(`${tag}-infer-b${B}`, async () => {
        const g = buildModelGraph({ model, mode: "infer", precision, batchSize: B, seqLen: seq });
        await measure(`${tag}-infer-s${seq}-b${B}-${precision}`, g, {
          ...Object.fromEntries(await initParamsParallel(g, 1)),
          ...tokens(B),
        }, B);
      });
    }
  }

  // The peers know pre-training and inference shapes, not the fine-tuning head. Each runs once every case of
  // ours has been timed and its executors destroyed, one process at a time, each awaited before the next.
  const peer = mode !== "finetune" && (values.peer || (choice.kind === "cpu" && !values["no-peer"]));
  for (const p of peer ? PEERS : []) {
    const what = p.what.filter((w) => mode === "all" || w === mode);
    if (!what.length) continue;
    await part(`peer ${p.name}`, async () => {
      const got = await runPeer(values.python ?? "python3", p.name, [
        new URL(`./peers/${p.script}`, import.meta.url).pathname,
        ...p.args,
        `--config=${JSON.stringify({ name: model.name, ...model.config })}`,
        ...[`--what=${what.join(",")}`, `--seq=${seq}`, `--masked=${preds}`, `--train-batch=${batch}`],
        ...[`--infer-batches=${inferBatch},1`, "--warmup=3", `--iters=${rounds * perRound}`],
        ...(threads ? [`--threads=${threads}`] : []),
      ]);
      peers[p.name] = got.version;
      for (const c of got.cases) await record(c);
    });
  }

  console.log(
    `${device}: ${model.name}, ${precision}; ${blas ? `${blas.config}, core ${blas.corename}` : "no BLAS"}`,
  );
  console.log(
    `| case | impl | kernels | ms (median) | min | max | load (1 min) | seq/s | TFLOP/s | peak MiB |`,
  );
  console.log(`|---|---|---|---|---|---|---|---|---|---|`);
  for (const c of cases) {
    console.log(
      `| ${c.name} | ${c.impl} | ${c.kernels || "-"} | ${c.ms.toFixed(2)} | ${c.min_ms.toFixed(2)} | ` +
        `${c.max_ms.toFixed(2)} | ${c.load?.[0] ?? "-"} | ${c.seq_per_s.toFixed(1)} | ` +
        `${c.tflops?.toFixed(3) ?? "-"} | ${c.peak_bytes ? (c.peak_bytes / 2 ** 20).toFixed(0) : "-"} |`,
    );
  }
  for (const c of cases.filter((c) => c.impl === "bertfuse")) {
    const unfused = cases.find((u) => u.name === c.name && u.impl === "bertfuse-unfused");
    const others = cases.filter((p) => p.name === c.name && !p.impl.startsWith("bertfuse"));
    const ratios = [
      ...(unfused ? [`fused/unfused ${(c.seq_per_s / unfused.seq_per_s).toFixed(2)}x`] : []),
      ...others.map((p) => `vs ${p.impl} ${(c.seq_per_s / p.seq_per_s).toFixed(2)}x`),
    ];
    console.log(`${c.name}: ${ratios.join(", ")}`);
  }
  const large = cases.find((c) =>
    c.impl === "bertfuse" && c.name.includes("train-s128") && /large/.test(c.name)
  );
  if (large) {
    console.log(
      `BERT-large model FLOP rate: ${
        (large.seq_per_s * BERT_LARGE_S128_TRAIN_FLOP / 1e12).toFixed(1)
      } TFLOP/s`,
    );
  }
  await save();
  // The failures again after the table, so the last lines say what is missing from it.
  for (const f of failed) console.error(`bench:bert: ${f.part} failed: ${f.cause}`);
  if (failed.length) {
    console.error(
      `bench:bert: ${failed.length} part(s) failed; the ${cases.length} figure(s) above were kept`,
    );
    Deno.exit(1);
  }
});

/**
 * One peer (bench/peers/, protocol in peer_common.py): its JSON lines as cases and its version; version null,
 * with one line on stderr, when its library (or Python itself) is missing. Any other failure throws.
 */
async function runPeer(python: string, name: string, args: string[]): Promise<{
  version: string | null;
  cases: Case[];
}> {
  console.error(`peer ${name}: ${python} ${args.map((a) => (/[\s"{]/.test(a) ? `'${a}'` : a)).join(" ")}`);
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(python, { args, stdout: "piped", stderr: "inherit" }).output();
  } catch (e) {
    console.error(`peer ${name}: missing (cannot run ${python}: ${(e as Error).message.split("\n")[0]})`);
    return { version: null, cases: [] };
  }
  const lines = new TextDecoder().decode(out.stdout).split("\n").filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
  if (out.code === PEER_MISSING) {
    console.error(`peer ${name}: missing (${lines.find((l) => l.missing)?.missing ?? "its library"})`);
    return { version: null, cases: [] };
  }
  if (!out.success) throw new Error(`${args[0].split("/").pop()} exited with status ${out.code}`);
  const cases = lines.filter((r) => r.name).map((r): Case => ({
    name: r.name,
    impl: r.impl,
    seq_per_s: r.seq_per_s,
    ms: r.ms,
    min_ms: r.min_ms,
    max_ms: r.max_ms,
    load: r.load ?? null,
    peak_bytes: r.peak_bytes ?? 0,
    kernels: 0,
  }));
  return { version: String(lines.find((r) => r.version)?.version ?? "unknown"), cases };
}

/**
 * The GEMM library as our CPU cases run it (oneDNN, else OpenBLAS: runtime/cpu/cpu_context.ts): the library,
 * its build, the kernels it runs, and this environment's OPENBLAS_* / DNNL_* variables (OPENBLAS_CORETYPE
 * overrides the core OpenBLAS would pick); null on another backend or without either.
 */
function blasRecord(kind: string) {
  const b = kind === "cpu"
    ? [openGemmLibrary("onednn"), openGemmLibrary("openblas")].find((l) => "path" in l)
    : undefined;
  if (!b || !("path" in b)) return null;
  const vars = Object.entries(Deno.env.toObject()).filter(([k]) => /^(OPENBLAS|DNNL|ONEDNN)_/.test(k));
  return { path: b.path, config: b.config, corename: b.corename, env: Object.fromEntries(vars) };
}

/** Whether the file at `path` is a bench result (what --json may replace): JSON with device, command, cases. */
async function isResultFile(path: string): Promise<boolean> {
  const r = JSON.parse(await Deno.readTextFile(path));
  return typeof r?.device === "string" && typeof r?.command === "string" && Array.isArray(r?.cases);
}
