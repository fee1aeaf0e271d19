/**
 * Batching never changes an answer: the same sequences sent one at a time (each alone in its batch) and
 * all at once (batched with each other, across buckets) give bit-identical outputs, on the reference
 * backend (tests/webgpu/serve_webgpu.test.ts runs the same check on lavapipe).
 */
import { checkBatchingInvariance, referenceBackend } from "../util/serve.ts";

Deno.test("batching never changes an answer (reference backend)", () =>
  checkBatchingInvariance(referenceBackend()));
