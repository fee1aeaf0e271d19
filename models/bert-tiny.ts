/** BERT-Tiny (Turc et al. 2019, "Well-Read Students Learn Better"): 2 layers, hidden 128, 2 heads. Uncased English WordPiece vocabulary of 30,522 tokens. */
import { defineBert } from "./bert.ts";

export default defineBert("bert-tiny", {
  vocab_size: 30522,
  hidden_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 2,
  intermediate_size: 512,
  hidden_act: "gelu",
  hidden_dropout_prob: 0.1,
  attention_probs_dropout_prob: 0.1,
  max_position_embeddings: 512,
  type_vocab_size: 2,
  initializer_range: 0.02,
  layer_norm_eps: 1e-12,
  num_labels: 2,
});
