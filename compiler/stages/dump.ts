/**
 * A readable text dump of the kernel-level state (DUMP_DIR files after each kernel stage, DEBUG=5): each
 * part that exists so far, in the order the stages make them.
 */
import { printKernel } from "../kernel_ir/kernel_print.ts";
import type { KernelState } from "./state.ts";

const ids = (xs: Iterable<number>) => [...xs].map((x) => `%${x}`).join(" ");

export function printState(s: KernelState): string {
  const out: string[] = [`graph ${s.graph.name}: ${s.graph.nodes.length} nodes; fusing: ${s.fusing}`];
  const f = s.fusion;
  if (f) {
    const refused = f.decisions.filter((d) => !d.ok).length;
    out.push(
      "",
      `fusion: ${f.kernels.length} kernels; ${f.decisions.length} decisions, ${refused} refused, ${f.fuelRefusals} for fuel`,
    );
    for (const k of f.kernels) {
      const axes = k.axes ? ` axes [${k.axes}]` : "";
      const anchor = k.anchor !== undefined ? ` anchor %${k.anchor}` : "";
      out.push(`  kernel ${k.id} ${k.kind} over [${k.space}]${axes}${anchor}: writes ${ids(k.roots)}`);
      out.push(`    members ${ids([...k.members].sort((a, b) => a - b))}`);
    }
    if (f.inPlace.concats.size) out.push(`  assembled in place: ${ids(f.inPlace.concats)}`);
  }
  if (s.storage) {
    out.push(
      "",
      `storage: ${s.storage.precision}, activations ${s.storage.low}; narrowed ${ids(s.storage.narrowed)}`,
    );
  }
  if (s.buffers) {
    out.push("", `buffers: ${s.buffers.length}`);
    for (const b of s.buffers) {
      out.push(`  ${b.id} ${b.role} '${b.name}' ${b.dtype}[${b.shape}] ${b.bytes} B`);
    }
  }
  if (s.kernels) {
    out.push("", `kernels: ${s.kernels.length}`);
    for (const k of s.kernels) out.push(printKernel(k));
  }
  if (s.gemms?.length) {
    out.push("", "library calls:");
    for (const d of s.gemms) out.push(`  ${d.kernel}: ${d.library ? "cuBLASLt" : "template"} (${d.reason})`);
    for (const [i, lib] of s.gemmOf ?? []) {
      if (lib.epilogue) out.push(`epilogue of kernel ${i}:`, printKernel(lib.epilogue));
    }
  }
  if (s.schedule) {
    out.push("", `schedule: ${s.schedule.steps.length} steps`);
    s.schedule.steps.forEach((st, i) =>
      out.push(`  ${i} ${st.op === "launch" ? `launch ${st.kernel}` : `copy ${st.src} -> ${st.dst}`}`)
    );
    for (const u of s.schedule.updates) out.push(`  update ${u.param} <- ${u.value}`);
  }
  if (s.memory) {
    const m = s.memory;
    out.push(
      "",
      `memory: ${m.slots.length} slots, ${m.bytesWithReuse} B (${m.bytesWithoutReuse} B without reuse)`,
    );
    for (const [b, slot] of m.slotOf) {
      const off = m.offsetOf.get(b);
      out.push(`  buffer ${b} -> slot ${slot}${off ? ` + ${off}` : ""}`);
    }
  }
  if (s.legalized) out.push("", "legalized for: " + s.options.target.language);
  if (s.plan) {
    out.push("", `plan: ${s.plan.kernels.length} kernels`);
    for (const k of s.plan.kernels) {
      out.push(`  ${k.name}: ${k.source.code.length} chars${k.library ? ", library GEMM" : ""}`);
    }
  }
  if (s.shared) {
    out.push("", `shared sources: ${new Set(s.shared.kernels).size} for ${s.shared.kernels.length} kernels`);
  }
  return out.join("\n") + "\n";
}
