/**
 * Counters, gauges and histograms kept in memory and written in Prometheus' text exposition format
 * (version 0.0.4): `# HELP` and `# TYPE` lines, then one sample a line; histograms as cumulative
 * `_bucket{le="..."}` samples ending with `+Inf`, then `_sum` and `_count`.
 */

type Labels = Record<string, string>;

const escapeLabel = (v: string) => v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
const labelText = (l: Labels) => {
  const parts = Object.entries(l).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
};
/** Prometheus writes floats the way Go does; JavaScript's shortest round-trip form is valid input. */
const num = (x: number) => Number.isFinite(x) ? String(x) : x > 0 ? "+Inf" : x < 0 ? "-Inf" : "NaN";

interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  render(): string[];
}

export class Counter implements Family {
  readonly type = "counter";
  private values = new Map<string, { labels: Labels; value: number }>();
  constructor(readonly name: string, readonly help: string) {}
  inc(labels: Labels = {}, by = 1): void {
    const key = labelText(labels);
    const v = this.values.get(key) ?? { labels, value: 0 };
    v.value += by;
    this.values.set(key, v);
  }
  get(labels: Labels = {}): number {
    return this.values.get(labelText(labels))?.value ?? 0;
  }
  render(): string[] {
    return [...this.values.values()].map((v) => `${this.name}${labelText(v.labels)} ${num(v.value)}`);
  }
}

export class Gauge implements Family {
  readonly type = "gauge";
  value = 0;
  constructor(readonly name: string, readonly help: string) {}
  render(): string[] {
    return [`${this.name} ${num(this.value)}`];
  }
}

export class Histogram implements Family {
  readonly type = "histogram";
  private counts: number[];
  private sum = 0;
  private count = 0;
  constructor(readonly name: string, readonly help: string, readonly bounds: readonly number[]) {
    this.counts = bounds.map(() => 0);
  }
  observe(x: number): void {
    this.sum += x;
    this.count++;
    const i = this.bounds.findIndex((b) => x <= b);
    if (i >= 0) this.counts[i]++;
  }
  render(): string[] {
    const lines: string[] = [];
    let cumulative = 0;
    this.bounds.forEach((b, i) => {
      cumulative += this.counts[i];
      lines.push(`${this.name}_bucket{le="${num(b)}"} ${cumulative}`);
    });
    lines.push(`${this.name}_bucket{le="+Inf"} ${this.count}`);
    lines.push(`${this.name}_sum ${num(this.sum)}`, `${this.name}_count ${this.count}`);
    return lines;
  }
}

/** Latency bounds in seconds: 0.5 ms to 30 s, roughly ×2.5 apart (lavapipe batches take 10–500 ms). */
const SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** The server's metrics, one object per server. */
export class ServeMetrics {
  readonly requests = new Counter(
    "bertfuse_requests_total",
    "HTTP requests answered, by endpoint and status",
  );
  readonly errors = new Counter("bertfuse_request_errors_total", "HTTP requests answered with a 4xx or 5xx");
  readonly requestSeconds = new Histogram(
    "bertfuse_request_duration_seconds",
    "Time from a request's arrival to its response, inference endpoints only",
    SECONDS,
  );
  readonly queueSeconds = new Histogram(
    "bertfuse_queue_duration_seconds",
    "Time a sequence waited in the batching queue before its batch started",
    SECONDS,
  );
  readonly computeSeconds = new Histogram(
    "bertfuse_batch_compute_duration_seconds",
    "Time one batch took on the backend",
    SECONDS,
  );
  readonly batchSize = new Histogram(
    "bertfuse_batch_size",
    "Sequences in each batch run (before padding to a compiled batch shape)",
    [1, 2, 4, 8, 16, 32, 64, 128],
  );
  readonly sequences = new Counter("bertfuse_sequences_total", "Sequences run on the backend");
  readonly queueDepth = new Gauge("bertfuse_queue_depth", "Sequences waiting in the batching queue now");
  readonly inFlight = new Gauge("bertfuse_requests_in_flight", "HTTP requests being handled now");

  /** One answer: counted under its endpoint and code, as an error when `failed`, timed from `t0` when `timed`. */
  answered(endpoint: string, code: string, failed: boolean, t0: number, timed = false): void {
    this.requests.inc({ endpoint, code });
    if (failed) this.errors.inc({ endpoint, code });
    if (timed) this.requestSeconds.observe((performance.now() - t0) / 1000);
  }

  private families(): Family[] {
    return [
      this.requests,
      this.errors,
      this.requestSeconds,
      this.queueSeconds,
      this.computeSeconds,
      this.batchSize,
      this.sequences,
      this.queueDepth,
      this.inFlight,
    ];
  }

  render(): string {
    const out: string[] = [];
    for (const f of this.families()) {
      out.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`, ...f.render());
    }
    return out.join("\n") + "\n";
  }
}
