/**
 * The loss-curve plot of a run, as SVG and as PNG, with no dependencies: the chart is laid out once as a
 * list of shapes (lines, polylines, text) and then either written as SVG elements or rasterized here (an
 * antialiased line drawer, a 5x7 bitmap font) and encoded as PNG (zlib from node:zlib, the project's
 * CRC-32). Output is deterministic: the same points give byte-identical files.
 *
 * Series: the training loss (left axis) and, when given, the MLM accuracy (right axis, 0-100%). Points
 * whose value is null or not finite break the line. Long runs are reduced to at most four points per
 * pixel column (first, min, max, last), which draws the same picture.
 */
import { deflateSync } from "node:zlib";
import { crc32 } from "../data/shards/crc32.ts";
import { readMetrics } from "./metrics.ts";
import { writeFileAtomic } from "../model_io/outputs.ts";

export interface CurvePoint {
  step: number;
  loss: number | null;
  /** In [0, 1]. */
  mlmAccuracy?: number | null;
}

export interface PlotOptions {
  width?: number;
  height?: number;
  title?: string;
  /** What the accuracy series measures (default "mlm accuracy"; fine-tuning plots its task's). */
  accuracyLabel?: string;
}

type RGB = readonly [number, number, number];
const WHITE: RGB = [255, 255, 255];
const AXIS: RGB = [51, 51, 51];
const GRID: RGB = [229, 229, 229];
const LOSS: RGB = [31, 119, 180];
const ACC: RGB = [255, 127, 14];

type Anchor = "start" | "middle" | "end";
type Shape =
  | { kind: "line"; x1: number; y1: number; x2: number; y2: number; color: RGB; width: number }
  | { kind: "polyline"; points: [number, number][]; color: RGB; width: number }
  | { kind: "text"; x: number; y: number; text: string; anchor: Anchor; color: RGB; vertical?: boolean };

/** Pixels per font dot: glyphs are 10x14 pixels, a readable size on an 800-pixel-wide chart. */
const FONT_SCALE = 2;

/** Tick values at 1, 2 or 5 times a power of ten, about `target` of them, covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, target = 5): { ticks: number[]; step: number } {
  if (!(hi > lo)) throw new RangeError(`tick range [${lo}, ${hi}] is empty`);
  const raw = (hi - lo) / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  // The candidate nearest to the raw spacing (by ratio), so the count stays near the target.
  const step = [1, 2, 5, 10].map((m) => m * mag).reduce((best, s) =>
    Math.abs(Math.log(s / raw)) < Math.abs(Math.log(best / raw)) ? s : best
  );
  return { ticks: ticksEvery(lo, hi, step), step };
}

/** The multiples of `step` in [lo, hi] (with a little slack for rounding). */
function ticksEvery(lo: number, hi: number, step: number): number[] {
  const ticks: number[] = [];
  for (let i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i++) ticks.push(i * step + 0); // + 0: no -0
  return ticks;
}

/** A tick label with as many decimals as the tick spacing needs. */
export function formatTick(v: number, step: number): string {
  const decimals = Math.max(0, Math.min(10, -Math.floor(Math.log10(step) + 1e-9)));
  const s = v.toFixed(decimals);
  return s === "-0" || /^-0\.0*$/.test(s) ? s.slice(1) : s;
}

/** At most four points per pixel column (first, min, max, last, in step order); breaks are kept. */
function decimate(
  pts: { x: number; y: number | null }[],
  columns: number,
): { x: number; y: number | null }[] {
  if (pts.length <= 4 * columns) return pts;
  const out: { x: number; y: number | null }[] = [];
  let i = 0;
  while (i < pts.length) {
    const col = Math.floor(pts[i].x);
    let j = i;
    const run: { x: number; y: number | null }[] = [];
    while (j < pts.length && Math.floor(pts[j].x) === col) run.push(pts[j++]);
    if (run.length <= 4 || run.some((p) => p.y === null)) out.push(...run);
    else {
      let lo = run[0], hi = run[0];
      for (const p of run) {
        if (p.y! < lo.y!) lo = p;
        if (p.y! > hi.y!) hi = p;
      }
      const keep = new Set([run[0], lo, hi, run[run.length - 1]]);
      out.push(...run.filter((p) => keep.has(p)));
    }
    i = j;
  }
  return out;
}

function layout(
  points: readonly CurvePoint[],
  o: PlotOptions,
): { width: number; height: number; shapes: Shape[] } {
  const width = o.width ?? 800, height = o.height ?? 480;
  if (!Number.isInteger(width) || !Number.isInteger(height) || width < 200 || height < 150) {
    throw new RangeError(`plot size ${width}x${height} is too small (at least 200x150)`);
  }
  const pts = [...points].sort((a, b) => a.step - b.step);
  const hasAcc = pts.some((p) => p.mlmAccuracy != null && Number.isFinite(p.mlmAccuracy));
  const left = 80, right = hasAcc ? 80 : 30, top = 44, bottom = 60;
  const pw = width - left - right, ph = height - top - bottom;
  const shapes: Shape[] = [];
  const text = (x: number, y: number, t: string, anchor: Anchor, color = AXIS, vertical = false) =>
    shapes.push({ kind: "text", x, y, text: t, anchor, color, vertical });
  const line = (x1: number, y1: number, x2: number, y2: number, color: RGB, w = 1) =>
    shapes.push({ kind: "line", x1, y1, x2, y2, color, width: w });

  // Domains: x spans the logged steps; y spans the finite losses, widened to whole ticks.
  let x0 = pts.length ? pts[0].step : 0, x1 = pts.length ? pts[pts.length - 1].step : 1;
  if (x1 <= x0) [x0, x1] = [x0 - 1, x0 + 1];
  const losses = pts.map((p) => p.loss).filter((v): v is number => v !== null && Number.isFinite(v));
  let y0 = losses.length ? Math.min(...losses) : 0, y1 = losses.length ? Math.max(...losses) : 1;
  if (y1 <= y0) [y0, y1] = [y0 - Math.max(0.5, Math.abs(y0) * 0.1), y1 + Math.max(0.5, Math.abs(y1) * 0.1)];
  // One tick spacing from the data's range; the axis then extends to whole ticks on both ends.
  const yStep = niceTicks(y0, y1, 6).step;
  y0 = Math.floor(y0 / yStep + 1e-9) * yStep;
  y1 = Math.ceil(y1 / yStep - 1e-9) * yStep;
  const yTicks = { step: yStep, ticks: ticksEvery(y0, y1, yStep) };
  const X = (s: number) => left + (s - x0) / (x1 - x0) * pw;
  const Y = (v: number) => top + (1 - (v - y0) / (y1 - y0)) * ph;
  const A = (a: number) => top + (1 - a) * ph;

  // Grid and ticks.
  const xTicks = niceTicks(x0, x1, Math.max(2, Math.floor(pw / 110)));
  for (const t of xTicks.ticks) {
    const x = X(t);
    line(x, top, x, top + ph, GRID);
    line(x, top + ph, x, top + ph + 5, AXIS);
    text(x, top + ph + 18, formatTick(t, xTicks.step), "middle");
  }
  for (const t of yTicks.ticks) {
    const y = Y(t);
    line(left, y, left + pw, y, GRID);
    line(left - 5, y, left, y, AXIS);
    text(left - 9, y, formatTick(t, yTicks.step), "end");
  }
  for (let a = 0; hasAcc && a <= 1.0001; a += 0.2) {
    line(left + pw, A(a), left + pw + 5, A(a), AXIS);
    text(left + pw + 9, A(a), `${Math.round(a * 100)}%`, "start", ACC);
  }
  // Frame.
  const frame = [[0, 0, pw, 0], [0, ph, pw, ph], [0, 0, 0, ph], [pw, 0, pw, ph]];
  for (const [a, b, c, d] of frame) line(left + a, top + b, left + c, top + d, AXIS);

  // Series, split at missing values.
  const series = (vals: { x: number; y: number | null }[], color: RGB) => {
    let run: [number, number][] = [];
    const flush = () => {
      if (run.length === 1) run.push([run[0][0] + 0.01, run[0][1]]); // a lone point still shows
      if (run.length > 1) shapes.push({ kind: "polyline", points: run, color, width: 2 });
      run = [];
    };
    for (const p of decimate(vals, pw)) {
      if (p.y === null) flush();
      else run.push([p.x, p.y]);
    }
    flush();
  };
  const finite = (v: number | null | undefined) => (v != null && Number.isFinite(v) ? v : null);
  series(pts.map((p) => ({ x: X(p.step), y: finite(p.loss) === null ? null : Y(p.loss!) })), LOSS);
  if (hasAcc) {
    series(
      pts.map((p) => {
        const a = finite(p.mlmAccuracy);
        return { x: X(p.step), y: a === null ? null : A(Math.min(1, Math.max(0, a))) };
      }),
      ACC,
    );
  }

  // Labels and legend.
  text(left + pw / 2, height - 16, "step", "middle");
  text(22, top + ph / 2, "loss", "middle", LOSS, true);
  const accLabel = o.accuracyLabel ?? "mlm accuracy";
  if (hasAcc) text(width - 18, top + ph / 2, accLabel, "middle", ACC, true);
  if (o.title) text(left, 20, o.title, "start");
  const lx = left + pw - (hasAcc ? 150 : 80), ly = top + 16;
  line(lx, ly, lx + 20, ly, LOSS, 2);
  text(lx + 26, ly, "loss", "start", LOSS);
  if (hasAcc) {
    line(lx, ly + 20, lx + 20, ly + 20, ACC, 2);
    text(lx + 26, ly + 20, accLabel.replace("accuracy", "acc"), "start", ACC);
  }
  return { width, height, shapes };
}

// ---------------------------------------------------------------------------------------------------
// SVG

const n2 = (v: number) => {
  const s = v.toFixed(2).replace(/\.?0+$/, "");
  return s === "-0" ? "0" : s;
};
const hex = (c: RGB) => `#${c.map((v) => v.toString(16).padStart(2, "0")).join("")}`;
const ESC: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" };
const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ESC[c]);

export function lossCurveSvg(points: readonly CurvePoint[], opts: PlotOptions = {}): string {
  const { width, height, shapes } = layout(points, opts);
  const out = [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="${hex(WHITE)}"/>`,
    `<g font-family="monospace" font-size="14">`,
  ];
  for (const s of shapes) {
    if (s.kind === "line") {
      const stroke = `stroke="${hex(s.color)}" stroke-width="${s.width}"`;
      out.push(`<line x1="${n2(s.x1)}" y1="${n2(s.y1)}" x2="${n2(s.x2)}" y2="${n2(s.y2)}" ${stroke}/>`);
    } else if (s.kind === "polyline") {
      const pts = s.points.map(([x, y]) => `${n2(x)},${n2(y)}`).join(" ");
      const stroke = `stroke="${hex(s.color)}" stroke-width="${s.width}"`;
      out.push(`<polyline points="${pts}" fill="none" ${stroke} stroke-linejoin="round"/>`);
    } else {
      const rot = s.vertical ? ` transform="rotate(-90 ${n2(s.x)} ${n2(s.y)})"` : "";
      const at = `x="${n2(s.x)}" y="${n2(s.y)}" text-anchor="${s.anchor}" dominant-baseline="middle"`;
      out.push(`<text ${at} fill="${hex(s.color)}"${rot}>${esc(s.text)}</text>`);
    }
  }
  out.push(`</g>`, `</svg>`, ``);
  return out.join("\n");
}

// ---------------------------------------------------------------------------------------------------
// Raster

/** 5x7 glyphs, rows top to bottom; lower case is drawn as upper case. */
const GLYPHS: Record<string, string> = {
  "0": ".###. #...# #..## #.#.# ##..# #...# .###.",
  "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
  "2": ".###. #...# ....# ...#. ..#.. .#... #####",
  "3": "##### ...#. ..#.. ...#. ....# #...# .###.",
  "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
  "5": "##### #.... ####. ....# ....# #...# .###.",
  "6": "..##. .#... #.... ####. #...# #...# .###.",
  "7": "##### ....# ...#. ..#.. .#... .#... .#...",
  "8": ".###. #...# #...# .###. #...# #...# .###.",
  "9": ".###. #...# #...# .#### ....# ...#. .##..",
  A: ".###. #...# #...# ##### #...# #...# #...#",
  B: "####. #...# #...# ####. #...# #...# ####.",
  C: ".###. #...# #.... #.... #.... #...# .###.",
  D: "###.. #..#. #...# #...# #...# #..#. ###..",
  E: "##### #.... #.... ####. #.... #.... #####",
  F: "##### #.... #.... ####. #.... #.... #....",
  G: ".###. #...# #.... #.### #...# #...# .####",
  H: "#...# #...# #...# ##### #...# #...# #...#",
  I: ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
  J: "..### ...#. ...#. ...#. ...#. #..#. .##..",
  K: "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
  L: "#.... #.... #.... #.... #.... #.... #####",
  M: "#...# ##.## #.#.# #.#.# #...# #...# #...#",
  N: "#...# #...# ##..# #.#.# #..## #...# #...#",
  O: ".###. #...# #...# #...# #...# #...# .###.",
  P: "####. #...# #...# ####. #.... #.... #....",
  Q: ".###. #...# #...# #...# #.#.# #..#. .##.#",
  R: "####. #...# #...# ####. #.#.. #..#. #...#",
  S: ".#### #.... #.... .###. ....# ....# ####.",
  T: "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
  U: "#...# #...# #...# #...# #...# #...# .###.",
  V: "#...# #...# #...# #...# #...# .#.#. ..#..",
  W: "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
  X: "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
  Y: "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
  Z: "##### ....# ...#. ..#.. .#... #.... #####",
  ".": "..... ..... ..... ..... ..... .##.. .##..",
  ",": "..... ..... ..... ..... .##.. ..#.. .#...",
  "-": "..... ..... ..... .###. ..... ..... .....",
  "+": "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
  "%": "##... ##..# ...#. ..#.. .#... #..## ...##",
  "/": "..... ....# ...#. ..#.. .#... #.... .....",
  ":": "..... .##.. .##.. ..... .##.. .##.. .....",
  "(": "...#. ..#.. .#... .#... .#... ..#.. ...#.",
  ")": ".#... ..#.. ...#. ...#. ...#. ..#.. .#...",
  "_": "..... ..... ..... ..... ..... ..... #####",
  "=": "..... ..... ##### ..... ##### ..... .....",
  " ": "..... ..... ..... ..... ..... ..... .....",
  "?": ".###. #...# ....# ...#. ..#.. ..... ..#..",
};
const GLYPH_BITS: Map<string, boolean[][]> = new Map(
  Object.entries(GLYPHS).map(([ch, rows]) => [ch, rows.split(" ").map((r) => [...r].map((c) => c === "#"))]),
);

class Canvas {
  readonly rgb: Uint8Array;
  constructor(readonly width: number, readonly height: number, bg: RGB) {
    this.rgb = new Uint8Array(width * height * 3);
    for (let i = 0; i < width * height; i++) this.rgb.set(bg, i * 3);
  }

  /** Blends `color` over pixel (x, y) with coverage a in [0, 1]. */
  plot(x: number, y: number, color: RGB, a: number): void {
    if (x < 0 || y < 0 || x >= this.width || y >= this.height || a <= 0) return;
    const i = (y * this.width + x) * 3;
    const k = Math.min(1, a);
    for (let c = 0; c < 3; c++) this.rgb[i + c] = Math.round(this.rgb[i + c] * (1 - k) + color[c] * k);
  }

  /**
   * An antialiased segment of the given width: each pixel in its bounding box is covered by
   * (half width + 0.5 - distance from the pixel centre to the segment), clamped to [0, 1].
   */
  segment(
    x1: number,
    y1: number,
    x2: number,
    y2: number,
    color: RGB,
    width: number,
    skip?: Set<number>,
  ): void {
    const r = width / 2;
    const minX = Math.max(0, Math.floor(Math.min(x1, x2) - r - 1)),
      maxX = Math.min(this.width - 1, Math.ceil(Math.max(x1, x2) + r + 1));
    const minY = Math.max(0, Math.floor(Math.min(y1, y2) - r - 1)),
      maxY = Math.min(this.height - 1, Math.ceil(Math.max(y1, y2) + r + 1));
    const dx = x2 - x1, dy = y2 - y1, len2 = dx * dx + dy * dy;
    for (let y = minY; y <= maxY; y++) {
      for (let x = minX; x <= maxX; x++) {
        const px = x + 0.5, py = y + 0.5;
        const t = len2 === 0 ? 0 : Math.max(0, Math.min(1, ((px - x1) * dx + (py - y1) * dy) / len2));
        const d = Math.hypot(px - (x1 + t * dx), py - (y1 + t * dy));
        const a = r + 0.5 - d;
        if (a <= 0) continue;
        // Within one polyline a pixel is painted once (by its first segment), so joints do not darken.
        if (skip) {
          const key = y * this.width + x;
          if (skip.has(key)) continue;
          skip.add(key);
        }
        this.plot(x, y, color, a);
      }
    }
  }

  text(
    x: number,
    y: number,
    s: string,
    anchor: "start" | "middle" | "end",
    color: RGB,
    vertical: boolean,
  ): void {
    const S = FONT_SCALE, w = (s.length * 6 - 1) * S, h = 7 * S;
    // Offset of the text's start along its direction, from the anchor point.
    const start = anchor === "start" ? 0 : anchor === "middle" ? -w / 2 : -w;
    [...s].forEach((ch, k) => {
      const bits = GLYPH_BITS.get(ch.toUpperCase()) ?? GLYPH_BITS.get("?")!;
      for (let gy = 0; gy < 7; gy++) {
        for (let gx = 0; gx < 5; gx++) {
          if (!bits[gy][gx]) continue;
          for (let sy = 0; sy < S; sy++) {
            for (let sx = 0; sx < S; sx++) {
              const u = Math.round(start + (k * 6 + gx) * S + sx); // along the text
              const v = Math.round(-h / 2 + gy * S + sy); // across it, top to bottom
              // Vertical text reads bottom to top: rotate (u, v) by -90 degrees about the anchor.
              if (vertical) this.plot(Math.round(x) + v, Math.round(y) - u - 1, color, 1);
              else this.plot(Math.round(x) + u, Math.round(y) + v, color, 1);
            }
          }
        }
      }
    });
  }
}

function rasterize(points: readonly CurvePoint[], opts: PlotOptions): Canvas {
  const { width, height, shapes } = layout(points, opts);
  const cv = new Canvas(width, height, WHITE);
  for (const s of shapes) {
    if (s.kind === "line") {
      // Axis-aligned 1-pixel lines sit on pixel centres (x.5) so they stay crisp.
      const snap = (v: number) => (s.width === 1 ? Math.floor(v) + 0.5 : v);
      const [a, b, c, d] = s.x1 === s.x2
        ? [snap(s.x1), s.y1, snap(s.x2), s.y2]
        : s.y1 === s.y2
        ? [s.x1, snap(s.y1), s.x2, snap(s.y2)]
        : [s.x1, s.y1, s.x2, s.y2];
      cv.segment(a, b, c, d, s.color, s.width === 1 ? 0.5 : s.width);
    } else if (s.kind === "polyline") {
      const seen = new Set<number>();
      for (let i = 1; i < s.points.length; i++) {
        const [x1, y1] = s.points[i - 1], [x2, y2] = s.points[i];
        cv.segment(x1, y1, x2, y2, s.color, s.width - 0.5, seen);
      }
    } else cv.text(s.x, s.y, s.text, s.anchor, s.color, s.vertical ?? false);
  }
  return cv;
}

/** PNG bytes of an 8-bit RGB image (rows top to bottom, 3 bytes per pixel). */
export function encodePng(width: number, height: number, rgb: Uint8Array): Uint8Array {
  if (rgb.length !== width * height * 3) {
    throw new RangeError(
      `image data is ${rgb.length} bytes, ${width}x${height} RGB needs ${width * height * 3}`,
    );
  }
  // Each scanline is prefixed with its filter type; 0 (none) keeps the encoder trivial and deflate does
  // well on a chart that is mostly flat colour.
  const stride = width * 3;
  const raw = new Uint8Array(height * (stride + 1));
  for (let y = 0; y < height; y++) raw.set(rgb.subarray(y * stride, (y + 1) * stride), y * (stride + 1) + 1);
  const ihdr = new Uint8Array(13);
  const dv = new DataView(ihdr.buffer);
  dv.setUint32(0, width);
  dv.setUint32(4, height);
  ihdr.set([8, 2, 0, 0, 0], 8); // bit depth 8, colour type 2 (RGB), deflate, filter method 0, no interlace
  const chunks = [
    chunk("IHDR", ihdr),
    chunk("IDAT", new Uint8Array(deflateSync(raw, { level: 9 }))),
    chunk("IEND", new Uint8Array(0)),
  ];
  const signature = Uint8Array.of(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a);
  const out = new Uint8Array(signature.length + chunks.reduce((n, c) => n + c.length, 0));
  out.set(signature);
  let off = signature.length;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** length, type, data, CRC-32 of type and data (the PNG chunk layout). */
function chunk(type: string, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + data.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, data.length);
  for (let i = 0; i < 4; i++) out[4 + i] = type.charCodeAt(i);
  out.set(data, 8);
  dv.setUint32(8 + data.length, crc32(out.subarray(4, 8 + data.length)));
  return out;
}

export function lossCurvePng(points: readonly CurvePoint[], opts: PlotOptions = {}): Uint8Array {
  const cv = rasterize(points, opts);
  return encodePng(cv.width, cv.height, cv.rgb);
}

/**
 * Writes `<base>.svg` and `<base>.png` (default base: `<runDir>/loss_curve`), each via a temporary file
 * and a rename, so a reader never sees a half-written plot.
 */
export async function writeLossCurves(
  runDir: string,
  points: readonly CurvePoint[],
  opts: PlotOptions & { base?: string } = {},
): Promise<{ svg: string; png: string }> {
  const base = `${runDir.replace(/\/$/, "")}/${opts.base ?? "loss_curve"}`;
  const svg = `${base}.svg`, png = `${base}.png`;
  // A failure (a full disk) is one line naming the file, and leaves no temporary file behind.
  await writeFileAtomic(svg, lossCurveSvg(points, opts));
  await writeFileAtomic(png, lossCurvePng(points, opts));
  return { svg, png };
}

/**
 * Redraws a run folder's loss curves from its metrics.jsonl (a torn last line, from a run being killed
 * mid-write, is tolerated; an unreadable file draws nothing). `accuracyKey` is the record field the
 * accuracy series comes from.
 */
export async function plotRunFolder(
  runDir: string,
  accuracyKey: string,
  opts: PlotOptions = {},
): Promise<void> {
  const records = await readMetrics(`${runDir.replace(/\/$/, "")}/metrics.jsonl`, {
    tolerateTornLastLine: true,
  })
    .catch(() => []);
  const points = records.map((r) => ({
    step: Number(r.step),
    loss: typeof r.loss === "number" ? r.loss : null,
    mlmAccuracy: typeof r[accuracyKey] === "number" ? r[accuracyKey] as number : null,
  }));
  if (points.length) await writeLossCurves(runDir, points, opts);
}
