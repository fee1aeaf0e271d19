/**
 * The PyTorch peer benchmark (bench/peers/torch_bert.py) in its CPU smoke mode: a tiny BERT, one training
 * step with LAMB and two inference shapes, timed and printed as JSON lines. Runs where a python3 with torch
 * is installed (Debian's python3-torch in CI); ignored elsewhere, with the reason printed.
 */
import assert from "node:assert/strict";
import { ROOT } from "../util/cli.ts";

const LIMIT_MS = 120_000;

/** The first python3 that imports torch, or why there is none. */
async function findTorchPython(): Promise<{ exe?: string; why: string }> {
  for (const exe of ["/usr/bin/python3", "python3"]) {
    try {
      const r = await new Deno.Command(exe, {
        args: ["-c", "import torch"],
        stdout: "null",
        stderr: "null",
        signal: AbortSignal.timeout(60_000),
      }).output();
      if (r.success) return { exe, why: "" };
    } catch {
      // not installed
    }
  }
  return { why: "no python3 with torch (apt-get install python3-torch)" };
}

const py = await findTorchPython();
if (!py.exe) console.log(`torch peer test skipped: ${py.why}`);

Deno.test({
  name: "torch_bert.py --device cpu --tiny prints one JSON line per measurement",
  ignore: !py.exe,
  fn: async () => {
    const r = await new Deno.Command(py.exe!, {
      args: [`${ROOT}bench/peers/torch_bert.py`, "--device", "cpu", "--tiny"],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(LIMIT_MS),
    }).output();
    const dec = new TextDecoder();
    const stderr = dec.decode(r.stderr);
    assert.equal(r.code, 0, stderr);
    const lines = dec.decode(r.stdout).trim().split("\n").map((l) => JSON.parse(l));
    const names = lines.map((l) => `${l.name} ${l.impl}`);
    for (
      const want of ["bert-tiny-train-s32-fp32", "bert-tiny-infer-s32-b2-fp32", "bert-tiny-infer-s32-b1-fp32"]
    ) {
      assert.ok(names.includes(`${want} torch-eager`), `${want} missing: ${names.join(", ")}`);
    }
    for (const l of lines) {
      for (const k of ["name", "impl", "seq_per_s", "ms", "peak_bytes"]) {
        assert.ok(k in l, `${k} missing in ${JSON.stringify(l)}`);
      }
      assert.ok(l.ms > 0 && l.seq_per_s > 0, JSON.stringify(l));
      assert.equal(l.peak_bytes, null); // CPU: no CUDA allocator to ask
    }
    // torch.compile lines appear where torch has it; otherwise stderr says it was skipped.
    if (!names.some((n) => n.endsWith("torch-compile"))) assert.match(stderr, /skipped torch-compile/);
  },
});
