/**
 * Training checkpoints: one folder `ckpt_<step>/` per save, holding
 *
 *   config.json, model.safetensors   Hugging Face layout (model_io/hf_checkpoint.ts), so
 *                                    `deno task infer --checkpoint ckpt_<step>` reads it as is
 *   vocab.txt, tokenizer_config.json, special_tokens_map.json
 *                                    the tokenizer, when the caller gives one (ModelPart.head)
 *   optimizer.safetensors            named f32 tensors: moments and whatever else the optimizer keeps
 *   trainer_state.json               step, optimizer step, loss scaler, schedule, RNG, loader position, args
 *   manifest.json                    format and version, and every other file with its size and SHA-256
 *
 * Commit protocol ("manifest last"): every file is written and fsynced inside `ckpt_<step>.tmp-<pid>/`,
 * then manifest.json is written and fsynced there as the last file, then the folder is renamed to
 * `ckpt_<step>/` and the run folder is fsynced. The rename is the single commit point, so "complete" has
 * one meaning: a folder named `ckpt_<step>` that holds a manifest. We write the manifest before the
 * rename rather than after it so that a crash can never leave a `ckpt_<step>/` that looks like a
 * checkpoint but is not one; a `ckpt_<step>/` without a manifest (made by hand or by another tool) is still
 * treated as incomplete and skipped. Leftover `*.tmp-<pid>` and `*.old-<pid>` folders from crashes are
 * never read and are removed by the next save (of any process id: one trainer per run folder).
 *
 * Reading verifies the manifest: every listed file present, sizes and SHA-256 equal, JSON parseable,
 * format version known, and the step in the folder name, the manifest and trainer_state.json equal. Any
 * failure is a CheckpointError naming the file and what is wrong.
 *
 * Sizes: BERT-large is ~1.3 GB of weights and ~2.7 GB of moments. Optimizer tensors are streamed to disk
 * from the caller's arrays (no serialized copy) and hashed as they are written; the model file, written by
 * hf.ts, is hashed by a streaming read-back. Reading reads each file once and views f32 tensors in place.
 */
import { createHash } from "node:crypto";
import { basename, join } from "node:path";
import type { Graph } from "../ir/mod.ts";
import {
  CheckpointError,
  mapHfTensors,
  type WeightDType,
  writeHfCheckpoint,
} from "../model_io/hf_checkpoint.ts";
import type { HfHeadParts } from "../model_io/hf_head_files.ts";
import { ioCause, isIoError, OutputError } from "../model_io/outputs.ts";
import { parseSafetensors, SafetensorsError, type TensorEntry, toFloat32 } from "../model_io/safetensors.ts";

// One error class for every checkpoint problem, the one cli/common.ts already turns into a one-line error.
export { CheckpointError };

export const CHECKPOINT_FORMAT = "bertfuse-training-checkpoint";
export const CHECKPOINT_VERSION = 1;
export const DEFAULT_KEEP = 3;

export const FILES = {
  config: "config.json",
  model: "model.safetensors",
  optimizer: "optimizer.safetensors",
  state: "trainer_state.json",
  manifest: "manifest.json",
} as const;
const REQUIRED = [FILES.config, FILES.model, FILES.optimizer, FILES.state];

/** Everything besides tensors needed to continue a run exactly. Opaque parts are any JSON. */
export interface TrainerState {
  /** Training steps (batches) completed; equals the checkpoint's step. */
  step: number;
  /** Optimizer updates applied (steps minus those skipped for overflow); the schedule's clock. */
  optimizerStep: number;
  /** DynamicLossScaler.state(). */
  lossScaler: unknown;
  /** The schedule's options (and anything else it needs). */
  schedule: unknown;
  /** RNG seed and state (dropout seed, Philox counters...). */
  rng: unknown;
  /** Loader.state(), opaque here. */
  loader: unknown;
  /** The command-line arguments of the run, for the record and for checks on resume. */
  args: Record<string, unknown>;
  [extra: string]: unknown;
}

export interface ModelPart {
  /** The graph whose params name and shape the weights (hf.ts writes them in its order and shapes). */
  graph: Graph;
  /** Hugging Face config.json contents. */
  config: object;
  weights: Map<string, ArrayLike<number>>;
  /** Default F32 (exact round trip). */
  dtype?: WeightDType;
  /**
   * The head, its labels and the tokenizer: config.json then names the architecture and the folder
   * carries vocab.txt, tokenizer_config.json and special_tokens_map.json (model_io/hf_head_files.ts),
   * so Hugging Face's from_pretrained opens it. Omitted: config and weights only, as before.
   */
  head?: HfHeadParts;
}

/** A flat f32 vector, or one with a shape (its element count must match). */
export type OptimizerTensor = Float32Array | { shape: readonly number[]; data: Float32Array };

export interface CheckpointParts {
  model: ModelPart;
  optimizer: Map<string, OptimizerTensor>;
  state: TrainerState;
}

export interface ManifestFile {
  name: string;
  bytes: number;
  sha256: string;
}

export interface Manifest {
  format: typeof CHECKPOINT_FORMAT;
  version: number;
  step: number;
  files: ManifestFile[];
}

export interface WriteOptions {
  /** Complete checkpoints to keep, the one just written included (default 3). */
  keep?: number;
}

export interface WriteResult {
  dir: string;
  manifest: Manifest;
  /** Checkpoint folders removed by the keep-last-N policy. */
  removed: string[];
}

export function checkpointDirName(step: number): string {
  return `ckpt_${step}`;
}

const CKPT_RE = /^ckpt_(0|[1-9]\d*)$/;
const LEFTOVER_RE = /^ckpt_\d+\.(tmp|old)-\d+$/;
const CHUNK = 16 << 20;

function fail(where: string, problem: string): never {
  throw new CheckpointError(`${where}: ${problem}`);
}

// ---------------------------------------------------------------------------------------------------
// Writing

/**
 * Writes `ckpt_<step>/` under runDir (see the file comment for the protocol), then removes all but the
 * newest `keep` complete checkpoints. The one just written is never removed. An existing `ckpt_<step>/`
 * (a run resumed from an earlier checkpoint reaching the same step again) is replaced: it is renamed
 * aside, the new one renamed in, and the old one deleted.
 */
export async function writeCheckpoint(
  runDir: string,
  step: number,
  parts: CheckpointParts,
  opts: WriteOptions = {},
): Promise<WriteResult> {
  const keep = opts.keep ?? DEFAULT_KEEP;
  if (!Number.isSafeInteger(keep) || keep < 1) {
    throw new RangeError(`keep must be a positive integer, got ${keep}`);
  }
  if (!Number.isSafeInteger(step) || step < 0) {
    throw new RangeError(`step must be a non-negative integer, got ${step}`);
  }
  const finalDir = join(runDir, checkpointDirName(step));
  const stateText = trainerStateJson(parts.state, step, finalDir);

  const tmp = join(runDir, `${checkpointDirName(step)}.tmp-${Deno.pid}`);
  let manifest: Manifest;
  let old: string | undefined;
  try {
    await Deno.mkdir(runDir, { recursive: true });
    await removeLeftovers(runDir);
    await Deno.mkdir(tmp);
    const { graph, config, weights, dtype, head } = parts.model;
    const written = await writeHfCheckpoint(tmp, graph, config, weights, dtype ?? "F32", head);
    const files: ManifestFile[] = [];
    for (const name of written) {
      // hf.ts fsyncs the safetensors file but not config.json; hashFile syncs what it reads.
      files.push({ name, ...await hashFile(join(tmp, name), true) });
    }
    files.push({
      name: FILES.optimizer,
      ...await writeOptimizerFile(join(tmp, FILES.optimizer), parts.optimizer),
    });
    files.push({ name: FILES.state, ...await writeSynced(join(tmp, FILES.state), encode(stateText)) });
    const present = new Set<string>();
    for await (const e of Deno.readDir(tmp)) present.add(e.name);
    const listed = new Set(files.map((f) => f.name));
    const stray = [...present].filter((n) => !listed.has(n));
    if (stray.length) fail(tmp, `unexpected files while writing: ${stray.join(", ")}`);
    files.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    manifest = { format: CHECKPOINT_FORMAT, version: CHECKPOINT_VERSION, step, files };
    // The manifest is the last file written; the rename below is what makes the checkpoint visible.
    await writeSynced(join(tmp, FILES.manifest), encode(JSON.stringify(manifest, null, 2) + "\n"));
    await syncDir(tmp);
    if (await exists(finalDir)) {
      old = join(runDir, `${checkpointDirName(step)}.old-${Deno.pid}`);
      await Deno.rename(finalDir, old);
    }
    await Deno.rename(tmp, finalDir);
    await syncDir(runDir);
    if (old) await Deno.remove(old, { recursive: true });
  } catch (e) {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
    // Failed between moving an existing same-step checkpoint aside and moving the new one in: put it back.
    if (old && !(await exists(finalDir))) await Deno.rename(old, finalDir).catch(() => {});
    // A full or read-only disk: one line naming the checkpoint (Deno's message names no path).
    if (isIoError(e) && !(e instanceof OutputError)) {
      throw new OutputError(`${finalDir}: cannot write the checkpoint (${ioCause(e)})`);
    }
    throw e;
  }
  const removed = await pruneCheckpoints(runDir, keep, finalDir);
  return { dir: finalDir, manifest, removed };
}

/**
 * Keeps `protect` (if given) and the newest complete checkpoints up to `keep` in all; renames the rest
 * aside and deletes them (renamed first, so a crash mid-delete leaves a leftover, never a checkpoint with
 * files missing). Incomplete `ckpt_<step>/` folders are left alone. Returns the removed folders.
 */
export async function pruneCheckpoints(runDir: string, keep: number, protect?: string): Promise<string[]> {
  const complete = (await listCheckpoints(runDir)).filter((c) => c.complete).reverse();
  // Compared by folder name, so "run/ckpt_5" and "run/ckpt_5/" are the same checkpoint.
  const kept = new Set<string>();
  if (protect !== undefined) kept.add(basename(protect));
  for (const c of complete) {
    if (kept.size >= keep) break;
    kept.add(basename(c.dir));
  }
  const removed: string[] = [];
  for (const c of complete) {
    if (kept.has(basename(c.dir))) continue;
    const aside = join(runDir, `${basename(c.dir)}.old-${Deno.pid}`);
    await Deno.rename(c.dir, aside);
    await Deno.remove(aside, { recursive: true });
    removed.push(c.dir);
  }
  return removed;
}

async function removeLeftovers(runDir: string): Promise<void> {
  for await (const e of Deno.readDir(runDir)) {
    if (e.isDirectory && LEFTOVER_RE.test(e.name)) {
      await Deno.remove(join(runDir, e.name), { recursive: true });
    }
  }
}

/** JSON of the trainer state; refuses what JSON cannot carry exactly (NaN, Infinity, undefined...). */
function trainerStateJson(state: TrainerState, step: number, where: string): string {
  if (state.step !== step) {
    fail(where, `trainer state says step ${state.step}, the checkpoint is for step ${step}`);
  }
  if (!Number.isSafeInteger(state.optimizerStep) || state.optimizerStep < 0 || state.optimizerStep > step) {
    fail(where, `optimizer step ${state.optimizerStep} is not a count between 0 and ${step}`);
  }
  const check = (v: unknown, at: string, depth = 0): void => {
    if (typeof v === "number" && !Number.isFinite(v)) {
      fail(where, `trainer state ${at} is ${v}, which JSON cannot hold (resume would not be exact)`);
    }
    if (v === undefined || typeof v === "function" || typeof v === "bigint" || typeof v === "symbol") {
      fail(where, `trainer state ${at} is ${typeof v}, which JSON cannot hold`);
    }
    if (depth > 64) fail(where, `trainer state nests too deeply at ${at}`);
    if (Array.isArray(v)) v.forEach((x, i) => check(x, `${at}[${i}]`, depth + 1));
    else if (v !== null && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) check(x, `${at}.${k}`, depth + 1);
    }
  };
  check(state, "state");
  return JSON.stringify(state, null, 2) + "\n";
}

function encode(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

async function writeAll(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
}

async function writeSynced(path: string, bytes: Uint8Array): Promise<{ bytes: number; sha256: string }> {
  const file = await Deno.open(path, { write: true, createNew: true });
  try {
    await writeAll(file, bytes);
    await file.sync();
  } finally {
    file.close();
  }
  return { bytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/** Size and SHA-256 of a file by a streaming read; `sync` also fsyncs it (to cover writers that don't). */
async function hashFile(path: string, sync = false): Promise<{ bytes: number; sha256: string }> {
  const file = await Deno.open(path, { read: true });
  try {
    if (sync) await file.sync();
    const h = createHash("sha256");
    // Two buffers: the next read fills one while the other is hashed.
    const bufs = [new Uint8Array(CHUNK), new Uint8Array(CHUNK)];
    let total = 0, i = 0;
    let pending = file.read(bufs[0]);
    while (true) {
      const n = await pending;
      if (n === null) break;
      const cur = bufs[i];
      i ^= 1;
      pending = file.read(bufs[i]);
      h.update(cur.subarray(0, n));
      total += n;
    }
    return { bytes: total, sha256: h.digest("hex") };
  } finally {
    file.close();
  }
}

/**
 * Reads a file of known size into one buffer, hashing chunk by chunk as they arrive (Deno.readFile is
 * several times slower on multi-GB files, and hashing afterwards would be a second pass over memory).
 */
async function readHashed(path: string, size: number): Promise<{ bytes: Uint8Array; sha256: string }> {
  const bytes = new Uint8Array(size);
  const h = createHash("sha256");
  const file = await Deno.open(path, { read: true });
  try {
    // The next chunk is read (off the main thread) while this one hashes the previous.
    const readAt = (off: number) => file.read(bytes.subarray(off, Math.min(size, off + CHUNK)));
    let off = 0;
    let pending = size > 0 ? readAt(0) : undefined;
    while (pending) {
      const n = await pending;
      if (n === null) {
        fail(path, `ended after ${off} bytes, manifest.json says ${size} (truncated while reading?)`);
      }
      const start = off;
      off += n;
      pending = off < size ? readAt(off) : undefined;
      h.update(bytes.subarray(start, off));
    }
    if ((await file.read(new Uint8Array(1))) !== null) fail(path, `grew past ${size} bytes while being read`);
  } finally {
    file.close();
  }
  return { bytes, sha256: h.digest("hex") };
}

async function syncDir(dir: string): Promise<void> {
  // A rename is durable only once its directory is; Linux allows fsync on a directory opened read-only.
  // Where that is refused (other systems), there is nothing better to do.
  try {
    const d = await Deno.open(dir, { read: true });
    try {
      await d.sync();
    } finally {
      d.close();
    }
  } catch { /* best effort */ }
}

/** Whether anything (file, folder, link) is at `path`; other errors than NotFound propagate. */
export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

/**
 * optimizer.safetensors, streamed: the header (same layout rules as safetensors.ts: names in code-unit
 * order, 8-byte padded header) and then each tensor's bytes straight from the caller's array, hashed on the
 * way. serializeSafetensors would first build the whole 2.7 GB file in memory.
 */
async function writeOptimizerFile(
  path: string,
  tensors: Map<string, OptimizerTensor>,
): Promise<{ bytes: number; sha256: string }> {
  const names = [...tensors.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const header: Record<string, unknown> = Object.create(null);
  const datas: Float32Array[] = [];
  let offset = 0;
  for (const name of names) {
    const t = tensors.get(name)!;
    const data = t instanceof Float32Array ? t : t.data;
    const shape = t instanceof Float32Array ? [t.length] : [...t.shape];
    if (!(data instanceof Float32Array)) fail(path, `optimizer tensor '${name}' is not a Float32Array`);
    if (name === "__metadata__" || name === "") fail(path, `'${name}' cannot name an optimizer tensor`);
    const count = shape.reduce((a, b) => a * b, 1);
    if (!shape.every((d) => Number.isSafeInteger(d) && d >= 0) || count !== data.length) {
      fail(path, `optimizer tensor '${name}' has ${data.length} values but shape [${shape}]`);
    }
    header[name] = { dtype: "F32", shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
    datas.push(data);
  }
  const json = encode(JSON.stringify(header));
  const headerLen = Math.ceil(json.length / 8) * 8;
  const head = new Uint8Array(8 + headerLen).fill(0x20, 8 + json.length);
  new DataView(head.buffer).setBigUint64(0, BigInt(headerLen), true);
  head.set(json, 8);

  const h = createHash("sha256");
  const file = await Deno.open(path, { write: true, createNew: true });
  try {
    h.update(head);
    await writeAll(file, head);
    for (const d of datas) {
      const bytes = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
      for (let off = 0; off < bytes.length; off += CHUNK) {
        // The write runs off the main thread while this one hashes the same (unchanging) bytes.
        const chunk = bytes.subarray(off, off + CHUNK);
        const written = writeAll(file, chunk);
        h.update(chunk);
        await written;
      }
    }
    await file.sync();
  } finally {
    file.close();
  }
  return { bytes: head.length + offset, sha256: h.digest("hex") };
}

// ---------------------------------------------------------------------------------------------------
// Reading

export interface CheckpointInfo {
  step: number;
  dir: string;
  /** Has a manifest (not verified here). */
  complete: boolean;
}

/** `ckpt_<step>` folders of a run, oldest first (missing run folder: none). */
export async function listCheckpoints(runDir: string): Promise<CheckpointInfo[]> {
  const out: CheckpointInfo[] = [];
  try {
    for await (const e of Deno.readDir(runDir)) {
      const m = CKPT_RE.exec(e.name);
      if (!m || !e.isDirectory) continue;
      const dir = join(runDir, e.name);
      out.push({ step: Number(m[1]), dir, complete: await exists(join(dir, FILES.manifest)) });
    }
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
  return out.sort((a, b) => a.step - b.step);
}

/**
 * The newest complete checkpoint of a run (checked quickly: manifest valid, files present with the listed
 * sizes; readCheckpoint checks the hashes), or undefined when there is none. Folders without a manifest
 * were never committed and are skipped. A newest checkpoint that HAS a manifest but fails the check is an
 * error, not skipped: falling back to an older one silently would throw away the steps since then and hide
 * a disk or copy problem. The error names the bad file and the next older checkpoint, so the researcher
 * can resume from that one explicitly or delete the bad one.
 */
export async function findNewestCheckpoint(runDir: string): Promise<string | undefined> {
  const complete = (await listCheckpoints(runDir)).filter((c) => c.complete);
  const newest = complete.at(-1);
  if (!newest) return undefined;
  try {
    await verifyCheckpoint(newest.dir, { hashes: false });
  } catch (e) {
    if (!(e instanceof CheckpointError)) throw e;
    const older = complete.at(-2);
    const hint = older
      ? `; the next older checkpoint is ${older.dir} (resume from it explicitly, or remove the bad one)`
      : "";
    throw new CheckpointError(`${e.message}${hint}`);
  }
  return newest.dir;
}

async function readManifest(dir: string): Promise<Manifest> {
  const path = join(dir, FILES.manifest);
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      fail(path, "not found; the checkpoint is incomplete (was the run stopped while saving?)");
    }
    throw e;
  }
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch (e) {
    fail(path, `not valid JSON (${(e as Error).message})`);
  }
  const obj = m as Record<string, unknown>;
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) fail(path, "not a JSON object");
  if (obj.format !== CHECKPOINT_FORMAT) {
    fail(path, `format is ${JSON.stringify(obj.format)}, expected "${CHECKPOINT_FORMAT}"`);
  }
  if (obj.version !== CHECKPOINT_VERSION) {
    fail(
      path,
      `version ${
        JSON.stringify(obj.version)
      } is not supported (this build reads version ${CHECKPOINT_VERSION})`,
    );
  }
  if (!Number.isSafeInteger(obj.step) || (obj.step as number) < 0) {
    fail(path, `step ${obj.step} is not a count`);
  }
  if (!Array.isArray(obj.files)) fail(path, "files is not a list");
  const seen = new Set<string>();
  for (const f of obj.files as ManifestFile[]) {
    const ok = typeof f === "object" && f !== null && typeof f.name === "string" &&
      /^[A-Za-z0-9_.-]+$/.test(f.name) && f.name !== FILES.manifest && !f.name.startsWith(".") &&
      Number.isSafeInteger(f.bytes) && f.bytes >= 0 && typeof f.sha256 === "string" &&
      /^[0-9a-f]{64}$/.test(f.sha256);
    if (!ok) fail(path, `bad file entry ${JSON.stringify(f)}`);
    if (seen.has(f.name)) fail(path, `lists ${f.name} twice`);
    seen.add(f.name);
  }
  const missing = REQUIRED.filter((n) => !seen.has(n));
  if (missing.length) fail(path, `does not list ${missing.join(", ")}`);
  const step = CKPT_RE.exec(basename(dir))?.[1];
  if (step !== undefined && Number(step) !== obj.step) {
    fail(path, `is for step ${obj.step} but the folder is ${basename(dir)}`);
  }
  return obj as unknown as Manifest;
}

async function checkSize(dir: string, f: ManifestFile): Promise<void> {
  const path = join(dir, f.name);
  let size: number;
  try {
    size = (await Deno.stat(path)).size;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) fail(path, "missing (listed in manifest.json)");
    throw e;
  }
  if (size !== f.bytes) {
    fail(path, `is ${size} bytes, manifest.json says ${f.bytes}${size < f.bytes ? " (truncated?)" : ""}`);
  }
}

function checkHash(path: string, f: ManifestFile, actual: string): void {
  if (actual !== f.sha256) {
    fail(
      path,
      `SHA-256 ${actual} does not match manifest.json (${f.sha256}); the file is corrupt or was modified`,
    );
  }
}

/** Checks a checkpoint against its manifest (hashes: a streaming read of every file; default true). */
export async function verifyCheckpoint(dir: string, opts: { hashes?: boolean } = {}): Promise<Manifest> {
  const manifest = await readManifest(dir);
  for (const f of manifest.files) await checkSize(dir, f);
  if (opts.hashes ?? true) {
    for (const f of manifest.files) {
      checkHash(join(dir, f.name), f, (await hashFile(join(dir, f.name))).sha256);
    }
  }
  return manifest;
}

/**
 * A folder given as weights (`infer --checkpoint`, `train --init-checkpoint`) that is one of our training
 * checkpoints (it has our manifest) is verified in full before use; a plain Hugging Face folder has no
 * manifest and passes. A manifest of another format is not ours and is not checked.
 */
export async function verifyIfTrainingCheckpoint(dir: string): Promise<void> {
  const path = join(dir, FILES.manifest);
  let format: unknown;
  try {
    format = JSON.parse(await Deno.readTextFile(path))?.format;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return;
    if (e instanceof SyntaxError) fail(path, `not valid JSON (${e.message})`);
    throw e;
  }
  if (format === CHECKPOINT_FORMAT) await verifyCheckpoint(dir);
}

export interface LoadedCheckpoint {
  dir: string;
  step: number;
  manifest: Manifest;
  /** config.json, parsed. */
  config: Record<string, unknown>;
  /**
   * model.safetensors as f32 by parameter name. F32 tensors are views into the file buffer (no copy).
   * With `graph`, names and shapes are checked against it by hf.ts (and decoded to fresh arrays).
   */
  model: Map<string, Float32Array>;
  /** optimizer.safetensors by name (views into the file buffer), and each tensor's shape. */
  optimizer: Map<string, Float32Array>;
  optimizerShapes: Map<string, number[]>;
  state: TrainerState;
}

export interface ReadOptions {
  /** Map and check the weights against this graph's params (as `deno task infer` does). */
  graph?: Graph;
}

/** Reads and fully verifies a checkpoint folder; every problem is a CheckpointError naming the file. */
export async function readCheckpoint(dir: string, opts: ReadOptions = {}): Promise<LoadedCheckpoint> {
  const manifest = await readManifest(dir);
  for (const f of manifest.files) await checkSize(dir, f);
  const load = async (f: ManifestFile): Promise<Uint8Array> => {
    const path = join(dir, f.name);
    const { bytes, sha256 } = await readHashed(path, f.bytes);
    checkHash(path, f, sha256);
    return bytes;
  };
  // Files the manifest lists beyond ours (none today) are verified too, so nothing listed goes unchecked.
  const bytes = new Map<string, Uint8Array>();
  for (const f of manifest.files) {
    if (REQUIRED.includes(f.name as typeof REQUIRED[number])) bytes.set(f.name, await load(f));
    else await load(f);
  }
  const json = (name: string): Record<string, unknown> => {
    const path = join(dir, name);
    let v: unknown;
    try {
      v = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.get(name)!));
    } catch (e) {
      fail(path, `not valid JSON (${(e as Error).message})`);
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) fail(path, "not a JSON object");
    return v as Record<string, unknown>;
  };
  const config = json(FILES.config);
  const state = json(FILES.state) as TrainerState;
  const statePath = join(dir, FILES.state);
  if (state.step !== manifest.step) {
    fail(statePath, `step ${state.step}, manifest.json says ${manifest.step}`);
  }
  if (
    !Number.isSafeInteger(state.optimizerStep) || state.optimizerStep < 0 || state.optimizerStep > state.step
  ) {
    fail(statePath, `optimizerStep ${state.optimizerStep} is not a count between 0 and ${state.step}`);
  }
  const modelPath = join(dir, FILES.model), optPath = join(dir, FILES.optimizer);
  const modelTensors = parse(bytes.get(FILES.model)!, modelPath);
  let model: Map<string, Float32Array>;
  if (opts.graph) model = mapHfTensors(opts.graph, modelTensors, modelPath);
  else {
    model = new Map();
    for (const [name, t] of modelTensors) model.set(name, f32View(t, modelPath, name, true));
  }
  const optimizer = new Map<string, Float32Array>(), optimizerShapes = new Map<string, number[]>();
  for (const [name, t] of parse(bytes.get(FILES.optimizer)!, optPath)) {
    optimizer.set(name, f32View(t, optPath, name, false));
    optimizerShapes.set(name, t.shape);
  }
  return { dir, step: manifest.step, manifest, config, model, optimizer, optimizerShapes, state };
}

function parse(buf: Uint8Array, path: string): Map<string, TensorEntry> {
  try {
    return parseSafetensors(buf, path).tensors;
  } catch (e) {
    // The hash matched, so the file is what was written: a bad header means a writer bug, still reported
    // as a checkpoint problem with the safetensors message.
    if (e instanceof SafetensorsError) fail(path, e.message);
    throw e;
  }
}

function f32View(t: TensorEntry, path: string, name: string, anyFloat: boolean): Float32Array {
  if (t.dtype === "F32" && t.bytes.byteOffset % 4 === 0) {
    return new Float32Array(t.bytes.buffer, t.bytes.byteOffset, t.bytes.length / 4);
  }
  if (t.dtype === "F32" || (anyFloat && (t.dtype === "F16" || t.dtype === "BF16" || t.dtype === "F64"))) {
    return toFloat32(t);
  }
  return fail(path, `tensor '${name}' is ${t.dtype}, expected F32`);
}
