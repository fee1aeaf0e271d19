/** Entry point of a prepare-data worker: runs tasks (tasks.ts) posted by pool.ts, one at a time. */
import { runTask, type Task, transferables } from "./tasks.ts";

interface WorkerScope {
  onmessage: ((e: MessageEvent<{ id: number; task: Task }>) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
}
const scope = self as unknown as WorkerScope;

scope.onmessage = async (e) => {
  const { id, task } = e.data;
  try {
    const result = await runTask(task);
    scope.postMessage({ id, ok: true, result }, transferables(result));
  } catch (err) {
    const error = err as Error;
    scope.postMessage({
      id,
      ok: false,
      name: error?.name,
      message: error?.message ?? String(err),
      stack: error?.stack,
    });
  }
};
