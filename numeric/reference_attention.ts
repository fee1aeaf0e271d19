/**
 * The reference semantics of the composite `attention` and `attention_grad` ops (ir/ops.ts) in f64, written
 * from the math, not from their decomposition (compiler/passes/decompose.ts), so that each checks the
 * other: P = softmax(q·kᵀ·scale + mask) per query row, Pd = P·keep/(1-p) with keep = (u >= p) from the
 * dropout stream over the scores' shape, O = Pd·v; backward dV = Pdᵀ·dO, dP = keep/(1-p)·(dO·vᵀ),
 * dS = P∘(dP - rowsum(P∘dP)), dQ = scale·dS·k, dK = scale·dSᵀ·q.
 */
import { type Node, numel, stridesOf, type TensorType } from "../ir/mod.ts";
import { roundBF16, roundF16 } from "./half.ts";
import { fillUniform } from "./philox.ts";

const ROUND: Record<string, (x: number) => number> = { f32: (x) => x, f16: roundF16, bf16: roundBF16 };

/**
 * With a `low` attribute (f16/bf16) it rounds where the decomposition's matmuls are low: their operands (q,
 * k, v, dO, the dropped-out probabilities, dS) and their results.
 */
export function attentionReference(node: Node, ins: Float64Array[], types: TensorType[]): Float64Array {
  const low = ROUND[(node.attrs.low as string) ?? "f32"];
  const grad = node.op === "attention_grad", wrt = node.attrs.wrt as number;
  const [q, k, v, dO] = [0, 1, 2, 4].map((i) => ins[i]?.map(low)), mask = ins[3];
  const scale = node.attrs.scale as number, p = node.attrs.dropout as number;
  const qs = types[0].shape, r = qs.length, sq = qs[r - 2], d = qs[r - 1];
  const sk = types[1].shape[r - 2], dv = types[2].shape[r - 1], batch = numel(qs.slice(0, -2));
  const scores = [...qs.slice(0, -2), sq, sk], st = stridesOf(scores);
  // The mask's stride along each axis of the scores: 0 where it broadcasts.
  const ms = types[3].shape, off = r - ms.length, mst = stridesOf(ms);
  const maskStride = scores.map((_, a) => (a < off || ms[a - off] === 1 ? 0 : mst[a - off]));
  const u = new Float64Array(p > 0 ? numel(scores) : 0);
  if (p > 0) fillUniform(u, ins[ins.length - 1][0], ins[ins.length - 1][1], node.attrs.stream as number);
  const out = new Float64Array(grad ? ins[wrt].length : batch * sq * dv);
  const P = new Float64Array(sk), keep = new Float64Array(sk).fill(1), dP = new Float64Array(sk);
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < sq; i++) {
      const row = (b * sq + i) * sk, qi = (b * sq + i) * d, oi = (b * sq + i) * dv;
      let maskRow = 0;
      for (let a = 0; a < r - 1; a++) maskRow += Math.floor(row / st[a]) % scores[a] * maskStride[a];
      let max = -Infinity, sum = 0;
      for (let j = 0; j < sk; j++) {
        let s = 0;
        for (let c = 0; c < d; c++) s += q[qi + c] * k[(b * sk + j) * d + c];
        P[j] = low(s) * scale + mask[maskRow + j * maskStride[r - 1]];
        max = Math.max(max, P[j]);
        if (p > 0) keep[j] = u[row + j] >= p ? 1 / (1 - p) : 0;
      }
      for (let j = 0; j < sk; j++) sum += P[j] = Math.exp(P[j] - max);
      for (let j = 0; j < sk; j++) P[j] /= sum;
      if (!grad || wrt === 2) {
        for (let j = 0; j < sk; j++) {
          for (let c = 0; c < dv; c++) {
            const [to, from] = grad ? [(b * sk + j) * dv + c, oi + c] : [oi + c, (b * sk + j) * dv + c];
            out[to] += low(P[j] * keep[j]) * (grad ? dO : v)[from];
          }
        }
        continue;
      }
      let dot = 0;
      for (let j = 0; j < sk; j++) {
        let s = 0;
        for (let c = 0; c < dv; c++) s += dO[oi + c] * v[(b * sk + j) * dv + c];
        dP[j] = low(s) * keep[j];
        dot += P[j] * dP[j];
      }
      for (let j = 0; j < sk; j++) {
        const ds = low(P[j] * (dP[j] - dot) * scale), kj = (b * sk + j) * d;
        for (let c = 0; c < d; c++) {
          if (wrt === 0) out[qi + c] += ds * k[kj + c];
          else out[kj + c] += ds * q[qi + c];
        }
      }
    }
  }
  return out.map(low);
}
