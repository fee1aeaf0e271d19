/**
 * The output rule (model_io/outputs.ts) for a training run folder, claimed before any work: it must be
 * absent, empty, or ours (our marker run.json, or a checkpoint with our manifest); a folder of a user's files
 * is refused (training would overwrite metrics.jsonl, loss_curve.* and checkpoints of the same names). A
 * lock file names the run holding it, so a second trainer on the same folder is refused instead of deleting
 * the first one's checkpoints; the lock of a process that died is taken over. A folder the claim created is
 * removed again if the run fails before writing anything into it.
 */
import { join } from "node:path";
import { acquireLock, checkDirOutput, io, type Lock, LOCK_FILE } from "../model_io/outputs.ts";
import { CHECKPOINT_FORMAT, listCheckpoints } from "./checkpoint.ts";

export const RUN_MARKER = "run.json";
const RUN_FORMAT = "bertfuse-training-run";

/** Whether a folder is a training run of ours (marker, or a checkpoint with our manifest). */
export async function isRunFolder(dir: string): Promise<boolean> {
  // Only a lock: a run killed before it wrote anything (a live one keeps its lock and is refused by it).
  if ([...Deno.readDirSync(dir)].every((e) => e.name === LOCK_FILE)) return true;
  try {
    if (JSON.parse(await Deno.readTextFile(join(dir, RUN_MARKER)))?.format === RUN_FORMAT) return true;
  } catch { /* no marker: a run from before markers is recognised by its checkpoints */ }
  for (const c of await listCheckpoints(dir)) {
    if (!c.complete) continue;
    const m = JSON.parse(await Deno.readTextFile(join(c.dir, "manifest.json")).catch(() => "{}"));
    if (m?.format === CHECKPOINT_FORMAT) return true;
  }
  return false;
}

export interface RunFolder {
  readonly dir: string;
  /** Marks the folder as ours (run.json): called when the run starts writing into it. */
  mark(command: string): Promise<void>;
  /** Releases the lock; removes the folder if the claim created it and nothing was written. */
  release(): Promise<void>;
}

/** Claims `dir` for a run of `command` (see the file comment); refusals are OutputErrors. */
export async function claimRunFolder(
  dir: string,
  command: string,
  inputs: readonly (string | undefined)[],
  onNote?: (msg: string) => void,
): Promise<RunFolder> {
  const state = await checkDirOutput(dir, {
    label: `--output-dir ${dir}`,
    inputs,
    isOurs: isRunFolder,
    oursLooksLike: "a training run folder (run.json, checkpoints with our manifest)",
  });
  if (state === "absent") await io(dir, "create the folder", () => Deno.mkdir(dir, { recursive: true }));
  let lock: Lock;
  try {
    lock = await acquireLock(dir, command, onNote);
  } catch (e) {
    if (state === "absent") await Deno.remove(dir).catch(() => {});
    throw e;
  }
  let marked = false;
  return {
    dir,
    async mark(cmd: string) {
      marked = true;
      const text = JSON.stringify({ format: RUN_FORMAT, version: 1, command: cmd }, null, 2) + "\n";
      await io(join(dir, RUN_MARKER), "write", () => Deno.writeTextFile(join(dir, RUN_MARKER), text));
    },
    async release() {
      await lock.release();
      if (state === "absent" && !marked) {
        // Only if it holds nothing now (the lock is gone): never remove anything a run wrote.
        const left: string[] = [];
        for await (const e of Deno.readDir(dir)) if (e.name !== LOCK_FILE) left.push(e.name);
        if (left.length === 0) await Deno.remove(dir).catch(() => {});
      }
    },
  };
}
