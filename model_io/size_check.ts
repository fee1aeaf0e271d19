/**
 * Resource sanity before work: what a BERT config will need, estimated from the config alone, against
 * what this machine has, checked before a graph is built or a buffer allocated. A config claiming 10^6
 * layers, or a batch that cannot fit, is then one line in a second instead of minutes of work ending in
 * an out-of-memory crash. The estimate is deliberately rough (within a factor of about 2): it only has to
 * tell "fits" from "absurd", and it is printed so the user sees the scale.
 */

export class ResourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ResourceError";
  }
}

/** The fields of a BERT config.json the estimate reads (all positive integers after validation). */
export interface SizeConfig {
  vocab_size: number;
  hidden_size: number;
  num_hidden_layers: number;
  intermediate_size: number;
  num_attention_heads: number;
  max_position_embeddings: number;
  type_vocab_size: number;
}

/** Parameters of BERT with its pre-training heads (the largest head). */
export function parameterCount(c: SizeConfig): number {
  const h = c.hidden_size, i = c.intermediate_size;
  const embeddings = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h;
  const layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h;
  const heads = (h * h + h) + (h * h + h) + 2 * h + c.vocab_size + 2 * h + 2;
  return embeddings + c.num_hidden_layers * layer + heads;
}

export interface Workload {
  mode: "train" | "infer";
  batchSize: number;
  seqLen: number;
  /** Rows of vocabulary logits per sequence: masked positions (train), 0 for task heads; default all. */
  maxPredictions?: number;
  /** Named in the message: the model file or checkpoint. */
  what: string;
  /**
   * Only compiled here (`deno task compile`): the kernels are for another machine, so only the compiler's
   * own memory (its graph) must fit this one; a bert-large step at batch 64 compiles on a laptop.
   */
  compileOnly?: boolean;
}

/** Graph nodes per encoder layer (measured on BERT-tiny: about 90 forward, 3× that with autodiff). */
const NODES_PER_LAYER = { train: 300, infer: 100 } as const;
/** Host memory the compiler holds per graph node through its passes (kernels, plans, dumps): generous. */
const BYTES_PER_NODE = 4096;

/** Bytes the work needs: weights (and moments, gradients in training), activations, the compiler's graph. */
export function estimateBytes(c: SizeConfig, w: Workload): number {
  const tokens = w.batchSize * w.seqLen;
  const h = c.hidden_size, i = c.intermediate_size, heads = c.num_attention_heads;
  // Per token and layer: about a dozen hidden-sized tensors, two intermediate ones and the attention rows.
  const perTokenLayer = 12 * h + 2 * i + 3 * heads * w.seqLen;
  const activations = 4 * tokens * c.num_hidden_layers * perTokenLayer;
  const logits = 4 * 3 * w.batchSize * (w.maxPredictions ?? w.seqLen) * c.vocab_size;
  // f32 weights; training adds two moments, a gradient and low-precision copies (about 4.5 copies).
  const weights = 4 * parameterCount(c) * (w.mode === "train" ? 4.5 : 1);
  const compiler = BYTES_PER_NODE * NODES_PER_LAYER[w.mode] * c.num_hidden_layers;
  return w.compileOnly ? compiler : weights + activations * (w.mode === "train" ? 2 : 1) + logits + compiler;
}

/**
 * Memory this machine can give now, or undefined when it may not be asked: Deno needs
 * --allow-sys=systemMemoryInfo (the tasks grant it), and asking without it would prompt a terminal user.
 */
export function availableBytes(): number | undefined {
  try {
    if (Deno.permissions.querySync({ name: "sys", kind: "systemMemoryInfo" }).state !== "granted") {
      return undefined;
    }
    return Deno.systemMemoryInfo().available;
  } catch {
    return undefined;
  }
}

/** Without a measurement, more than this is refused as absurd on any machine (a config typo). */
const CEILING = 2 ** 40;

export function formatBytes(n: number): string {
  const units = ["B", "KB", "MB", "GB", "TB", "PB"];
  let u = 0;
  while (n >= 1000 && u < units.length - 1) (n /= 1000, u++);
  return `${n >= 100 || u === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[u]}`;
}

/** Kernels index a buffer with 32-bit integers (WGSL, CUDA C and C alike): at most this many elements. */
const MAX_ELEMENTS = 2 ** 31 - 1;

/** The step's largest tensors, in elements, by what they are. */
function largestTensor(c: SizeConfig, w: Workload): [string, number] {
  const sizes: [string, number][] = [
    ["vocabulary logits", w.batchSize * (w.maxPredictions ?? w.seqLen) * c.vocab_size],
    ["attention scores", w.batchSize * c.num_attention_heads * w.seqLen * w.seqLen],
    ["feed-forward activations", w.batchSize * w.seqLen * c.intermediate_size],
    ["word embeddings", c.vocab_size * c.hidden_size],
  ];
  return sizes.reduce((a, b) => (b[1] > a[1] ? b : a));
}

/**
 * Refuses a workload that cannot fit in this machine's memory, naming the estimate and what is there, or
 * whose largest tensor a kernel could not index. `measured` defaults to the memory available now (tests pass
 * their own); unknown: a fixed ceiling.
 */
export function checkModelSize(c: SizeConfig, w: Workload, measured = availableBytes()): void {
  const shape = `${c.num_hidden_layers} layers, batch ${w.batchSize} × ${w.seqLen} tokens`;
  const [what, elements] = largestTensor(c, w);
  if (elements > MAX_ELEMENTS) {
    throw new ResourceError(
      `${w.what}: its ${what} would hold ${elements.toExponential(2)} elements (${shape}), over the ` +
        `${MAX_ELEMENTS} a kernel indexes with 32-bit integers; use a smaller batch or sequence`,
    );
  }
  const available = measured ?? CEILING, need = estimateBytes(c, w);
  if (need <= available) return;
  const work = w.mode === "train" ? (w.compileOnly ? "a training step" : "training") : "inference";
  const there = measured === undefined
    ? `no machine this runs on has over ${formatBytes(available)} (memory not measured: no --allow-sys)`
    : `this machine has ${formatBytes(available)} available`;
  const p = parameterCount(c).toExponential(2);
  throw new ResourceError(
    `${w.what}: ${w.compileOnly ? "compiling " : ""}${work} needs about ${formatBytes(need)} ` +
      `(${p} parameters, ${shape}) but ${there}; use a smaller model or batch`,
  );
}
