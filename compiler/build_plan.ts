/**
 * From a fused graph to a Plan: one buffer per materialized node, kernels lowered to the kernel IR and
 * rendered for each target, the step program, and the memory plan (buffers with disjoint lifetimes share
 * a slot).
 */
import { byteSize, type DType, type Graph, type NodeId, numel } from "../ir/mod.ts";
import type { BufferRole, Plan, PlanBuffer, PlanKernel, PlanStep, TargetKernel } from "../plan/plan.ts";
import { storedBytes, storedSize, UPDATE_PREFIX } from "../plan/plan.ts";
import type { FusionResult } from "./fusion/types.ts";
import type { Kernel } from "./kernel_ir/ir.ts";
import { kernelCost } from "./kernel_cost.ts";
import { deriveGemm, type GemmCall, outputOperand } from "./lower/gemm_library.ts";
import { lowerGemmEpilogue, lowerKernel } from "./lower/lower_kernel.ts";
import { vectorizeLoop } from "./lower/vectorize.ts";
import { planMemory } from "./memory_plan.ts";

export type Target = "wgsl" | "cuda";
export type Emitter = (k: Kernel) => TargetKernel;

/** Whether a matmul kernel's GEMM became a library call on CUDA, and why (not). */
export interface GemmDecision {
  readonly kernel: string;
  readonly library: boolean;
  readonly reason: string;
}

export interface BuildOptions {
  /**
   * With a CUDA emitter: give matmul kernels that qualify a cuBLASLt variant (PlanKernel.cudaGemm) beside
   * their template code. Default true.
   */
  readonly libraryGemms?: boolean;
}

export interface BuiltPlan {
  readonly plan: Plan;
  readonly kernels: readonly Kernel[];
  /** One entry per matmul kernel when compiled for CUDA (empty otherwise). */
  readonly gemms: readonly GemmDecision[];
  readonly memory: {
    readonly bytesWithReuse: number;
    readonly bytesWithoutReuse: number;
    readonly peakLiveBytes: number;
  };
}

export function buildPlan(
  g: Graph,
  fusion: FusionResult,
  emitters: Partial<Record<Target, Emitter>>,
  /** The dtype each materialized node is stored in (compiler/storage_precision.ts); default its own. */
  storedType: (id: NodeId) => DType = (id) => g.nodes[id].type.dtype,
  options: BuildOptions = {},
): BuiltPlan {
  const bufferOfNode = new Map<NodeId, number>();
  const buffers: Omit<PlanBuffer, "slot">[] = [];
  const outputNodes = new Set(g.outputs.values());
  const addBuffer = (id: NodeId, role: BufferRole, name?: string): number => {
    const n = g.nodes[id];
    const dtype = storedType(id);
    const b = {
      id: buffers.length,
      name: name ?? `%${id} ${n.op}`,
      dtype,
      shape: [...n.type.shape],
      bytes: numel(n.type.shape) * byteSize(dtype),
      role,
    };
    buffers.push(b);
    return b.id;
  };
  for (const n of g.nodes) {
    if (n.op === "input") bufferOfNode.set(n.id, addBuffer(n.id, "input", String(n.attrs.name)));
    if (n.op === "param") bufferOfNode.set(n.id, addBuffer(n.id, "param", String(n.attrs.name)));
  }
  const outputName = new Map<NodeId, string>();
  for (const [name, id] of g.outputs) if (!outputName.has(id)) outputName.set(id, name);
  for (const k of fusion.kernels) {
    for (const r of k.roots) {
      const outName = outputName.get(r);
      bufferOfNode.set(r, addBuffer(r, outputNodes.has(r) ? "output" : "activation", outName));
    }
  }
  // Flat vectors assembled in place (compiler/fusion/in_place.ts): a buffer each, which the buffers of
  // their parts sit inside (placed after memory planning).
  for (const c of fusion.inPlace.concats) {
    bufferOfNode.set(c, addBuffer(c, outputNodes.has(c) ? "output" : "activation", outputName.get(c)));
  }

  const ctx = {
    graph: g,
    storedType,
    computedAnywhere: (id: NodeId) => fusion.kernelOf[id] < 0 && !fusion.materialized.has(id),
    bufferOf: (id: NodeId) => {
      const b = bufferOfNode.get(id);
      if (b === undefined) throw new Error(`internal: %${id} has no buffer`);
      return b;
    },
  };
  const kernels = fusion.kernels.map((k) => vectorizeLoop(lowerKernel(g, k, { ...ctx, members: k.members })));

  // CUDA: GEMMs as cuBLASLt calls where they qualify. The product goes straight to the kernel's output
  // when the epilogue is only that store; otherwise to an f32 scratch buffer of the plan, which an
  // epilogue kernel (lowered from the same fused kernel) reads. The scratch is a plan buffer rather than
  // an executor-managed workspace so that the memory plan gives it a lifetime of one step and lets it
  // share a slot with other dead activations (no per-GEMM or worst-case allocation beside the arena), and
  // every runtime (and the CPU test harness) sees the same addresses the plan describes.
  const gemms: GemmDecision[] = [];
  const gemmOf = new Map<number, { call: GemmCall; epilogue?: Kernel; scratch?: number }>();
  if (emitters.cuda && options.libraryGemms !== false) {
    fusion.kernels.forEach((k, i) => {
      if (k.kind !== "matmul") return;
      const kctx = { ...ctx, members: k.members };
      const v = deriveGemm(g, k, kctx);
      if (!v.ok) {
        gemms.push({ kernel: kernels[i].name, library: false, reason: v.reason });
        return;
      }
      const base = { m: v.m, n: v.n, k: v.k, batch: v.batch, a: v.a, b: v.b, compute: "32F" as const };
      if (v.direct) {
        const d = outputOperand(ctx.bufferOf(v.direct.root), v.direct.dtype, v.m, v.n);
        gemmOf.set(i, { call: { ...base, d } });
        gemms.push({ kernel: kernels[i].name, library: true, reason: "cuBLASLt writes the output" });
        return;
      }
      const mm = g.nodes[k.anchor!];
      const scratch = buffers.length;
      buffers.push({
        id: scratch,
        name: `%${mm.id} matmul product f32 (cuBLASLt)`,
        dtype: "f32",
        shape: [...mm.type.shape],
        bytes: numel(mm.type.shape) * 4,
        role: "activation",
      });
      const epilogue = vectorizeLoop(lowerGemmEpilogue(g, k, kctx, { buffer: scratch }));
      gemmOf.set(i, { call: { ...base, d: outputOperand(scratch, "f32", v.m, v.n) }, epilogue, scratch });
      gemms.push({ kernel: kernels[i].name, library: true, reason: "cuBLASLt, then an epilogue kernel" });
    });
  }

  const steps: PlanStep[] = kernels.map((_, i) => ({ op: "launch", kernel: i }));
  const outputs: Record<string, number> = {};
  for (const [name, id] of g.outputs) {
    const src = bufferOfNode.get(id)!;
    if (buffers[src].role === "output") {
      outputs[name] = src;
    } else {
      // An output that is an input or parameter itself: copy it into a buffer of its own.
      const dst = addBuffer(id, "output", name);
      steps.push({ op: "copy", src, dst, bytes: buffers[src].bytes });
      outputs[name] = dst;
    }
  }
  const inputs: Record<string, number> = {};
  const params: Record<string, number> = {};
  for (const b of buffers) {
    if (b.role === "input") inputs[b.name] = b.id;
    if (b.role === "param") params[b.name] = b.id;
  }
  const updates = Object.entries(outputs)
    .filter(([name]) => name.startsWith(UPDATE_PREFIX))
    .map(([name, value]) => {
      // The state a step carries to the next: a parameter, an input (optimizer moments, counters) or a
      // flat vector assembled in place (all parameters at once).
      const target = name.slice(UPDATE_PREFIX.length);
      const param = params[target] ?? inputs[target] ?? outputs[target];
      if (param === undefined) throw new Error(`output '${name}' updates no parameter, input or output`);
      return { param, value };
    });

  // A library GEMM's step also writes and reads its scratch (the epilogue's other buffers are the
  // template kernel's), so the scratch lives exactly during that step.
  const schedule = steps.map((s) => {
    if (s.op !== "launch") return { reads: [s.src], writes: [s.dst] };
    const scratch = gemmOf.get(s.kernel)?.scratch;
    const extra = scratch === undefined ? [] : [scratch];
    return {
      reads: [
        ...kernels[s.kernel].bindings.filter((b) => b.access !== "write").map((b) => b.buffer),
        ...extra,
      ],
      writes: [
        ...kernels[s.kernel].bindings.filter((b) => b.access !== "read").map((b) => b.buffer),
        ...extra,
      ],
    };
  });
  // A part of an in-place flat vector lives in the vector's buffer: the memory plan sees only the vector
  // (pinned: never shared, so the ranges no part covers keep reading as zero).
  const container = new Map<number, { buffer: number; offset: number }>();
  for (const [id, where] of fusion.inPlace.placed) {
    const part = bufferOfNode.get(id);
    if (part === undefined) throw new Error(`internal: placed %${id} has no buffer`);
    const whole = bufferOfNode.get(where.concat)!;
    container.set(part, {
      buffer: whole,
      offset: where.elementOffset * storedBytes(buffers[whole].dtype),
    });
  }
  const inSlotOf = (id: number) => container.get(id)?.buffer ?? id;
  const pinnedVector = new Set([...fusion.inPlace.concats].map((c) => bufferOfNode.get(c)!));
  const mem = planMemory(
    buffers.filter((b) => !container.has(b.id)).map((b) => ({
      id: b.id,
      bytes: storedSize(b),
      pinned: b.role !== "activation" || pinnedVector.has(b.id),
    })),
    schedule.map((s) => ({ reads: s.reads.map(inSlotOf), writes: s.writes.map(inSlotOf) })),
  );
  const slotOf = (id: number) => {
    const s = mem.slotOf.get(inSlotOf(id));
    if (s === undefined) throw new Error(`internal: buffer ${id} has no slot`);
    return s;
  };
  const offsetOf = (id: number) => container.get(id)?.offset ?? 0;
  // Two ranges of one flat vector bound by one kernel, one of them written: WebGPU validates usage per
  // buffer, not per range, and refuses a read-only and a writable binding of one buffer in a dispatch,
  // so every binding of that buffer is declared read_write (the ranges never overlap).
  const legalize = (k: Kernel): Kernel => {
    const written = new Set(k.bindings.filter((b) => b.access !== "read").map((b) => slotOf(b.buffer)));
    if (!k.bindings.some((b) => b.access === "read" && written.has(slotOf(b.buffer)))) return k;
    return {
      ...k,
      bindings: k.bindings.map((b) =>
        b.access === "read" && written.has(slotOf(b.buffer)) ? { ...b, access: "read_write" as const } : b
      ),
    };
  };
  const legalKernels = kernels.map(legalize);
  const planBindings = (k: Kernel) =>
    k.bindings.map((b, index) => ({ index, name: b.name, buffer: b.buffer, access: b.access }));

  const planKernels: PlanKernel[] = legalKernels.map((k, i) => {
    const cost = kernelCost(k);
    const lib = gemmOf.get(i);
    const epi = lib?.epilogue && legalize(lib.epilogue);
    const pk: PlanKernel = {
      name: k.name,
      kind: k.kind,
      bindings: planBindings(k),
      about: k.about,
      ...cost,
      ...(emitters.wgsl ? { wgsl: emitters.wgsl(k) } : {}),
      ...(emitters.cuda ? { cuda: emitters.cuda(k) } : {}),
      ...(lib && emitters.cuda
        ? {
          cudaGemm: {
            call: lib.call,
            ...(epi
              ? { epilogue: { name: epi.name, bindings: planBindings(epi), cuda: emitters.cuda(epi) } }
              : {}),
          },
        }
        : {}),
    };
    return pk;
  });

  const plan: Plan = {
    version: 1,
    graph: g.name,
    buffers: buffers.map((b) => ({
      ...b,
      slot: slotOf(b.id),
      ...(offsetOf(b.id) ? { offset: offsetOf(b.id) } : {}),
    })),
    slots: mem.slots.map((s) => ({ id: s.id, bytes: s.bytes })),
    inputs,
    params,
    outputs,
    kernels: planKernels,
    steps,
    updates,
  };
  return {
    plan,
    kernels: legalKernels,
    gemms,
    memory: {
      bytesWithReuse: mem.bytesWithReuse,
      bytesWithoutReuse: mem.bytesWithoutReuse,
      peakLiveBytes: mem.peakLiveBytes,
    },
  };
}
