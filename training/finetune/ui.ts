/**
 * What `deno task finetune` shows and writes while it runs, from the pre-training pieces: the progress
 * line (loss, batch accuracy, sequences/s, loss scale), metrics.jsonl (continued on resume), the loss
 * curve (SVG and PNG, redrawn at each checkpoint and at the end), dev metrics before and after, and the
 * SIGINT/SIGTERM flag (finish the step, checkpoint, exit 0; a second signal exits at once).
 */
import { join } from "node:path";
import { MetricsWriter } from "../metrics.ts";
import { plotRunFolder } from "../plot.ts";
import { Progress } from "../progress.ts";
import { StopSignal } from "../signals.ts";
import type { SetResult } from "./evaluate.ts";
import type { FinetuneEvents, FinetuneRecord, FinetuneResult } from "./loop.ts";

const fmt = (m: Record<string, number>) =>
  Object.entries(m).map(([k, v]) => `${k} ${Number.isInteger(v) ? v : v.toFixed(4)}`).join(", ");

export function describeResults(phase: string, rs: SetResult[]): string[] {
  return rs.map((r) => `${phase}: ${r.set}: ${fmt(r.metrics)}`);
}

export class FinetuneUi {
  // The watcher lets a second Ctrl-C quit at once even inside a long synchronous step (CPU, reference).
  private readonly stop = new StopSignal({ watchWhileBlocked: true }).install();
  private progress: Progress | undefined;
  private metrics: MetricsWriter | undefined;

  constructor(readonly outputDir: string, readonly write: (line: string) => void = (l) => console.error(l)) {}

  private say(msg: string): void {
    if (this.progress) this.progress.log(msg);
    else this.write(msg);
  }

  events(): FinetuneEvents {
    return {
      info: (m) => this.say(m),
      evaluated: (phase, rs) => describeResults(`dev ${phase} fine-tuning`, rs).forEach((l) => this.say(l)),
      start: async ({ step, resumed, stopAt }) => {
        await this.stop.ready();
        this.metrics = await MetricsWriter.open(
          join(this.outputDir, "metrics.jsonl"),
          resumed ? { resumeStep: step } : {},
        );
        this.progress = new Progress({ total: Math.max(stopAt, 1) });
        this.progress.update({ step });
      },
      log: (r: FinetuneRecord) => {
        this.metrics?.write({ ...r });
        this.progress?.update({
          step: r.step,
          loss: r.loss,
          accuracy: r.accuracy,
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
    return plotRunFolder(this.outputDir, "accuracy", {
      title: "bertfuse fine-tuning",
      accuracyLabel: "accuracy",
    });
  }

  async finish(r: FinetuneResult): Promise<void> {
    await this.metrics?.sync();
    this.metrics?.close();
    if (r.records.length) await this.plot();
    const last = r.records.at(-1);
    const files = [
      ...(r.records.length ? ["metrics.jsonl", "loss_curve.svg/.png"] : []),
      ...r.files.map((f) => f.split("/").pop()),
      ...(r.lastCheckpoint ? [r.lastCheckpoint.split("/").pop()] : []),
    ];
    const head =
      `${r.stoppedBy === "signal" ? "stopped" : "done"} at step ${r.step}/${r.totalSteps} on ${r.backend}` +
      (last ? `: loss ${last.loss.toFixed(4)}` : "");
    if (this.progress) this.progress.finish(head);
    else this.write(head);
    const sets = (m: Record<string, number>) =>
      Object.entries(m).map(([s, v]) => `${s} ${(100 * v).toFixed(1)}%`).join(", ");
    if (sets(r.majority) && r.after) this.write(`majority-class baseline: ${sets(r.majority)}`);
    if (sets(r.naiveBayes) && r.after) this.write(`bag-of-words Naive Bayes baseline: ${sets(r.naiveBayes)}`);
    this.write(`  ${r.outputDir}: ${files.join(", ")}`);
    this.stop.dispose();
  }

  close(): void {
    this.progress?.finish();
    this.metrics?.close();
    this.stop.dispose();
  }
}
