/**
 * A fixed set of Deno Web Workers (worker.ts) taking tasks from one queue, so a slow shard does not hold
 * up the others. Errors thrown in a worker come back as the same class for the errors users cause
 * (DataError, TokenizerError), so the command still prints one line for them.
 */
import { TokenizerError } from "../tokenizer/mod.ts";
import { DataError } from "../shards/errors.ts";
import type { Task, TaskResult } from "./tasks.ts";

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

interface Reply {
  id: number;
  ok: boolean;
  result?: unknown;
  name?: string;
  message?: string;
  stack?: string;
}

export class WorkerPool {
  private readonly workers: Worker[] = [];
  private readonly idle: Worker[] = [];
  private readonly queue: { id: number; task: Task; transfer: Transferable[] }[] = [];
  private readonly pending = new Map<number, Pending>();
  private readonly running = new Map<Worker, number>();
  private nextId = 0;
  private closed = false;

  constructor(size: number) {
    const url = new URL("./worker.ts", import.meta.url).href;
    for (let i = 0; i < size; i++) {
      const w = new Worker(url, { type: "module" });
      w.onmessage = (e: MessageEvent<Reply>) => this.settle(w, e.data);
      w.onerror = (e: ErrorEvent) => {
        // An uncaught error kills the task but not the command's error handling.
        e.preventDefault();
        const id = this.running.get(w);
        if (id !== undefined) {
          this.settle(w, { id, ok: false, name: "Error", message: `worker: ${e.message}` });
        }
      };
      this.workers.push(w);
      this.idle.push(w);
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
    while (this.idle.length > 0 && this.queue.length > 0) {
      const w = this.idle.pop()!;
      const { id, task, transfer } = this.queue.shift()!;
      this.running.set(w, id);
      w.postMessage({ id, task }, transfer);
    }
  }

  private settle(w: Worker, reply: Reply): void {
    this.running.delete(w);
    this.idle.push(w);
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
