/**
 * The WGSL checker: hands kernels to Chrome's shader compiler (Tint, through WebGPU in a page) and lists
 * every rejection: createShaderModule's compilation messages, then createComputePipelineAsync, which
 * checks the kernel against the device's limits (storage buffers per stage, workgroup size and memory).
 * The device asks for the adapter's limits, as the runtime does (runtime/webgpu/device.ts).
 */
import type { CdpConnection } from "../util/cdp.ts";

export interface WgslKernel {
  /** Where it comes from, e.g. "kernels_generated/bert-large-train-fp16/wgsl/k005_softmax_rowsum.wgsl". */
  name: string;
  code: string;
}

export interface Rejection {
  name: string;
  stage: "shader" | "pipeline";
  message: string;
}

export interface CheckResult {
  adapter: string;
  hasF16: boolean;
  checked: number;
  /** Kernels that `enable f16` on an adapter without shader-f16: not checkable there. */
  skippedF16: string[];
  rejections: Rejection[];
}

/** Runs in the page: one device, then every kernel of the batch. */
const PAGE_CHECK = `async (kernels) => {
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("no WebGPU adapter in this browser");
  const hasF16 = adapter.features.has("shader-f16");
  const requiredLimits = {};
  for (const k of ["maxStorageBuffersPerShaderStage", "maxComputeWorkgroupStorageSize",
    "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX", "maxStorageBufferBindingSize",
    "maxBufferSize"]) requiredLimits[k] = adapter.limits[k];
  const device = await adapter.requestDevice({ requiredFeatures: hasF16 ? ["shader-f16"] : [], requiredLimits });
  const rejections = [], skippedF16 = [], pipelines = [];
  let checked = 0;
  for (const k of kernels) {
    if (!hasF16 && /^\\s*enable f16;/m.test(k.code)) { skippedF16.push(k.name); continue; }
    checked++;
    device.pushErrorScope("validation");
    const module = device.createShaderModule({ label: k.name, code: k.code });
    const info = await module.getCompilationInfo();
    const scoped = await device.popErrorScope();
    const errors = info.messages.filter((m) => m.type === "error")
      .map((m) => m.lineNum + ":" + m.linePos + " " + m.message);
    if (errors.length || scoped) {
      rejections.push({ name: k.name, stage: "shader", message: errors.join("; ") || scoped.message });
      continue;
    }
    // Compiled concurrently (SwiftShader takes a second or more for a GEMM), reported in kernel order.
    pipelines.push(device.createComputePipelineAsync({ label: k.name, layout: "auto", compute: { module, entryPoint: "main" } })
      .then(() => [], (e) => [{ name: k.name, stage: "pipeline", message: e.message }]));
  }
  rejections.push(...(await Promise.all(pipelines)).flat());
  const adapterName = [adapter.info.vendor, adapter.info.architecture, adapter.info.description].filter(Boolean).join(" ");
  device.destroy();
  return { adapter: adapterName, hasF16, checked, skippedF16, rejections };
}`;

/** The adapter's maxStorageBuffersPerShaderStage, which the page's compiles take as their budget. */
export function adapterBindingLimit(page: CdpConnection): Promise<number> {
  return page.evaluate<number>(
    "navigator.gpu.requestAdapter().then((a) => a.limits.maxStorageBuffersPerShaderStage)",
  );
}

/** Checks `kernels` in the page (a secure context with WebGPU), in batches that keep messages small. */
export async function checkInChrome(
  page: CdpConnection,
  kernels: readonly WgslKernel[],
): Promise<CheckResult> {
  const total: CheckResult = { adapter: "", hasF16: false, checked: 0, skippedF16: [], rejections: [] };
  for (let i = 0; i < kernels.length; i += 40) {
    const batch = kernels.slice(i, i + 40);
    const r = await page.evaluate<CheckResult>(`(${PAGE_CHECK})(${JSON.stringify(batch)})`, 120_000);
    total.adapter = r.adapter;
    total.hasF16 = r.hasF16;
    total.checked += r.checked;
    total.skippedF16.push(...r.skippedF16);
    total.rejections.push(...r.rejections);
  }
  return total;
}

/** One line per rejection, shortened messages (Tint repeats the source line and a caret). */
export function formatRejections(rs: readonly Rejection[]): string[] {
  return rs.map((r) => `${r.name} [${r.stage}]: ${r.message.split("\n")[0].slice(0, 240)}`);
}
