/**
 * Flash attention on CUDA for training, decided on the graph before fusion: for targets with the
 * flashAttention knob that implement attention as the flash kernels, each self-attention whose node group
 * (compiler/passes/flash_match.ts) the kernels can compute, and whose nodes nothing else reads, is claimed: its
 * forward is one kernel and its backward one or two (codegen/cuda_flash*.ts), which fusion takes as they are;
 * Q, K, V and dO are read token-major from the product of the library GEMM computing them, a bias added on
 * load, where only the attention reads them, else stored as they are. No probabilities are stored (DESIGN.md,
 * notes: compiler/stages/flash_attention.ts).
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
import type { FusedKernel } from "../fusion/types.ts";
import {
  findFlashSites,
  FLASH_HEAD_DIM,
  type FlashSite,
  headsOfProduct,
  type MatchContext,
} from "../passes/flash_match.ts";
import { usersOf } from "../graph/users.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import type { FlashClaims, FlashOverride, FlashPart, KernelState, StateBuffer } from "./state.ts";

const NAME = "flash-attention";

export const flashAttentionStage: Stage<KernelState> = {
  name: NAME,
  about:
    "cuda-sm90 training: each self-attention is claimed for 2 or 3 flash-attention kernels before fusion (no probabilities stored)",
  run: (s, ctx) => {
    const t = s.options.target;
    if (!t.flashAttention || t.implements.attention !== "flash" || !s.fusing) return s;
    const log = (m: string) => ctx.flags.level >= 3 && console.error(`flash-attention: ${m}`);
    const g = s.graph, users = usersOf(g);
    const match: MatchContext = {
      graph: g,
      materialized: (id) => g.nodes[id].op === "input" || g.nodes[id].op === "param",
    };
    const { sites, refused } = findFlashSites(match);
    refused.forEach(log);
    const outputs = new Set(g.outputs.values());
    const claimed = new Set<NodeId>(), stored = new Set<NodeId>();
    const kernels: FlashClaims["kernels"][number][] = [];
    for (const found of sites) {
      const why = flashIneligible(found.spec) ?? ownNodes(found, users, outputs, claimed);
      if (why) {
        log(`%${found.o}: ${why}`);
        continue;
      }
      const site = tokenMajor(found, match, users, s.graphCalls?.raw, stored, log);
      [...site.forward, ...site.backward].forEach((x) => claimed.add(x));
      const part = (what: FlashPart["what"], roots: NodeId[], members: Iterable<NodeId>) =>
        kernels.push({ part: { what, site }, roots, members: new Set(members) });
      part("forward", [site.o], site.forward);
      // The whole sequence in one block: one backward kernel per (batch, head); otherwise dK/dV and dQ.
      const oneKernel = fusedBackwardIneligible(site.spec);
      const grads = [site.dQ, site.dK, site.dV].sort((a, b) => a - b);
      if (oneKernel === undefined) part("backward", grads, site.backward);
      else {
        log(`%${site.o}: two backward kernels: ${oneKernel}`);
        part(
          "backward_dk_dv",
          [site.dK, site.dV].sort((a, b) => a - b),
          [...site.backward].filter((x) => x !== site.dQ),
        );
        part("backward_dq", [site.dQ], [site.dQ]);
      }
      log(`%${site.o}: ${oneKernel ? 3 : 2} flash kernels`);
    }
    return kernels.length ? { ...s, flashClaims: { kernels, stored } } : s;
  },
  skip: (s) => s,
};

/** Why the site's nodes cannot all be the flash kernels' own: another reads one (but O and the gradients). */
function ownNodes(
  site: FlashSite,
  users: readonly NodeId[][],
  outputs: ReadonlySet<NodeId>,
  claimed: ReadonlySet<NodeId>,
): string | undefined {
  const own = new Set([...site.forward, ...site.backward]);
  const kept = new Set([site.o, site.dQ, site.dK, site.dV]);
  for (const x of own) {
    if (claimed.has(x)) return `%${x} belongs to another site`;
    if (kept.has(x)) continue;
    if (outputs.has(x)) return `%${x} is a graph output`;
    const u = users[x].find((u) => !own.has(u));
    if (u !== undefined) return `%${x} is also read by %${u}`;
  }
  return undefined;
}

/**
 * The lowering of a flash kernel (the lower stage's, for the kernels this stage claimed): its bindings, the
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

const ROLES = [["q", "qBias"], ["k", "kBias"], ["v", "vBias"], ["dO", undefined]] as const;

/** The first f16 matmul below `x` through casts, views and adds: the GEMM that may compute it. */
function productBelow(match: MatchContext, x: NodeId): NodeId | undefined {
  const n = match.graph.nodes[x];
  if (n.op === "matmul") return x;
  if (!["cast", "reshape", "permute", "add"].includes(n.op)) return undefined;
  for (const i of n.inputs) {
    const m = productBelow(match, i);
    if (m !== undefined) return m;
  }
  return undefined;
}

/**
 * The site with each of Q, K, V and dO that only the attention reads taken from the token-major product of
 * the library GEMM computing it (that product stored, the views and bias between computed on load); the
 * others stored as they are. Adds what the kernels read to `stored`.
 */
function tokenMajor(
  site: FlashSite,
  match: MatchContext,
  users: NodeId[][],
  rawCalls: ReadonlySet<NodeId> | undefined,
  stored: Set<NodeId>,
  log: (m: string) => void,
): FlashSite {
  let out = site;
  const own = new Set([...site.forward, ...site.backward]);
  for (const [role, biasRole] of ROLES) {
    const x = site[role];
    const why = (() => {
      // One value in two roles (Q = K) stays a buffer of its own.
      if (ROLES.some(([r]) => r !== role && site[r] === x)) return "it also plays another role";
      if (!users[x].every((u) => own.has(u))) return "something else reads it";
      const anchor = productBelow(match, x);
      if (anchor === undefined || !rawCalls?.has(anchor)) return "no library GEMM computes it";
      const heads = headsOfProduct(match, users, anchor, x);
      if (typeof heads === "string") return heads;
      if (heads.bias && !biasRole) return "a bias on dO";
      const operand = heads.bias
        ? { ...heads.operand, bias: { offset: 0, head: FLASH_HEAD_DIM, dtype: heads.bias.dtype } }
        : heads.operand;
      const spec = { ...out.spec, [role]: operand };
      const no = flashIneligible(spec);
      if (no) return no;
      out = {
        ...out,
        [role]: anchor,
        ...(heads.bias && biasRole ? { [biasRole]: heads.bias.node } : {}),
        spec,
      };
      stored.add(anchor);
      return undefined;
    })();
    if (why) stored.add(x);
    log(
      `%${site.o}: ${role} %${x} ${
        why ? `stays heads-major: ${why}` : "read token-major from its GEMM's product"
      }`,
    );
  }
  return out;
}
