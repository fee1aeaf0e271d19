/**
 * The WGSL checker in Chrome: every kernel we generate passes Chrome's shader compiler (kernels_generated/
 * and BERT-tiny's training step and inference), and kernels fused for the adapter's binding budget fit
 * its limits. kernels_generated/ is compiled for no particular adapter (lavapipe allows 32 storage buffers
 * per stage), so its pipeline-limit rejections are listed, not failed. Kernels that need shader-f16 are
 * counted as unchecked on an adapter without it (SwiftShader's).
 */
import assert from "node:assert/strict";
import { blankPageServer, noBrowser, withPage } from "./browser_env.ts";
import { adapterBindingLimit, checkInChrome, formatRejections } from "./chrome_wgsl.ts";
import { bertTinyKernels, generatedKernels } from "./wgsl_kernels.ts";

Deno.test({
  name: "Chrome accepts every generated WGSL kernel, and BERT-tiny fused for the adapter fits its limits",
  ignore: noBrowser !== undefined,
  sanitizeResources: false,
  fn: async () => {
    const server = blankPageServer();
    try {
      await withPage(`http://127.0.0.1:${server.addr.port}/`, async ({ page }) => {
        const budget = await adapterBindingLimit(page);
        const generated = await checkInChrome(page, await generatedKernels());
        const tiny = await checkInChrome(page, bertTinyKernels(budget));
        const shader = [...generated.rejections, ...tiny.rejections].filter((r) => r.stage === "shader");
        const generatedLimits = generated.rejections.filter((r) => r.stage === "pipeline");
        const tinyLimits = tiny.rejections.filter((r) => r.stage === "pipeline");
        console.log(
          `${tiny.adapter} (${budget} storage buffers per stage): ${generated.checked} kernels of ` +
            `kernels_generated/ and ${tiny.checked} of BERT-tiny checked, ${generated.skippedF16.length} ` +
            `not checkable (enable f16 without shader-f16)`,
        );
        console.log(`shader rejections: ${shader.length}`);
        for (const l of formatRejections(shader)) console.log(`  ${l}`);
        console.log(`kernels_generated/ over this adapter's limits (compiled without a budget):`);
        for (const l of formatRejections(generatedLimits)) console.log(`  ${l}`);
        assert.deepEqual(formatRejections(shader), []);
        assert.deepEqual(formatRejections(tinyLimits), []);
        assert.ok(tiny.checked > 0, "no BERT-tiny kernel was checked");
      });
    } finally {
      await server.shutdown();
    }
  },
});
