/**
 * What `deno task train` shows and writes beside the run: a progress bar (loss, MLM accuracy, sequences/s,
 * loss scale), metrics.jsonl (one record per logged step, continued on resume), the loss curve as SVG and
 * PNG (redrawn at each checkpoint and at the end), and the SIGINT/SIGTERM stop flag.
 */
import { join } from "node:path";
import { MetricsWriter } from "../training/metrics.ts";
import type { TrainOptions } from "../training/options.ts";
import { plotRunFolder } from "../training/plot.ts";
import { Progress } from "../training/progress.ts";
import type { LogRecord, RunEvents, RunResult } from "../training/run.ts";
import { StopSignal } from "../training/signals.ts";

export class TrainUi {
  // The watcher lets a second Ctrl-C quit at once even inside a long synchronous step (reference backend).
  private readonly stop = new StopSignal({ watchWhileBlocked: true }).install();
  private progress: Progress | undefined;
  private metrics: MetricsWriter | undefined;
  /** Skipped steps already reported (from train.state; resumed runs start from the checkpoint's count). */
  private skipped = 0;

  constructor(readonly o: TrainOptions) {}

  private say(msg: string): void {
    if (this.progress) this.progress.log(msg);
    else console.error(msg);
  }

  events(): RunEvents {
    return {
      info: (m) => this.say(m),
      start: async ({ step, resumed, stopAt, skippedSteps }) => {
        this.skipped = skippedSteps;
        await this.stop.ready();
        this.metrics = await MetricsWriter.open(
          join(this.o.outputDir, "metrics.jsonl"),
          resumed ? { resumeStep: step } : {},
        );
        this.progress = new Progress({ total: stopAt });
        this.progress.update({ step });
      },
      log: (r: LogRecord) => {
        this.metrics?.write({ ...r });
        if (r.heldout_instances !== undefined) this.say(heldOutLine(r));
        if (r.skipped_steps > this.skipped) {
          this.say(
            `${r.skipped_steps - this.skipped} step(s) skipped for gradient overflow by step ${r.step} ` +
              `(${r.skipped_steps} in all); loss scale now ${r.loss_scale}`,
          );
          this.skipped = r.skipped_steps;
        }
        this.progress?.update({
          step: r.step,
          loss: r.loss,
          mlmAccuracy: r.mlm_accuracy,
          seqPerSec: r.seq_per_s,
          lossScale: r.loss_scale,
          learningRate: r.learning_rate,
        });
      },
      checkpoint: async (dir) => {
        await this.metrics?.sync();
        await this.plot();
        this.say(`checkpoint ${dir}`);
      },
      stopRequested: () => {
        if (this.stop.requested) this.say(`${this.stop.signal}: finishing the step and saving a checkpoint`);
        return this.stop.requested;
      },
    };
  }

  private plot(): Promise<void> {
    return plotRunFolder(this.o.outputDir, "mlm_accuracy", { title: "bertfuse pre-training" });
  }

  async finish(r: RunResult): Promise<void> {
    await this.metrics?.sync();
    this.metrics?.close();
    await this.plot();
    const last = r.records[r.records.length - 1];
    this.progress?.finish(
      `${r.stoppedBy === "signal" ? "stopped" : "done"} at step ${r.step} on ${r.backend}` +
        (last
          ? `: loss ${last.loss.toFixed(4)}, MLM accuracy ${
            (100 * last.mlm_accuracy).toFixed(1)
          }% (last batch)`
          : "") +
        (last?.heldout_instances !== undefined ? `\n  ${heldOutLine(last)}` : "") +
        `\n  ${r.outputDir}: metrics.jsonl, loss_curve.svg/.png, ${r.lastCheckpoint ?? "no checkpoint"}`,
    );
    this.stop.dispose();
  }

  close(): void {
    this.progress?.finish();
    this.metrics?.close();
    this.stop.dispose();
  }
}

const pct = (x: number | undefined) => `${(100 * x!).toFixed(1)}%`;

function heldOutLine(r: LogRecord): string {
  return `held-out (${r.heldout_instances} instances) at step ${r.step}: MLM accuracy ${
    pct(r.heldout_mlm_accuracy)
  } (unigram baseline, always "${r.unigram_token}": ${pct(r.unigram_mlm_accuracy)}), MLM loss ${
    r.heldout_mlm_loss!.toFixed(3)
  }, NSP accuracy ${pct(r.heldout_nsp_accuracy)}`;
}
