/** BERT-Large (Devlin et al. 2018): 24 layers, hidden 1024, 16 heads, 340M parameters. Uncased English WordPiece vocabulary of 30,522 tokens. */
import { defineBert } from "./bert.ts";

export default defineBert("bert-large", {
  vocab_size: 30522,
  hidden_size: 1024,
  num_hidden_layers: 24,
  num_attention_heads: 16,
  intermediate_size: 4096,
  hidden_act: "gelu",
  hidden_dropout_prob: 0.1,
  attention_probs_dropout_prob: 0.1,
  max_position_embeddings: 512,
  type_vocab_size: 2,
  initializer_range: 0.02,
  layer_norm_eps: 1e-12,
  num_labels: 2,
});
