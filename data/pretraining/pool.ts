/**
 * The threads prepare-data splits its tasks over: this thread plus N - 1 Deno Web Workers (worker.ts),
 * taking tasks from one queue, so a slow shard does not hold up the others.
 *
 * This thread takes part because it would otherwise only wait: each worker is a fresh V8 isolate that
 * compiles the code and fills its tokenizer's memo from nothing, which on a corpus of Brown's size is a
 * good part of the whole job. Workers are handed a second task before they finish the first, so they
 * never sit idle while this thread is busy with its own task and cannot answer.
 *
 * Errors thrown in a worker come back as the same class for the errors users cause (DataError,
 * TokenizerError), so the command still prints one line for them.
 */
import { TokenizerError } from "../tokenizer/mod.ts";
import { DataError } from "../shards/errors.ts";
import { runTask, type Task, type TaskResult } from "./tasks.ts";

interface Queued {
  id: number;
  task: Task;
  transfer: Transferable[];
}

interface Reply {
  id: number;
  ok: boolean;
  result?: unknown;
  name?: string;
  message?: string;
  stack?: string;
}

/** Tasks a worker holds at once: one running, one waiting in its message queue. */
const DEPTH = 2;

export class WorkerPool {
  private readonly workers: Worker[] = [];
  private readonly load = new Map<Worker, Set<number>>();
  private readonly queue: Queued[] = [];
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private localBusy = false;
  private nextId = 0;
  private closed = false;

  /** `threads` >= 2: this thread and threads - 1 workers. */
  constructor(readonly threads: number) {
    const url = new URL("./worker.ts", import.meta.url).href;
    for (let i = 0; i < threads - 1; i++) {
      const w = new Worker(url, { type: "module" });
      w.onmessage = (e: MessageEvent<Reply>) => this.settle(w, e.data);
      w.onerror = (e: ErrorEvent) => {
        // An uncaught error fails the worker's tasks, which the command then reports.
        e.preventDefault();
        for (const id of this.load.get(w) ?? []) {
          this.settle(w, { id, ok: false, name: "Error", message: `worker: ${e.message}` });
        }
      };
      this.workers.push(w);
      this.load.set(w, new Set());
    }
  }

  run<T extends Task>(task: T, transfer: Transferable[] = []): Promise<TaskResult<T>> {
    if (this.closed) return Promise.reject(new Error("worker pool is closed"));
    const id = this.nextId++;
    const p = new Promise<TaskResult<T>>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
    });
    this.queue.push({ id, task, transfer });
    this.dispatch();
    return p;
  }

  close(): void {
    this.closed = true;
    for (const w of this.workers) w.terminate();
    for (const p of this.pending.values()) p.reject(new Error("worker pool closed with tasks pending"));
    this.pending.clear();
  }

  private dispatch(): void {
    // Workers first: a task given to this thread blocks it (and further dispatching) until done.
    for (let depth = 1; depth <= DEPTH; depth++) {
      for (const w of this.workers) {
        const held = this.load.get(w)!;
        // A second task only while there is plenty left: near the end, a task waiting in a busy
        // worker's queue would keep a free thread idle.
        const enough = depth === 1 || this.queue.length >= this.threads;
        if (held.size < depth && this.queue.length > 0 && enough) {
          const { id, task, transfer } = this.queue.shift()!;
          held.add(id);
          w.postMessage({ id, task }, transfer);
        }
      }
    }
    if (!this.localBusy && this.queue.length > 0) {
      this.localBusy = true;
      const { id, task } = this.queue.shift()!;
      // Started from a timer, so replies that are already waiting are handled first.
      setTimeout(async () => {
        let reply: Reply;
        try {
          reply = { id, ok: true, result: await runTask(task) };
        } catch (e) {
          const err = e as Error;
          reply = { id, ok: false, name: err?.name, message: err?.message ?? String(e), stack: err?.stack };
        }
        this.localBusy = false;
        this.settle(undefined, reply);
      }, 0);
    }
  }

  private settle(w: Worker | undefined, reply: Reply): void {
    if (w) this.load.get(w)?.delete(reply.id);
    const p = this.pending.get(reply.id);
    this.pending.delete(reply.id);
    if (p) {
      if (reply.ok) p.resolve(reply.result);
      else p.reject(rebuildError(reply));
    }
    if (!this.closed) this.dispatch();
  }
}

function rebuildError(r: Reply): Error {
  const message = r.message ?? "unknown error in a worker";
  if (r.name === "DataError" || r.name === "ShardError") return new DataError(message);
  if (r.name === "TokenizerError") return new TokenizerError(message);
  const e = new Error(message);
  if (r.stack) e.stack = r.stack;
  return e;
}
