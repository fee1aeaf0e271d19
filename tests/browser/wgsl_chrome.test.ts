/**
 * Every WGSL kernel we generate passes Chrome's shader compiler and its device limits: kernels_generated/
 * and the kernels of a BERT-tiny training step and of BERT-tiny inference for each head. Kernels that need
 * shader-f16 are counted as unchecked on an adapter without it (SwiftShader's), and the count is printed.
 */
import assert from "node:assert/strict";
import { blankPageServer, noBrowser, withPage } from "./browser_env.ts";
import { checkInChrome, formatRejections } from "./chrome_wgsl.ts";
import { bertTinyKernels, generatedKernels } from "./wgsl_kernels.ts";

Deno.test({
  name:
    "Chrome's WGSL compiler accepts every generated kernel (kernels_generated/, BERT-tiny train and infer)",
  ignore: noBrowser !== undefined,
  sanitizeResources: false,
  fn: async () => {
    const kernels = [...await generatedKernels(), ...bertTinyKernels()];
    const server = blankPageServer();
    try {
      const r = await withPage(
        `http://127.0.0.1:${server.addr.port}/`,
        (b) => checkInChrome(b.page, kernels),
      );
      console.log(
        `${r.adapter}: ${r.checked} kernels checked, ${r.rejections.length} rejected, ${r.skippedF16.length} ` +
          `not checkable (enable f16 without shader-f16)`,
      );
      const lines = formatRejections(r.rejections);
      for (const l of lines) console.log(`  ${l}`);
      assert.deepEqual(lines, []);
    } finally {
      await server.shutdown();
    }
  },
});
