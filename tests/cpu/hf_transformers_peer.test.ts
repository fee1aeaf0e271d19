/**
 * Hugging Face transformers opens our tiny checkpoint folders (tokenizer files included) and answers the
 * same text requests as `deno task infer`: the QA span's character offsets, classification probabilities,
 * fill-mask top-k. Runs where a python has torch and transformers (BERTFUSE_PYTHON, else python3);
 * ignored elsewhere, with the reason printed.
 */
import assert from "node:assert/strict";
import { runCli } from "../util/cli.ts";

const FX = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const SCRIPT = `${FX}check_transformers.py`;

function findPython(): string | undefined {
  for (const exe of [Deno.env.get("BERTFUSE_PYTHON"), "python3", "/usr/bin/python3"]) {
    if (!exe) continue;
    try {
      const r = new Deno.Command(exe, { args: ["-c", "import torch, transformers"], stderr: "null" })
        .outputSync();
      if (r.success) return exe;
    } catch { /* not installed */ }
  }
  return undefined;
}
const py = findPython();
if (!py) {
  console.log("transformers peer test skipped: no python with torch and transformers (BERTFUSE_PYTHON)");
}

const REQUESTS = [
  {
    kind: "qa",
    dir: `${FX}qa`,
    question: "What food does Harry like?",
    context: "My name is Harry and I grew up in Canada. I love apples.",
  },
  { kind: "classify", dir: `${FX}classification`, text: "This MOVIE was great", text_pair: "a good film" },
  { kind: "fill", dir: `${FX}pretraining`, text: "paris is the capital of [MASK] .", top_k: 3 },
];

Deno.test({
  name: "transformers opens the folders and gives deno task infer's answers",
  ignore: !py,
  fn: async () => {
    const child = new Deno.Command(py!, { args: [SCRIPT], stdin: "piped", stdout: "piped", stderr: "piped" })
      .spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(JSON.stringify(REQUESTS)));
    await w.close();
    const out = await child.output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    const theirs = new TextDecoder().decode(out.stdout).trim().split("\n").map((l) => JSON.parse(l));
    const ours = async (args: string[]) => {
      const r = await runCli("infer.ts", [...args, "--backend", "reference"], [
        "--allow-read",
        "--allow-write",
        "--allow-env",
        "--allow-ffi",
      ]);
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(r.stdout);
    };
    const [q, c, f] = REQUESTS;
    const qa = await ours(["--checkpoint", q.dir, "--question", q.question!, "--context", q.context!]);
    assert.deepEqual([qa.start, qa.end], [theirs[0].start, theirs[0].end]);
    const cl = await ours(["--checkpoint", c.dir, "--text", c.text!, "--text-pair", c.text_pair!]);
    for (const [label, p] of Object.entries(theirs[1].scores)) {
      assert.ok(Math.abs(cl.scores[label] - (p as number)) < 1e-5, `${label}: ${cl.scores[label]} vs ${p}`);
    }
    const fm = await ours(["--checkpoint", f.dir, "--text", f.text!, "--top-k", "3"]);
    assert.deepEqual(fm.masks[0].map((g: { id: number }) => g.id), theirs[2].ids);
    fm.masks[0].forEach((g: { score: number }, i: number) =>
      assert.ok(Math.abs(g.score - theirs[2].scores[i]) < 1e-5)
    );
  },
});
