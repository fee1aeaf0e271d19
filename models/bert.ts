/**
 * BERT (Devlin et al. 2018), written once, with the three heads of Hugging Face's BertForPreTraining,
 * BertForSequenceClassification and BertForQuestionAnswering. Parameters carry Hugging Face's tensor
 * names, so checkpoints map one to one (the MLM decoder is tied to the word embeddings).
 *
 * Model files (bert-tiny.ts, bert-base.ts, bert-large.ts) call `defineBert` with a configuration; the
 * compiler and the drivers call `build` for the batch shape, head and mode they need.
 */
import {
  activation,
  crossEntropy,
  dropout,
  layerNorm,
  linear,
  ModelBuilder,
  ModelError,
  selfAttention,
  type Tensor,
} from "../dsl/mod.ts";
import type { Graph } from "../ir/graph.ts";
import { activationOf, type BertConfig } from "./bert_config.ts";

export type Head = "pretraining" | "classification" | "qa";
export type Mode = "train" | "infer";

export interface BuildOptions {
  head: Head;
  /** "train" adds label inputs and loss outputs; "infer" outputs logits. */
  mode: Mode;
  batchSize: number;
  seqLen: number;
  /** Pretraining in train mode: masked positions per sequence (NVIDIA: 20 at 128, 80 at 512). */
  maxPredictions?: number;
  /** Dropout on (default: in train mode). With it, the graph takes `rng_key` u32[2] = (seed, step). */
  dropout?: boolean;
  /** Record the model-file line of every node (for dumps). */
  trackLocations?: boolean;
}

export interface BertModel {
  readonly name: string;
  readonly config: BertConfig;
  build(opts: BuildOptions): Graph;
}

/**
 * What inference returns for each head, in Hugging Face's output names. Per-token outputs are [N, S, ...]
 * and the others [N, ...].
 */
export const INFER_OUTPUTS: Record<Head, readonly { name: string; perToken: boolean }[]> = {
  pretraining: [{ name: "prediction_logits", perToken: true }, {
    name: "seq_relationship_logits",
    perToken: false,
  }],
  classification: [{ name: "logits", perToken: false }],
  qa: [{ name: "start_logits", perToken: true }, { name: "end_logits", perToken: true }],
};

/** The head a checkpoint was saved for, from its Hugging Face architecture name (default: pretraining). */
export function headOf(cfg: BertConfig): Head {
  const arch = cfg.architectures ?? [];
  if (arch.some((a) => a.endsWith("ForSequenceClassification"))) return "classification";
  if (arch.some((a) => a.endsWith("ForQuestionAnswering"))) return "qa";
  return "pretraining";
}

/** The additive attention-mask value for padding keys, as in BERT's original code. */
export const MASK_VALUE = -10000;
/** Masked-LM labels equal to this are not predicted (NVIDIA's run_pretraining.py convention). */
export const IGNORE_INDEX = -1;

export function defineBert(name: string, config: BertConfig): BertModel {
  return { name, config, build: (opts) => buildBert(name, config, opts) };
}

function buildBert(name: string, cfg: BertConfig, opts: BuildOptions): Graph {
  const { batchSize: B, seqLen: S, head, mode } = opts;
  const H = cfg.hidden_size;
  if (!(Number.isInteger(B) && B > 0 && Number.isInteger(S) && S > 0)) {
    throw new ModelError(
      `${name}: batch size and sequence length must be positive integers, got ${B} and ${S}`,
    );
  }
  if (S > cfg.max_position_embeddings) {
    throw new ModelError(
      `${name}: sequence length ${S} exceeds max_position_embeddings ${cfg.max_position_embeddings}`,
    );
  }
  const m = new ModelBuilder(`${name}-${head}-${mode}`, { trackLocations: opts.trackLocations });
  const std = { truncNormal: cfg.initializer_range };
  const dense = (prefix: string, outF: number, inF: number) => ({
    weight: m.param(`${prefix}.weight`, [outF, inF], std),
    bias: m.param(`${prefix}.bias`, [outF], "zeros"),
  });
  const norm = (prefix: string) => ({
    gamma: m.param(`${prefix}.weight`, [H], "ones"),
    beta: m.param(`${prefix}.bias`, [H], "zeros"),
  });
  const ln = (x: Tensor, p: { gamma: Tensor; beta: Tensor }) =>
    layerNorm(x, p.gamma, p.beta, cfg.layer_norm_eps);
  const act = activationOf(cfg);

  const inputIds = m.input("input_ids", "i32", [B, S]);
  const tokenTypes = m.input("token_type_ids", "i32", [B, S]);
  const attentionMask = m.input("attention_mask", "i32", [B, S]);
  const useDropout = opts.dropout ?? mode === "train";
  const key = useDropout ? m.input("rng_key", "u32", [2]) : undefined;
  const drop = (x: Tensor, p: number) => dropout(x, p, key);

  // ---- embeddings ----
  const wordEmb = m.param("bert.embeddings.word_embeddings.weight", [cfg.vocab_size, H], std);
  const posEmb = m.param("bert.embeddings.position_embeddings.weight", [cfg.max_position_embeddings, H], std);
  const typeEmb = m.param("bert.embeddings.token_type_embeddings.weight", [cfg.type_vocab_size, H], std);
  const embLn = norm("bert.embeddings.LayerNorm");
  const embedded = wordEmb.gather(inputIds).add(posEmb.slice(0, 0, S)).add(typeEmb.gather(tokenTypes));
  let hidden = drop(ln(embedded, embLn), cfg.hidden_dropout_prob);

  // (mask - 1) * 10000 is 0 for tokens and -10000 for padding, broadcast over heads and queries.
  const additiveMask = attentionMask.cast("f32").sub(1).mul(-MASK_VALUE).reshape([B, 1, 1, S]);

  // ---- encoder ----
  for (let i = 0; i < cfg.num_hidden_layers; i++) {
    hidden = bertEncoderLayer(m, cfg, `bert.encoder.layer.${i}`, hidden, additiveMask, key);
  }
  const sequenceOutput = hidden;
  const pooled = () => {
    const pooler = dense("bert.pooler.dense", H, H);
    const cls = sequenceOutput.slice(1, 0, 1).reshape([B, H]);
    return linear(cls, pooler.weight, pooler.bias).tanh();
  };

  // ---- heads ----
  if (head === "pretraining") {
    const transform = dense("cls.predictions.transform.dense", H, H);
    const transformLn = norm("cls.predictions.transform.LayerNorm");
    const decoderBias = m.param("cls.predictions.bias", [cfg.vocab_size], "zeros");
    const nsp = dense("cls.seq_relationship", 2, H);
    const mlmLogits = (h: Tensor) =>
      linear(
        ln(activation(linear(h, transform.weight, transform.bias), act), transformLn),
        wordEmb,
        decoderBias,
      );
    const nspLogits = linear(pooled(), nsp.weight, nsp.bias);
    if (mode === "infer") {
      m.output("prediction_logits", mlmLogits(sequenceOutput));
      m.output("seq_relationship_logits", nspLogits);
    } else {
      const P = opts.maxPredictions ?? 20;
      const positions = m.input("masked_lm_positions", "i32", [B, P]);
      const labels = m.input("masked_lm_ids", "i32", [B, P]);
      const nspLabels = m.input("next_sentence_labels", "i32", [B]);
      // Row b's position p is row b*S + p of the flattened [B*S, H] sequence output.
      const flatPositions = positions.add(m.iota([B, P], 0).mul(S));
      const atMasked = sequenceOutput.reshape([B * S, H]).gather(flatPositions.reshape([B * P]));
      const mlm = crossEntropy(mlmLogits(atMasked), labels.reshape([B * P]), IGNORE_INDEX);
      const nspCe = crossEntropy(nspLogits, nspLabels, IGNORE_INDEX);
      m.output("loss", mlm.loss.add(nspCe.loss));
      m.output("mlm_loss", mlm.loss);
      m.output("nsp_loss", nspCe.loss);
      m.output("mlm_accuracy", mlm.correct.div(mlm.count.maximum(1)));
      m.output("nsp_accuracy", nspCe.correct.div(nspCe.count.maximum(1)));
    }
  } else if (head === "classification") {
    if (!(cfg.num_labels >= 1)) {
      throw new ModelError(`${name}: the classification head needs num_labels >= 1 (1 is regression)`);
    }
    const classifier = dense("classifier", cfg.num_labels, H);
    const logits = linear(drop(pooled(), cfg.hidden_dropout_prob), classifier.weight, classifier.bias);
    if (mode === "infer") m.output("logits", logits);
    else if (cfg.num_labels === 1) {
      // One output is regression (STS-B), as Hugging Face's BertForSequenceClassification: mean squared error.
      const target = m.input("labels", "f32", [B]);
      m.output("loss", logits.cast("f32").reshape([B]).sub(target).square().mean(0, false));
    } else {
      const ce = crossEntropy(logits, m.input("labels", "i32", [B]), IGNORE_INDEX);
      m.output("loss", ce.loss);
      m.output("accuracy", ce.correct.div(ce.count.maximum(1)));
    }
  } else {
    const qa = dense("qa_outputs", 2, H);
    const logits = linear(sequenceOutput, qa.weight, qa.bias); // [B, S, 2]
    const start = logits.slice(2, 0, 1).reshape([B, S]);
    const end = logits.slice(2, 1, 2).reshape([B, S]);
    if (mode === "infer") {
      m.output("start_logits", start);
      m.output("end_logits", end);
    } else {
      // As Hugging Face: positions outside the sequence are clamped to S and then ignored.
      const span = (name: string, l: Tensor) => {
        const pos = m.input(name, "i32", [B]).maximum(0).minimum(S);
        return crossEntropy(l, pos, S).loss;
      };
      m.output("loss", span("start_positions", start).add(span("end_positions", end)).mul(0.5));
    }
  }
  return m.graph;
}

/**
 * One transformer encoder layer (post-LayerNorm, as in BERT): self-attention, dropout, residual,
 * LayerNorm, then the feed-forward block with the same. Exported so tests can compile a single layer.
 */
export function bertEncoderLayer(
  m: ModelBuilder,
  cfg: BertConfig,
  p: string,
  hidden: Tensor,
  additiveMask: Tensor,
  key: Tensor | undefined,
): Tensor {
  const H = cfg.hidden_size;
  const std = { truncNormal: cfg.initializer_range };
  const dense = (prefix: string, outF: number, inF: number) => ({
    weight: m.param(`${prefix}.weight`, [outF, inF], std),
    bias: m.param(`${prefix}.bias`, [outF], "zeros"),
  });
  const norm = (prefix: string) => ({
    gamma: m.param(`${prefix}.weight`, [H], "ones"),
    beta: m.param(`${prefix}.bias`, [H], "zeros"),
  });
  const ln = (x: Tensor, q: { gamma: Tensor; beta: Tensor }) =>
    layerNorm(x, q.gamma, q.beta, cfg.layer_norm_eps);
  const drop = (x: Tensor, prob: number) => dropout(x, prob, key);
  const attn = {
    query: dense(`${p}.attention.self.query`, H, H),
    key: dense(`${p}.attention.self.key`, H, H),
    value: dense(`${p}.attention.self.value`, H, H),
  };
  const attnOut = dense(`${p}.attention.output.dense`, H, H);
  const attnLn = norm(`${p}.attention.output.LayerNorm`);
  const inter = dense(`${p}.intermediate.dense`, cfg.intermediate_size, H);
  const out = dense(`${p}.output.dense`, H, cfg.intermediate_size);
  const outLn = norm(`${p}.output.LayerNorm`);

  const context = selfAttention(
    hidden,
    attn,
    cfg.num_attention_heads,
    additiveMask,
    cfg.attention_probs_dropout_prob,
    key,
  );
  const attended = ln(
    drop(linear(context, attnOut.weight, attnOut.bias), cfg.hidden_dropout_prob).add(hidden),
    attnLn,
  );
  const ffn = activation(linear(attended, inter.weight, inter.bias), activationOf(cfg));
  return ln(drop(linear(ffn, out.weight, out.bias), cfg.hidden_dropout_prob).add(attended), outLn);
}
