/**
 * Flash attention on CUDA for training, decided on the fusion before any buffer exists: for targets with the
 * flashAttention knob that implement attention as the flash kernels, each self-attention the matcher finds
 * (compiler/lower/flash_match.ts) that flashIneligible allows has its forward kernels merged into one flash
 * forward kernel and its backward kernels into one or two (codegen/cuda_flash*.ts). Buffers, lowering, the
 * schedule and the memory plan then treat them as kernels like any other (`flashKernel` is their lowering),
 * and no probabilities are stored. Refused where a merged kernel writes anything else another kernel reads
 * (DESIGN.md, notes: compiler/stages/flash_attention.ts).
 */
import { numel } from "../../ir/dtype.ts";
import type { NodeId } from "../../ir/mod.ts";
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
import { readsOf } from "../fusion/kernel_facts.ts";
import type { FusedKernel } from "../fusion/types.ts";
import {
  findFlashSites,
  FLASH_HEAD_DIM,
  type FlashSite,
  headsOfProduct,
  type MatchContext,
} from "../lower/flash_match.ts";
import { usersOf } from "../graph/users.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type FusionWork, fusionWork, rerootAtProduct, workedFusion } from "./flash_operands.ts";
import {
  type FlashOverride,
  type FlashPart,
  type KernelState,
  need,
  type StateBuffer,
  storedTypeOf,
} from "./state.ts";

const NAME = "flash-attention";

export const flashAttentionStage: Stage<KernelState> = {
  name: NAME,
  about:
    "cuda-sm90 training: each self-attention's 8 kernels become 2 or 3 flash-attention kernels (no probabilities stored)",
  run: (s, ctx) => {
    const t = s.options.target;
    if (!t.flashAttention || t.implements.attention !== "flash" || !s.fusing) return s;
    const fusion = need(s.fusion, "the fusion", NAME);
    need(s.storage, "the storage plan", NAME);
    const log = (m: string) => ctx.flags.level >= 3 && console.error(`flash-attention: ${m}`);
    const g = s.graph, w = fusionWork(fusion);
    const match: MatchContext = {
      graph: g,
      materialized: (id) => w.materialized.has(id),
      storedType: (id) => storedTypeOf(s, id),
    };
    const { sites, refused } = findFlashSites(match);
    refused.forEach(log);
    const users = usersOf(g);
    const outputs = new Set(g.outputs.values());
    // Fused kernel index -> the flash kernels that run in its place; the merged kernels.
    const instead = new Map<number, FlashPart[]>();
    const merged = new Set<number>();
    for (const found of sites) {
      const plan = planSite(s, w, found, merged, outputs);
      if (typeof plan === "string") {
        log(`%${found.o}: ${plan}`);
        continue;
      }
      const site = tokenMajor(s, w, found, plan.readElsewhere, match, users, log);
      [...plan.forward, ...plan.backward].forEach((k) => merged.add(k));
      const part = (what: FlashPart["what"], kernels: number[]) => ({ what, site, kernels });
      instead.set(plan.fwdAt, [part("forward", plan.forward)]);
      // The whole sequence in one block: one backward kernel per (batch, head); otherwise dK/dV and dQ.
      const oneKernel = fusedBackwardIneligible(site.spec);
      instead.set(
        plan.bwdAt,
        oneKernel === undefined
          ? [part("backward", plan.backward)]
          : [part("backward_dk_dv", plan.backward), part("backward_dq", plan.backward)],
      );
      if (oneKernel) log(`%${site.o}: two backward kernels: ${oneKernel}`);
      log(`%${site.o}: ${plan.forward.length + plan.backward.length} kernels -> ${oneKernel ? 3 : 2}`);
    }
    if (instead.size === 0) return s;
    return { ...s, ...mergeKernels(s, w, instead, merged) };
  },
  skip: (s) => s,
};

/**
 * The fusion with each site's kernels merged: the flash kernels in the place of the kernel writing O
 * (forward) and of the first backward kernel, the other kernels in their order, renumbered.
 */
function mergeKernels(
  s: KernelState,
  w: FusionWork,
  instead: ReadonlyMap<number, FlashPart[]>,
  merged: ReadonlySet<number>,
): Pick<KernelState, "fusion" | "flashParts"> {
  const kernels: FusedKernel[] = [], flashParts = new Map<number, FlashPart>();
  const newIndex = new Map<number, number>();
  w.fused.forEach((k, i) => {
    for (const p of instead.get(i) ?? []) {
      const { site, what } = p, { batch, heads, seqQ, seqK } = site.spec;
      const members = new Set(p.kernels.flatMap((m) => [...w.fused[m].members]));
      // The two-kernel backward: dQ's kernel computes dQ only, the other every other backward member.
      if (what === "backward_dk_dv") members.delete(site.dQ);
      const roots = what === "forward" ? [site.o] : what === "backward_dq" ? [site.dQ] : [site.dK, site.dV];
      if (what === "backward") roots.push(site.dQ);
      flashParts.set(kernels.length, p);
      kernels.push({
        id: kernels.length,
        kind: "attention",
        roots: roots.sort((a, b) => a - b),
        members: what === "backward_dq" ? new Set([site.dQ]) : members,
        space: [batch, heads, seqQ, seqK],
      });
    }
    if (merged.has(i)) return;
    newIndex.set(i, kernels.length);
    kernels.push({ ...k, id: kernels.length });
  });
  const kernelOf = new Int32Array(w.kernelOf.length).fill(-1);
  kernels.forEach((k) => k.members.forEach((m) => (kernelOf[m] = k.id)));
  // The merged kernels' other roots (the probabilities, the softmax's statistics) are stored no more.
  const roots = new Set(kernels.flatMap((k) => k.roots));
  const gone = new Set([...merged].flatMap((k) => w.fused[k].roots.filter((r) => !roots.has(r))));
  const f = s.fusion!;
  return {
    fusion: {
      ...f,
      kernels,
      kernelOf,
      materialized: new Set([...w.materialized].filter((x) => !gone.has(x))),
      decisions: f.decisions.filter((d) => newIndex.has(d.consumerKernel)).map((d) => ({
        ...d,
        consumerKernel: newIndex.get(d.consumerKernel)!,
      })),
    },
    flashParts,
  };
}

/**
 * The lowering of a flash kernel (the lower stage's, for the kernels this stage merged): its bindings, the
 * source written in CUDA C and the traffic and work its empty kernel IR cannot count. `lse`: the site's
 * log-sum-exp buffer (buffers stage).
 */
export function flashKernel(
  k: FusedKernel,
  p: FlashPart,
  buffers: readonly StateBuffer[],
  bufferOfNode: ReadonlyMap<NodeId, number>,
  lse: number,
): { kernel: Kernel; override: FlashOverride } {
  const { site } = p, spec = site.spec;
  const costs = flashCosts(spec);
  const [fk, results, cost]: [FlashKernel, number, (typeof costs)[number]] = p.what === "forward"
    ? [flashForward(spec), 2, costs[0]]
    : p.what === "backward"
    ? [flashBackwardFused(spec), 3, costs[3]]
    : p.what === "backward_dk_dv"
    ? [flashBackwardDkDv(spec), 2, costs[2]]
    : [flashBackwardDq(spec), 1, costs[1]];
  // The results are the kernel's last parameters: O and L (forward), dK and dV, dQ.
  const bindings = fk.params.map((name, i): KBinding => {
    const id = bindingBuffer(site, name, lse, bufferOfNode);
    const b = buffers[id];
    return {
      name,
      buffer: id,
      t: b.dtype === "bool" ? "u32" : b.dtype,
      access: i >= fk.params.length - results ? "write" : "read",
      elements: numel(b.shape),
    };
  });
  return {
    kernel: {
      name: `k${String(k.id).padStart(3, "0")}_flash_${p.what}`,
      kind: "attention",
      bindings,
      shared: [],
      workgroupSize: fk.workgroupSize,
      workgroups: fk.grid[0],
      body: [],
      about: [
        `flash attention ${p.what} (compiler/codegen/cuda_flash.ts), head dim 64, ${spec.batch}×${spec.heads} heads, sequence ${spec.seqQ}${
          spec.dropout ? `, dropout ${spec.dropout.p}` : ""
        }`,
        `in place of ${p.kernels.length} fused kernels`,
        ...bindings.map((b, i) => `binding ${i} (${b.access}): ${buffers[b.buffer].name}`),
      ],
      usesF16: true,
    },
    override: {
      source: { code: fk.code, grid: fk.grid, workgroupSize: fk.workgroupSize },
      flops: cost.flops,
      bytesRead: cost.bytesRead,
      bytesWritten: cost.bytesWritten,
    },
  };
}

function bindingBuffer(
  site: FlashSite,
  name: string,
  lse: number,
  bufferOfNode: ReadonlyMap<NodeId, number>,
) {
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
  const id = node[name], b = id === undefined ? undefined : bufferOfNode.get(id);
  if (b === undefined) throw new Error(`internal: flash kernel parameter '${name}' has no buffer`);
  return b;
}

interface SitePlan {
  readonly forward: number[];
  readonly backward: number[];
  /** The kernel writing O, where the forward runs, and the first backward kernel, where the backward runs. */
  readonly fwdAt: number;
  readonly bwdAt: number;
  /** Stored nodes that kernels other than the merged ones read (or that are outputs). */
  readonly readElsewhere: ReadonlySet<NodeId>;
}

/** Which fused kernels a site merges and where its kernels run, or why it cannot be merged. */
function planSite(
  s: KernelState,
  w: FusionWork,
  site: FlashSite,
  taken: ReadonlySet<number>,
  outputs: ReadonlySet<NodeId>,
): SitePlan | string {
  const why = flashIneligible(site.spec);
  if (why) return why;
  const g = s.graph, f = workedFusion(s.fusion!, w);
  const kernelsOf = (nodes: ReadonlySet<NodeId>) =>
    [...new Set([...nodes].map((n) => w.kernelOf[n]).filter((k) => k >= 0))].sort((a, b) => a - b);
  const forward = kernelsOf(site.forward), backward = kernelsOf(site.backward);
  const all = new Set([...forward, ...backward]);
  if (all.size !== forward.length + backward.length) {
    return "a kernel computes both forward and backward values";
  }
  if ([...all].some((k) => taken.has(k))) return "a kernel is shared with another site";
  // Every member of a merged kernel is the attention's own, and what it writes is read by no other kernel
  // unless it is O, dQ, dK or dV (which the flash kernels write in the same layout).
  const own = new Set([...site.forward, ...site.backward, ...site.inline]);
  for (const k of all) {
    const extra = [...w.fused[k].members].find((n) => !own.has(n));
    if (extra !== undefined) return `fused kernel ${k} also computes %${extra} (${g.nodes[extra].op})`;
  }
  const readElsewhere = new Set(outputs);
  w.fused.forEach((k, i) => all.has(i) || readsOf(g, f, k).forEach((x) => readElsewhere.add(x)));
  const kept = new Set([site.o, site.dQ, site.dK, site.dV]);
  for (const k of all) {
    const r = w.fused[k].roots.find((x) => !kept.has(x) && readElsewhere.has(x));
    if (r !== undefined) return `fused kernel ${k} writes %${r}, which other kernels read`;
  }
  const writer = (
    x: NodeId,
  ) => (all.has(w.kernelOf[x]) && w.fused[w.kernelOf[x]].roots.includes(x) ? w.kernelOf[x] : -1);
  const [fwdAt, dvAt, dqAt, dkAt] = [site.o, site.dV, site.dQ, site.dK].map(writer);
  if ([fwdAt, dvAt, dqAt, dkAt].some((k) => k < 0) || new Set([fwdAt, dvAt, dqAt]).size !== 3) {
    return "O, dV and dQ are not written by three distinct merged kernels";
  }
  // Each merged kernel runs where everything it reads is written: the forward at O's writer (after every
  // forward kernel), the backward at the first backward kernel, so dO must be written before that.
  const bwdAt = backward[0];
  const early = (kernels: number[], at: number) => {
    const members = new Set(kernels.flatMap((k) => [...w.fused[k].members]));
    return [...readsOf(g, f, { ...w.fused[at], members })].find((x) =>
      w.kernelOf[x] > at && !all.has(w.kernelOf[x])
    );
  };
  const late = early(forward, fwdAt) ?? early(backward, bwdAt);
  if (late !== undefined) return `%${late} is written after the kernel the flash kernel would replace`;
  return { forward, backward, fwdAt, bwdAt, readElsewhere };
}

const ROLES = [["q", "qBias"], ["k", "kBias"], ["v", "vBias"], ["dO", undefined]] as const;

/**
 * The site with each of Q, K, V and dO that only the merged kernels read taken from the token-major
 * product of the GEMM computing it (that GEMM re-rooted there, flash_operands.ts); the others as they are.
 */
function tokenMajor(
  s: KernelState,
  w: FusionWork,
  site: FlashSite,
  readElsewhere: ReadonlySet<NodeId>,
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
      if (!users[x].every((u) => own.has(u)) || readElsewhere.has(x)) return "something else reads it";
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
