/**
 * Flash attention on CUDA for training (issue 16 item 3), for targets with the flashAttention knob that
 * implement attention as the flash kernels: each self-attention the matcher finds
 * (compiler/lower/flash_match.ts) that flashIneligible allows has its forward kernels replaced by one flash
 * forward and its backward kernels by one or two flash kernels (codegen/cuda_flash*.ts), and the step
 * program rewritten for the memory plan. Refused where a replaced kernel writes anything else the plan reads
 * (DESIGN.md, notes: compiler/stages/flash_attention.ts).
 */
import { numel } from "../../ir/dtype.ts";
import type { NodeId } from "../../ir/mod.ts";
import type { PlanStep } from "../../plan/plan.ts";
import type { KBinding, Kernel } from "../kernel_ir/ir.ts";
import {
  flashBackwardDkDv,
  flashBackwardDq,
  flashCosts,
  flashForward,
  flashIneligible,
  type FlashKernel,
} from "../codegen/cuda_flash.ts";
import { flashBackwardFused, fusedBackwardIneligible } from "../codegen/cuda_flash_backward.ts";
import {
  findFlashSites,
  FLASH_HEAD_DIM,
  type FlashSite,
  headsOfProduct,
  type MatchContext,
} from "../lower/flash_match.ts";
import { usersOf } from "../graph/users.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { rerootAtProduct, rerootedFusion, type RerootWork, rerootWork } from "./flash_operands.ts";
import { launchAccess } from "./schedule.ts";
import { type FlashOverride, type KernelState, need, type StateBuffer, storedTypeOf } from "./state.ts";

const NAME = "flash-attention";

export const flashAttentionStage: Stage<KernelState> = {
  name: NAME,
  about:
    "cuda-sm90 training: each self-attention's 8 kernels become 2 or 3 flash-attention kernels (no probabilities stored)",
  run: (s, ctx) => {
    const t = s.options.target;
    if (!t.flashAttention || t.implements.attention !== "flash" || !s.fusing) return s;
    need(s.fusion, "the fusion", NAME);
    need(s.bufferOfNode, "buffers", NAME);
    need(s.buffers, "buffers", NAME);
    need(s.kernels, "lowered kernels", NAME);
    const schedule = need(s.schedule, "the schedule", NAME);
    const log = (m: string) => ctx.flags.level >= 3 && console.error(`flash-attention: ${m}`);
    // The working copies re-rooting changes (flash_operands.ts): fusion, buffers, kernels, GEMMs.
    const w = rerootWork(s);
    const match: MatchContext = {
      graph: s.graph,
      materialized: (id) => w.materialized.has(id),
      storedType: (id) => storedTypeOf(s, id),
    };
    const { sites, refused } = findFlashSites(match);
    refused.forEach(log);
    const users = usersOf(s.graph);
    const buffers: StateBuffer[] = w.buffers;
    const kernels: Kernel[] = w.kernels;
    const flash = new Map<number, FlashOverride>();
    const dropped = new Set<number>();
    const placed = new Map<number, number[]>(); // step index -> kernels launched there instead
    const stepOf = new Map<number, number>();
    schedule.steps.forEach((st, i) => st.op === "launch" && stepOf.set(st.kernel, i));
    const buf = (id: NodeId) => w.bufferOfNode.get(id)!;
    for (const found of sites) {
      const plan = planSite(
        s,
        found,
        kernels,
        schedule.steps,
        stepOf,
        new Set([...dropped, ...flash.keys()]),
        buf,
      );
      if (typeof plan === "string") {
        log(`%${found.o}: ${plan}`);
        continue;
      }
      const site = tokenMajor(s, w, found, plan.readElsewhere, match, users, log);
      const lse: StateBuffer = {
        id: buffers.length,
        name: `%${site.o} flash_logsumexp`,
        dtype: "f32",
        shape: [site.spec.batch, site.spec.heads, site.spec.seqQ],
        bytes: 4 * site.spec.batch * site.spec.heads * site.spec.seqQ,
        role: "activation",
      };
      buffers.push(lse);
      const costs = flashCosts(site.spec);
      // The results are the kernel's last parameters: O and L (forward), dK and dV, dQ.
      const bindingsOf = (fk: FlashKernel, results: number) =>
        fk.params.map((name, i): KBinding => {
          const id = bindingBuffer(site, name, lse.id, buf);
          const b = buffers[id];
          return {
            name,
            buffer: id,
            t: b.dtype === "bool" ? "u32" : b.dtype,
            access: i >= fk.params.length - results ? "write" : "read",
            elements: numel(b.shape),
          };
        });
      const make = (
        at: number,
        what: string,
        fk: FlashKernel,
        results: number,
        cost: (typeof costs)[number],
      ) => {
        const old = kernels[at];
        const bindings = bindingsOf(fk, results);
        kernels[at] = {
          name: old.name.replace(/^(k\d+)_.*$/, `$1_flash_${what}`),
          kind: "attention",
          bindings,
          shared: [],
          workgroupSize: fk.workgroupSize,
          workgroups: fk.grid[0],
          body: [],
          about: [
            `flash attention ${what} (compiler/codegen/cuda_flash.ts), head dim 64, ${site.spec.batch}×${site.spec.heads} heads, sequence ${site.spec.seqQ}${
              site.spec.dropout ? `, dropout ${site.spec.dropout.p}` : ""
            }`,
            `replaces ${[...plan.forward, ...plan.backward].map((k) => s.kernels![k].name).join(", ")}`,
            ...bindings.map((b, i) => `binding ${i} (${b.access}): ${buffers[b.buffer].name}`),
          ],
          usesF16: true,
        };
        flash.set(at, {
          source: { code: fk.code, grid: fk.grid, workgroupSize: fk.workgroupSize },
          flops: cost.flops,
          bytesRead: cost.bytesRead,
          bytesWritten: cost.bytesWritten,
        });
        dropped.delete(at);
      };
      for (const k of [...plan.forward, ...plan.backward]) dropped.add(k);
      make(plan.fwdAt, "forward", flashForward(site.spec), 2, costs[0]);
      placed.set(plan.fwdStep, [plan.fwdAt]);
      // The whole sequence in one block: one backward kernel per (batch, head), at dV's index (dQ's
      // kernel stays dropped); otherwise the dK/dV and dQ kernels.
      const oneKernel = fusedBackwardIneligible(site.spec);
      if (oneKernel === undefined) {
        make(plan.dkdvAt, "backward", flashBackwardFused(site.spec), 3, costs[3]);
        placed.set(plan.bwdStep, [plan.dkdvAt]);
      } else {
        make(plan.dkdvAt, "backward_dk_dv", flashBackwardDkDv(site.spec), 2, costs[2]);
        make(plan.dqAt, "backward_dq", flashBackwardDq(site.spec), 1, costs[1]);
        placed.set(plan.bwdStep, [plan.dkdvAt, plan.dqAt]);
        log(`%${site.o}: two backward kernels: ${oneKernel}`);
      }
      log(`%${site.o}: ${plan.forward.length + plan.backward.length} kernels -> ${oneKernel ? 3 : 2}`);
    }
    if (flash.size === 0) return s;
    const steps: PlanStep[] = [];
    const access: { reads: number[]; writes: number[] }[] = [];
    schedule.steps.forEach((st, i) => {
      const instead = placed.get(i);
      if (instead) {
        for (const k of instead) {
          steps.push({ op: "launch", kernel: k });
          access.push(launchAccess(kernels[k].bindings));
        }
        return;
      }
      if (st.op === "launch" && (dropped.has(st.kernel) || flash.has(st.kernel))) return;
      steps.push(st);
      const now = st.op === "launch" ? w.access.get(st.kernel) : undefined;
      access.push(now ?? { reads: [...schedule.access[i].reads], writes: [...schedule.access[i].writes] });
    });
    const gone = new Set([...dropped, ...flash.keys()]);
    const gemmOf = s.gemmOf && new Map([...w.gemmOf].filter(([k]) => !gone.has(k)));
    const goneNames = new Set([...gone].map((k) => s.kernels![k].name));
    const gemms = s.gemms && w.gemms.filter((d) => !goneNames.has(d.kernel));
    return {
      ...s,
      fusion: rerootedFusion(s, w),
      bufferOfNode: w.bufferOfNode,
      buffers,
      kernels,
      ...(gemmOf ? { gemmOf } : {}),
      ...(gemms ? { gemms } : {}),
      flash,
      schedule: { ...schedule, steps, access },
    };
  },
  skip: (s) => s,
};

function bindingBuffer(site: FlashSite, name: string, lse: number, buf: (id: NodeId) => number): number {
  const node: Record<string, NodeId | undefined> = {
    q: site.q,
    k: site.k,
    v: site.v,
    mask: site.mask,
    rng: site.rng,
    o: site.o,
    dO: site.dO,
    dq: site.dQ,
    dk: site.dK,
    dv: site.dV,
    q_bias: site.qBias,
    k_bias: site.kBias,
    v_bias: site.vBias,
  };
  if (name === "lse") return lse;
  const id = node[name];
  if (id === undefined) throw new Error(`internal: flash kernel parameter '${name}' has no buffer`);
  return buf(id);
}

interface SitePlan {
  readonly forward: number[];
  readonly backward: number[];
  readonly fwdAt: number;
  readonly dkdvAt: number;
  readonly dqAt: number;
  readonly fwdStep: number;
  readonly bwdStep: number;
  /** Buffers that steps other than the replaced kernels' read (or that are outputs). */
  readonly readElsewhere: ReadonlySet<number>;
}

/** Which kernels a site replaces and where its kernels run, or why it cannot be replaced. */
function planSite(
  s: KernelState,
  site: FlashSite,
  kernels: readonly Kernel[],
  steps: readonly PlanStep[],
  stepOf: ReadonlyMap<number, number>,
  taken: ReadonlySet<number>,
  buf: (id: NodeId) => number,
): SitePlan | string {
  const why = flashIneligible(site.spec);
  if (why) return why;
  const fusion = s.fusion!;
  const kernelsOf = (nodes: ReadonlySet<NodeId>) =>
    [...new Set([...nodes].map((n) => fusion.kernelOf[n]).filter((k) => k >= 0))].sort((a, b) => a - b);
  const forward = kernelsOf(site.forward), backward = kernelsOf(site.backward);
  const all = [...forward, ...backward];
  if (new Set(all).size !== all.length) return "a kernel computes both forward and backward values";
  if (all.some((k) => taken.has(k) || !stepOf.has(k))) {
    return "a kernel is shared with another site or not launched";
  }
  // Every member of a replaced kernel is the attention's own, and what it writes is read by no other step
  // unless it is O, dQ, dK or dV (which the flash kernels write in the same layout).
  const own = new Set([...site.forward, ...site.backward, ...site.inline]);
  for (const k of all) {
    const extra = [...fusion.kernels[k].members].find((n) => !own.has(n));
    if (extra !== undefined) return `${kernels[k].name} also computes %${extra} (${s.graph.nodes[extra].op})`;
  }
  const kept = new Set([site.o, site.dQ, site.dK, site.dV].map(buf));
  const allSet = new Set(all);
  const readElsewhere = new Set<number>();
  steps.forEach((st) => {
    if (st.op === "copy") readElsewhere.add(st.src);
    else if (!allSet.has(st.kernel)) {
      for (const b of kernels[st.kernel].bindings) if (b.access !== "write") readElsewhere.add(b.buffer);
      const epi = s.gemmOf?.get(st.kernel)?.epilogue;
      for (const b of epi?.bindings ?? []) if (b.access !== "write") readElsewhere.add(b.buffer);
    }
  });
  const outputs = new Set(Object.values(s.schedule!.outputs));
  outputs.forEach((b) => readElsewhere.add(b));
  for (const k of all) {
    for (const b of kernels[k].bindings) {
      if (b.access === "read" || kept.has(b.buffer)) continue;
      if (readElsewhere.has(b.buffer)) {
        return `${kernels[k].name} writes ${b.name}, which other steps read`;
      }
    }
  }
  const writerOf = (root: NodeId) =>
    all.find((k) => kernels[k].bindings.some((b) => b.buffer === buf(root) && b.access !== "read"));
  const fwdAt = writerOf(site.o),
    dvAt = writerOf(site.dV),
    dqAt = writerOf(site.dQ),
    dkAt = writerOf(site.dK);
  if ([fwdAt, dvAt, dqAt, dkAt].some((k) => k === undefined) || new Set([fwdAt, dvAt, dqAt]).size !== 3) {
    return "O, dV and dQ are not written by three distinct replaced kernels";
  }
  return {
    forward,
    backward,
    fwdAt: fwdAt!,
    dkdvAt: dvAt!,
    dqAt: dqAt!,
    // Q, K, V and the mask are ready before P·V; dO before the first backward GEMM reads it.
    fwdStep: stepOf.get(fwdAt!)!,
    bwdStep: Math.min(...backward.map((k) => stepOf.get(k)!)),
    readElsewhere,
  };
}

const ROLES = [["q", "qBias"], ["k", "kBias"], ["v", "vBias"], ["dO", undefined]] as const;

/**
 * The site with each of Q, K, V and dO that only the replaced kernels read taken from the token-major
 * product of the GEMM computing it (that GEMM re-rooted there, flash_operands.ts); the others as they are.
 */
function tokenMajor(
  s: KernelState,
  w: RerootWork,
  site: FlashSite,
  readElsewhere: ReadonlySet<number>,
  match: MatchContext,
  users: NodeId[][],
  log: (m: string) => void,
): FlashSite {
  let out = site;
  const own = new Set([...site.forward, ...site.backward]);
  for (const [role, biasRole] of ROLES) {
    const x = site[role];
    const why = (() => {
      // One value in two roles (Q = K) stays a buffer of its own.
      if (ROLES.some(([r]) => r !== role && site[r] === x)) return "it also plays another role";
      if (!users[x].every((u) => own.has(u)) || readElsewhere.has(w.bufferOfNode.get(x)!)) {
        return "something else reads it";
      }
      const at = w.kernelOf[x], anchor = at >= 0 ? w.fused[at].anchor : undefined;
      if (anchor === undefined) return "no GEMM computes it";
      const heads = headsOfProduct(match, users, anchor, x);
      if (typeof heads === "string") return heads;
      if (heads.bias && !biasRole) return "a bias on dO";
      const operand = heads.bias
        ? { ...heads.operand, bias: { offset: 0, head: FLASH_HEAD_DIM, dtype: heads.bias.dtype } }
        : heads.operand;
      const spec = { ...out.spec, [role]: operand };
      const no = flashIneligible(spec) ?? rerootAtProduct(s, w, at, x, heads, users);
      if (no) return no;
      out = {
        ...out,
        [role]: anchor,
        ...(heads.bias && biasRole ? { [biasRole]: heads.bias.node } : {}),
        spec,
      };
      return undefined;
    })();
    log(
      `%${site.o}: ${role} %${x} ${
        why ? `stays heads-major: ${why}` : "read token-major from its GEMM's product"
      }`,
    );
  }
  return out;
}
