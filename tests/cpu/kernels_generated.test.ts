/**
 * kernels_generated/ is in sync with the compiler: regenerating each committed folder gives the same
 * files, byte for byte (and compiling twice gives identical output — the compiler is deterministic).
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url).pathname;

/** The committed folders and the compile arguments that produce them. */
const COMMITTED: Record<string, string[]> = {
  "bert-large-train-fp16": [
    "models/bert-large.ts",
    "--mode",
    "train",
    "--precision",
    "fp16",
    "--target",
    "cuda-sm90,webgpu-gpu",
  ],
  "bert-base-infer-fp16": [
    "models/bert-base.ts",
    "--mode",
    "infer",
    "--precision",
    "fp16",
    "--target",
    "cuda-sm90,webgpu-gpu",
  ],
};

async function listFiles(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(`${dir}/${prefix}`)) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory) out.push(...await listFiles(dir, rel));
    else out.push(rel);
  }
  return out.sort();
}

for (const [folder, args] of Object.entries(COMMITTED)) {
  Deno.test(`kernels_generated/${folder} is what the compiler generates now`, async () => {
    const tmp = await Deno.makeTempDir();
    try {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--allow-read",
          "--allow-write",
          "--allow-env",
          `${ROOT}cli/compile.ts`,
          ...args,
          "--out",
          `${tmp}/k`,
        ],
        cwd: ROOT,
        env: { NO_COLOR: "1" },
      }).output();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      const committed = `${ROOT}kernels_generated/${folder}`;
      const want = await listFiles(committed);
      const got = await listFiles(`${tmp}/k`);
      assert.deepEqual(got, want, `file list differs; regenerate with: deno task compile ${args.join(" ")}`);
      for (const f of want) {
        const a = await Deno.readTextFile(`${tmp}/k/${f}`);
        const b = await Deno.readTextFile(`${committed}/${f}`);
        assert.ok(a === b, `${folder}/${f} differs; regenerate with: deno task compile ${args.join(" ")}`);
      }
    } finally {
      await Deno.remove(tmp, { recursive: true });
    }
  });
}
