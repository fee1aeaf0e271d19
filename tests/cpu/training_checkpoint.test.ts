/** Training checkpoints: round trip, commit protocol, verification errors, keep-last-N, newest lookup. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { defineBert } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { numel } from "../../ir/mod.ts";
import { loadHfWeights } from "../../model_io/hf_checkpoint.ts";
import { serializeSafetensors } from "../../model_io/safetensors.ts";
import {
  CheckpointError,
  type CheckpointParts,
  findNewestCheckpoint,
  listCheckpoints,
  readCheckpoint,
  verifyCheckpoint,
  writeCheckpoint,
} from "../../training/checkpoint.ts";
import { seededRandom } from "../../cases/random.ts";

const FX = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const cfgPath = `${FX}pretraining/config.json`;
const cfg = readBertConfig(cfgPath);
const graph = defineBert("train-ckpt-test", cfg).build({
  head: "pretraining",
  mode: "infer",
  batchSize: 1,
  seqLen: 4,
});
const config = JSON.parse(Deno.readTextFileSync(cfgPath));

// Fresh data every run; the seed is in every failure message so a failure can be reproduced.
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] || 1;
const rng = seededRandom(SEED);
const randF32 = (n: number) => Float32Array.from({ length: n }, () => rng.normal() + 0.01);

function parts(step: number): CheckpointParts {
  const weights = new Map<string, Float32Array>();
  for (const [name, node] of graph.sources("param")) weights.set(name, randF32(numel(node.type.shape)));
  const total = [...weights.values()].reduce((n, w) => n + w.length, 0);
  return {
    model: { graph, config, weights },
    optimizer: new Map<string, Float32Array | { shape: number[]; data: Float32Array }>([
      ["adam_m", randF32(total)],
      ["adam_v", randF32(total).map(Math.abs)],
      ["shaped", { shape: [3, 5], data: randF32(15) }],
    ]),
    state: {
      step,
      optimizerStep: Math.max(0, step - 1),
      lossScaler: { scale: 32768, cleanSteps: 17 },
      schedule: { base: 6e-3, warmupProportion: 0.2843, totalSteps: 7038, degree: 0.5 },
      rng: { seed: SEED, counter: 12345 },
      loader: { version: 1, epoch: 2, position: 77, fingerprint: "x" },
      args: { model: "bert-tiny", "batch-size": 8 },
    },
  };
}

async function tempRun(): Promise<string> {
  return await Deno.makeTempDir({ prefix: "bertfuse-ckpt-" });
}

const bitsEqual = (a: Float32Array, b: Float32Array, what: string) => {
  assert.equal(a.length, b.length, what);
  assert.deepEqual(
    new Uint32Array(a.buffer, a.byteOffset, a.length),
    new Uint32Array(b.buffer, b.byteOffset, b.length),
    `${what} (seed ${SEED})`,
  );
};

Deno.test("round trip: tensors bit-identical, state equal, Hugging Face loader reads the folder", async () => {
  const run = await tempRun();
  const p = parts(40);
  const { dir, manifest } = await writeCheckpoint(run, 40, p);
  assert.equal(dir, join(run, "ckpt_40"));
  assert.deepEqual(manifest.files.map((f) => f.name), [
    "config.json",
    "model.safetensors",
    "optimizer.safetensors",
    "trainer_state.json",
  ]);
  const names = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  assert.deepEqual(names, [
    "config.json",
    "manifest.json",
    "model.safetensors",
    "optimizer.safetensors",
    "trainer_state.json",
  ]);

  const c = await readCheckpoint(dir);
  assert.equal(c.step, 40);
  assert.deepEqual(c.state, p.state);
  assert.deepEqual(c.config, config);
  assert.equal(c.model.size, p.model.weights.size);
  for (const [name, w] of p.model.weights) bitsEqual(c.model.get(name)!, w as Float32Array, name);
  bitsEqual(c.optimizer.get("adam_m")!, p.optimizer.get("adam_m") as Float32Array, "adam_m");
  bitsEqual(c.optimizer.get("adam_v")!, p.optimizer.get("adam_v") as Float32Array, "adam_v");
  assert.deepEqual(c.optimizerShapes.get("shaped"), [3, 5]);
  assert.deepEqual(c.optimizerShapes.get("adam_m"), [c.optimizer.get("adam_m")!.length]);

  // What `deno task infer --checkpoint` does, and readCheckpoint's graph-checked path.
  const hf = await loadHfWeights(graph, dir);
  const viaGraph = (await readCheckpoint(dir, { graph })).model;
  for (const [name, w] of p.model.weights) {
    bitsEqual(hf.get(name)!, w as Float32Array, `hf ${name}`);
    bitsEqual(viaGraph.get(name)!, w as Float32Array, `graph ${name}`);
  }
  await Deno.remove(run, { recursive: true });
});

Deno.test("optimizer.safetensors is byte-identical to safetensors.ts's serializer (streamed writer)", async () => {
  const run = await tempRun();
  const p = parts(1);
  const { dir } = await writeCheckpoint(run, 1, p);
  const asInput = new Map(
    [...p.optimizer].map(([k, t]) => {
      const data = t instanceof Float32Array ? t : t.data;
      const shape = t instanceof Float32Array ? [t.length] : t.shape;
      return [k, { dtype: "F32" as const, shape, data }];
    }),
  );
  assert.deepEqual(await Deno.readFile(join(dir, "optimizer.safetensors")), serializeSafetensors(asInput));
  await Deno.remove(run, { recursive: true });
});

Deno.test("a folder without a manifest, and leftover .tmp folders, are ignored and then cleaned up", async () => {
  const run = await tempRun();
  await writeCheckpoint(run, 10, parts(10));
  // A crash mid-save: a tmp folder with some files, and a renamed folder that never got its manifest.
  const crashed = join(run, "ckpt_20.tmp-99999");
  await Deno.mkdir(crashed);
  await Deno.writeTextFile(join(crashed, "config.json"), "{");
  const noManifest = join(run, "ckpt_30");
  await Deno.mkdir(noManifest);
  await Deno.writeTextFile(join(noManifest, "config.json"), "{}");
  assert.equal(await findNewestCheckpoint(run), join(run, "ckpt_10"));
  await assert.rejects(
    () => readCheckpoint(noManifest),
    (e: Error) =>
      e instanceof CheckpointError &&
      e.message.includes("manifest.json: not found; the checkpoint is incomplete"),
  );
  await writeCheckpoint(run, 40, parts(40));
  const left = [...Deno.readDirSync(run)].map((e) => e.name).sort();
  assert.deepEqual(
    left,
    ["ckpt_10", "ckpt_30", "ckpt_40"],
    "tmp leftover removed; a manifest-less folder is not ours to delete",
  );
  assert.equal(await findNewestCheckpoint(run), join(run, "ckpt_40"));
  await Deno.remove(run, { recursive: true });
});

async function corruptCase(damage: (dir: string) => Promise<void>, expect: RegExp) {
  const run = await tempRun();
  await writeCheckpoint(run, 5, parts(5));
  const { dir } = await writeCheckpoint(run, 6, parts(6));
  await damage(dir);
  const before = new Map<string, number>();
  for (const e of Deno.readDirSync(dir)) before.set(e.name, Deno.statSync(join(dir, e.name)).size);
  await assert.rejects(() => readCheckpoint(dir), (e: Error) => {
    assert.ok(e instanceof CheckpointError, `${e}`);
    assert.match(e.message, expect);
    return true;
  });
  // Nothing was rewritten or removed by the failed read.
  for (const e of Deno.readDirSync(dir)) {
    assert.equal(Deno.statSync(join(dir, e.name)).size, before.get(e.name));
  }
  await Deno.remove(run, { recursive: true });
}

Deno.test("truncated file: named, with sizes", async () => {
  await corruptCase(async (dir) => {
    const f = join(dir, "optimizer.safetensors");
    await Deno.truncate(f, (await Deno.stat(f)).size - 3);
  }, /optimizer\.safetensors: is \d+ bytes, manifest\.json says \d+ \(truncated\?\)/);
});

Deno.test("one flipped byte: hash mismatch named", async () => {
  await corruptCase(async (dir) => {
    const f = join(dir, "model.safetensors");
    const b = await Deno.readFile(f);
    b[b.length - 5] ^= 0x40;
    await Deno.writeFile(f, b);
  }, /model\.safetensors: SHA-256 [0-9a-f]{64} does not match manifest\.json/);
});

Deno.test("missing file, bad manifest JSON, wrong version", async () => {
  await corruptCase(
    (dir) => Deno.remove(join(dir, "trainer_state.json")),
    /trainer_state\.json: missing \(listed in manifest\.json\)/,
  );
  await corruptCase(
    (dir) => Deno.writeTextFile(join(dir, "manifest.json"), '{"format":'),
    /manifest\.json: not valid JSON/,
  );
  await corruptCase(async (dir) => {
    const m = JSON.parse(await Deno.readTextFile(join(dir, "manifest.json")));
    m.version = 99;
    await Deno.writeTextFile(join(dir, "manifest.json"), JSON.stringify(m));
  }, /manifest\.json: version 99 is not supported/);
  await corruptCase(async (dir) => {
    const m = JSON.parse(await Deno.readTextFile(join(dir, "manifest.json")));
    m.files = m.files.filter((f: { name: string }) => f.name !== "optimizer.safetensors");
    await Deno.writeTextFile(join(dir, "manifest.json"), JSON.stringify(m));
  }, /manifest\.json: does not list optimizer\.safetensors/);
});

Deno.test("findNewestCheckpoint: a newest checkpoint that fails verification is an error naming the older one", async () => {
  const run = await tempRun();
  assert.equal(await findNewestCheckpoint(run), undefined);
  assert.equal(await findNewestCheckpoint(join(run, "nope")), undefined);
  await writeCheckpoint(run, 100, parts(100));
  await writeCheckpoint(run, 200, parts(200));
  await Deno.truncate(join(run, "ckpt_200", "model.safetensors"), 100);
  await assert.rejects(
    () => findNewestCheckpoint(run),
    (e: Error) =>
      e instanceof CheckpointError && e.message.includes("ckpt_200/model.safetensors: is 100 bytes") &&
      e.message.includes("the next older checkpoint is " + join(run, "ckpt_100")),
  );
  // Full verification also catches same-size corruption that the quick check cannot.
  await verifyCheckpoint(join(run, "ckpt_100"));
  await Deno.remove(run, { recursive: true });
});

Deno.test("keep-last-3 by step, never the one just written; the same step is replaced", async () => {
  const run = await tempRun();
  for (const s of [1, 2, 3, 10, 20]) await writeCheckpoint(run, s, parts(s));
  assert.deepEqual((await listCheckpoints(run)).map((c) => c.step), [3, 10, 20]);
  // Resumed from an older step (say 3) and saved at 4: 4 stays although 10 and 20 are newer.
  const { removed } = await writeCheckpoint(run, 4, parts(4));
  assert.deepEqual(removed, [join(run, "ckpt_3")]);
  assert.deepEqual((await listCheckpoints(run)).map((c) => c.step), [4, 10, 20]);
  // keep = 1, and a rewrite of an existing step.
  const p = parts(20);
  await writeCheckpoint(run, 20, p, { keep: 1 });
  assert.deepEqual((await listCheckpoints(run)).map((c) => c.step), [20]);
  assert.deepEqual((await readCheckpoint(join(run, "ckpt_20"))).state, p.state);
  assert.deepEqual([...Deno.readDirSync(run)].map((e) => e.name), ["ckpt_20"]);
  await Deno.remove(run, { recursive: true });
});

Deno.test("a bad save leaves nothing behind and the previous checkpoint intact", async () => {
  const run = await tempRun();
  await writeCheckpoint(run, 7, parts(7));
  const p = parts(8);
  p.model.weights.delete([...p.model.weights.keys()][0]);
  await assert.rejects(() => writeCheckpoint(run, 8, p), CheckpointError);
  const q = parts(8);
  q.state.lossScaler = { scale: NaN };
  await assert.rejects(() => writeCheckpoint(run, 8, q), /trainer state state\.lossScaler\.scale is NaN/);
  await assert.rejects(
    () => writeCheckpoint(run, 9, parts(8)),
    /trainer state says step 8, the checkpoint is for step 9/,
  );
  assert.deepEqual([...Deno.readDirSync(run)].map((e) => e.name), ["ckpt_7"]);
  await verifyCheckpoint(join(run, "ckpt_7"));
  await Deno.remove(run, { recursive: true });
});
