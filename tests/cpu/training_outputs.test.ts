/** Run outputs: metrics.jsonl, the loss-curve plot (PNG and SVG), the progress line, stop signals. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { inflateSync } from "node:zlib";
import { MetricsError, MetricsWriter, readMetrics } from "../../training/metrics.ts";
import {
  type CurvePoint,
  encodePng,
  formatTick,
  lossCurvePng,
  lossCurveSvg,
  niceTicks,
  writeLossCurves,
} from "../../training/plot.ts";
import { formatDuration, Progress } from "../../training/progress.ts";
import { StopSignal } from "../../training/signals.ts";
import { seededRandom } from "../../cases/random.ts";

const SEED = crypto.getRandomValues(new Uint32Array(1))[0] || 1;
const rng = seededRandom(SEED);

// ---- metrics.jsonl ----

Deno.test("metrics: one line per step, readable while open; resume drops steps after the checkpoint", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-metrics-" });
  const path = join(dir, "metrics.jsonl");
  const w = await MetricsWriter.open(path);
  const rows = Array.from(
    { length: 10 },
    (_, i) => ({ step: (i + 1) * 10, loss: 10 - i + rng.uniform(), mlm_acc: rng.uniform() }),
  );
  for (const r of rows) w.write(r);
  // Flushed line by line: another reader sees every line before close.
  assert.deepEqual(await readMetrics(path), rows);
  assert.throws(() => w.write({ step: 100 }), /step 100 logged after step 100/);
  w.write({ step: 110, loss: NaN });
  w.close();
  assert.equal((await readMetrics(path)).at(-1)!.loss, null, "NaN is written as null");

  // A crash mid-line, then resume from the checkpoint at step 50.
  await Deno.writeTextFile(path, '{"step":120,"lo', { append: true });
  await assert.rejects(() => readMetrics(path), /metrics\.jsonl:12: last line is incomplete/);
  const r = await MetricsWriter.open(path, { resumeStep: 50 });
  assert.deepEqual(await readMetrics(path), rows.slice(0, 5));
  assert.throws(() => r.write({ step: 50 }), MetricsError);
  r.write({ step: 60, loss: 1.5 });
  await r.sync();
  r.close();
  assert.deepEqual((await readMetrics(path)).map((m) => m.step), [10, 20, 30, 40, 50, 60]);

  await Deno.writeTextFile(path, '{"step":1}\nnot json\n');
  await assert.rejects(() => readMetrics(path), /metrics\.jsonl:2: not valid JSON/);
  // A new run (no resumeStep) starts the file afresh.
  (await MetricsWriter.open(path)).close();
  assert.deepEqual(await readMetrics(path), []);
  await Deno.remove(dir, { recursive: true });
});

// ---- plot ----

function curve(n: number, withAcc: boolean): CurvePoint[] {
  return Array.from({ length: n }, (_, i) => ({
    step: i * 7 + 3,
    loss: 11 * Math.exp(-i / (n / 4)) + 1.5 + 0.3 * rng.uniform(),
    mlmAccuracy: withAcc ? 0.05 + 0.5 * (1 - Math.exp(-i / (n / 3))) : undefined,
  }));
}

/** CRC-32 bit by bit, independent of the table-driven one the encoder uses. */
function crcSlow(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

function parsePng(png: Uint8Array) {
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "signature");
  const dv = new DataView(png.buffer, png.byteOffset, png.length);
  const chunks: { type: string; data: Uint8Array }[] = [];
  let off = 8;
  while (off < png.length) {
    const len = dv.getUint32(off);
    const type = String.fromCharCode(...png.subarray(off + 4, off + 8));
    const data = png.subarray(off + 8, off + 8 + len);
    assert.equal(
      dv.getUint32(off + 8 + len),
      crcSlow(png.subarray(off + 4, off + 8 + len)),
      `CRC of ${type}`,
    );
    chunks.push({ type, data });
    off += 12 + len;
  }
  assert.equal(off, png.length, "chunks end exactly at the end of the file");
  assert.deepEqual(chunks.map((c) => c.type), ["IHDR", "IDAT", "IEND"]);
  const ih = new DataView(chunks[0].data.buffer, chunks[0].data.byteOffset, 13);
  const width = ih.getUint32(0), height = ih.getUint32(4);
  assert.deepEqual([...chunks[0].data.subarray(8)], [8, 2, 0, 0, 0], "8-bit RGB, no interlace");
  const raw = new Uint8Array(inflateSync(chunks[1].data));
  assert.equal(raw.length, height * (1 + 3 * width), "decompressed size");
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    assert.equal(raw[y * (1 + 3 * width)], 0, `filter byte of row ${y}`);
    rgb.set(raw.subarray(y * (1 + 3 * width) + 1, (y + 1) * (1 + 3 * width)), y * 3 * width);
  }
  return { width, height, rgb };
}

const countColor = (rgb: Uint8Array, c: number[]) => {
  let n = 0;
  for (let i = 0; i < rgb.length; i += 3) {
    if (rgb[i] === c[0] && rgb[i + 1] === c[1] && rgb[i + 2] === c[2]) n++;
  }
  return n;
};

Deno.test("PNG: signature, IHDR, CRCs, decompresses to the right size, draws the series; deterministic", () => {
  const pts = curve(300, true);
  const png = lossCurvePng(pts, { width: 640, height: 400, title: "loss (bert-tiny)" });
  const { width, height, rgb } = parsePng(png);
  assert.deepEqual([width, height], [640, 400]);
  assert.ok(countColor(rgb, [31, 119, 180]) > 200, "loss line pixels");
  assert.ok(countColor(rgb, [255, 127, 14]) > 200, "accuracy line pixels");
  assert.ok(countColor(rgb, [51, 51, 51]) > 500, "axes and text pixels");
  assert.deepEqual(
    lossCurvePng(pts, { width: 640, height: 400, title: "loss (bert-tiny)" }),
    png,
    "byte-identical",
  );
  // Without accuracy, with a gap, a single point, and many points (decimated).
  parsePng(lossCurvePng(curve(300, false).map((p, i) => (i === 100 ? { ...p, loss: NaN } : p))));
  parsePng(lossCurvePng([{ step: 5, loss: 3 }]));
  parsePng(lossCurvePng(curve(20000, true)));
  parsePng(lossCurvePng([]));
  const tiny = encodePng(2, 1, Uint8Array.of(255, 0, 0, 0, 0, 255));
  assert.deepEqual([...parsePng(tiny).rgb], [255, 0, 0, 0, 0, 255]);
  assert.throws(() => encodePng(2, 2, new Uint8Array(3)), /needs 12/);
});

/** A small XML well-formedness check: balanced tags, quoted attributes, no raw & or < in text. */
function assertWellFormedXml(xml: string) {
  const stack: string[] = [];
  const re =
    /<(\/?)([A-Za-z_][\w:.-]*)((?:\s+[\w:.-]+="[^"<&]*(?:&(?:amp|lt|gt|quot|apos);[^"<&]*)*")*)\s*(\/?)>|<\?xml[^?]*\?>/g;
  let last = 0, m: RegExpExecArray | null, root = 0;
  while ((m = re.exec(xml))) {
    const text = xml.slice(last, m.index);
    assert.ok(
      !/[<>]|&(?!(amp|lt|gt|quot|apos);)/.test(text),
      `bad text before offset ${m.index}: ${text.slice(0, 40)}`,
    );
    last = re.lastIndex;
    if (!m[2]) continue; // the declaration
    if (m[1]) assert.equal(stack.pop(), m[2], `closing </${m[2]}>`);
    else if (!m[4]) {
      if (stack.length === 0) root++;
      stack.push(m[2]);
    } else if (stack.length === 0) root++;
  }
  assert.equal(xml.slice(last).trim(), "", "nothing after the root");
  assert.deepEqual(stack, [], "every tag closed");
  assert.equal(root, 1, "one root element");
}

Deno.test("SVG: well-formed, escapes text, has both series and axis labels; deterministic", () => {
  const pts = curve(500, true);
  const svg = lossCurveSvg(pts, { title: "a <b> & 'c'" });
  assertWellFormedXml(svg);
  assert.match(svg, /^<\?xml version="1.0" encoding="UTF-8"\?>\n<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.ok(svg.includes("a &lt;b&gt; &amp; &apos;c&apos;"));
  assert.equal((svg.match(/<polyline /g) ?? []).length, 2);
  assert.ok(svg.includes(">step</text>") && svg.includes(">loss</text>") && svg.includes(">100%</text>"));
  assert.equal(lossCurveSvg(pts, { title: "a <b> & 'c'" }), svg);
  assert.ok(svg.includes(">mlm accuracy</text>"), "pre-training plots MLM accuracy");
  const tuned = lossCurveSvg(pts, { accuracyLabel: "accuracy" });
  assert.ok(
    tuned.includes(">accuracy</text>") && !tuned.includes("mlm"),
    "fine-tuning plots its task's accuracy",
  );
  assertWellFormedXml(lossCurveSvg([]));
});

Deno.test("ticks: 1/2/5 steps cover the range; labels have the decimals the step needs", () => {
  assert.deepEqual(niceTicks(0, 10, 5), { ticks: [0, 2, 4, 6, 8, 10], step: 2 });
  assert.deepEqual(niceTicks(1.7, 2.9, 5).step, 0.2);
  assert.equal(formatTick(0.30000000000000004, 0.1), "0.3");
  assert.equal(formatTick(2000, 500), "2000");
  assert.equal(formatTick(-0.00001, 0.5), "0.0");
});

Deno.test("writeLossCurves writes both files and no temporaries", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-plot-" });
  const { svg, png } = await writeLossCurves(dir, curve(50, true));
  assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), [
    "loss_curve.png",
    "loss_curve.svg",
  ]);
  parsePng(await Deno.readFile(png));
  assertWellFormedXml(await Deno.readTextFile(svg));
  await Deno.remove(dir, { recursive: true });
});

// ---- progress ----

Deno.test("progress: TTY redraws one line (rate-limited, fits the width); plain mode prints lines", () => {
  let t = 0;
  const out: string[] = [];
  const p = new Progress({
    total: 1000,
    tty: true,
    write: (s) => out.push(s),
    now: () => t,
    columns: () => 120,
  });
  p.update({
    step: 1,
    loss: 10.5,
    mlmAccuracy: 0.01,
    seqPerSec: 812.4,
    lossScale: 65536,
    learningRate: 1e-4,
  });
  t = 50;
  p.update({ step: 2, loss: 10.4 });
  assert.equal(out.length, 1, "no redraw within 100 ms");
  t = 10_001;
  p.update({
    step: 101,
    loss: 7.25,
    mlmAccuracy: 0.123,
    seqPerSec: 812.4,
    lossScale: 32768,
    learningRate: 6e-3,
  });
  const line = out.at(-1)!;
  assert.ok(line.startsWith("\r[") && line.endsWith("\x1b[K"), JSON.stringify(line));
  for (
    const part of [
      " 101/1000",
      "loss 7.2500",
      "mlm acc 12.3%",
      "812 seq/s",
      "scale 32768",
      "lr 6.00e-3",
      "eta 1m30s",
    ]
  ) {
    assert.ok(line.includes(part), `${part} in ${JSON.stringify(line)}`);
  }
  assert.ok(line.length - "\r\x1b[K".length <= 119);
  p.log("checkpoint saved");
  assert.deepEqual(
    out.slice(-3, -1),
    ["\r\x1b[K", "checkpoint saved\n"],
    "log clears the bar, then redraws it",
  );
  p.finish("done");
  assert.deepEqual(out.slice(-2), ["\n", "done\n"]);

  const plain: string[] = [];
  t = 0;
  const q = new Progress({ total: 50, tty: false, write: (s) => plain.push(s), now: () => t });
  for (let s = 1; s <= 50; s++) {
    t += 1000;
    q.update({ step: s, loss: 3 });
  }
  // Every 10 s, plus the last step; finishing prints the last step no second time.
  q.log("checkpoint saved");
  q.finish();
  assert.equal(plain.splice(plain.indexOf("checkpoint saved\n"), 1).length, 1);
  assert.deepEqual(plain.map((l) => l.match(/^step\s+(\d+)\//)![1]), ["1", "11", "21", "31", "41", "50"]);
  assert.ok(plain.every((l) => l.endsWith("\n") && !l.includes("\r")));
  assert.equal(formatDuration(3725), "1h02m");
  assert.equal(formatDuration(187), "3m07s");
});

// ---- signals ----

Deno.test("stop signal: first sets the flag, second exits with 128 + signal number", () => {
  const msgs: string[] = [];
  const codes: number[] = [];
  const s = new StopSignal({ write: (m) => msgs.push(m), exit: (c) => codes.push(c) });
  assert.equal(s.requested, false);
  s.handle("SIGTERM");
  assert.equal(s.requested, true);
  assert.equal(s.signal, "SIGTERM");
  assert.match(msgs[0], /SIGTERM: stopping after this step and saving a checkpoint/);
  s.handle("SIGTERM"); // the same one delivered twice (by the terminal and by deno task): no exit
  assert.deepEqual(codes, []);
  s.handle("SIGINT");
  assert.deepEqual(codes, [130]);
  assert.match(msgs[1], /SIGINT again: quitting now without saving/);
});

Deno.test("stop signal: real SIGINT delivery in a child process; listeners removable", async () => {
  const mod = new URL("../../training/signals.ts", import.meta.url).href;
  const script = `
    import { StopSignal } from "${mod}";
    const s = new StopSignal().install();
    Deno.kill(Deno.pid, "SIGINT");
    const until = Date.now() + 5000;
    while (!s.requested && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    console.log("requested", s.signal);
    s.dispose();
    const t = new StopSignal().install();
    Deno.kill(Deno.pid, "SIGTERM");
    await new Promise((r) => setTimeout(r, 600)); // later than the same signal twice (signals.ts)
    Deno.kill(Deno.pid, "SIGTERM");
    await new Promise((r) => setTimeout(r, 5000));
    console.log("not reached");
  `;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", script],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout), stderr = new TextDecoder().decode(out.stderr);
  assert.equal(stdout, "requested SIGINT\n", stderr);
  assert.match(stderr, /SIGINT: stopping after this step/);
  assert.match(stderr, /SIGTERM again: quitting now without saving/);
  assert.equal(out.code, 143);
});
