#!/usr/bin/env python3
"""ONNX Runtime peer for bertfuse's CPU inference (`deno task bench:bert` runs it after our cases, never beside
them): the pretraining forward of bench/peers/torch_bert.py (MLM logits at every position and NSP logits, fp32)
exported to ONNX at each shape, then run by ONNX Runtime's CPU execution provider with all graph
optimizations (its own fusions of attention, LayerNorm and GELU) and --threads intra-op threads.

  python3 bench/peers/onnx_bert.py --tiny                    # a seconds-long smoke run
  python3 bench/peers/onnx_bert.py --config '{"name": "bert-base", ...}' --seq 128 --infer-batches 8,1 \\
      --threads 2                                            # what bench:bert passes

The model is Hugging Face's BertForPreTraining (torch_bert.py's HfBert, the same configuration and
initialization), or torch_bert.py's plain BERT when transformers is missing. Output: peer_common.py's JSON
lines, impl "onnxruntime"; without onnxruntime or torch, one line and exit status 3.
"""

import os
import sys
import tempfile
import warnings

from peer_common import case_name, emit, log, missing, parser, record, settings, time_it

try:
    import numpy as np
    import onnxruntime as ort
    import torch
except ImportError as e:
    missing("onnxruntime", e)

import torch_bert


class Forward(torch.nn.Module):
    """The inference forward as a module with tensor outputs only (what the exporter traces)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, types, mask):
        return self.model(ids, types, mask)


def export(c, kind, batch, seq, path):
    """The forward at one (batch, seq) shape as an ONNX file; static shapes, as our plans are compiled."""
    model = torch_bert.make_model(c, kind, torch.device("cpu")).eval()
    ids = torch.zeros(batch, seq, dtype=torch.long)
    args = (ids, ids.clone(), torch.ones(batch, seq, dtype=torch.long))
    names = dict(input_names=["ids", "types", "mask"], output_names=["mlm", "nsp"])
    # The exporter warns about tracing details of the transformers code, which are no concern here.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # The TorchScript exporter: no onnxscript needed, and it gives ONNX Runtime the graph its BERT
            # fusions were written for.
            torch.onnx.export(Forward(model), args, path, opset_version=17, dynamo=False, **names)
        except TypeError:  # a torch without the dynamo argument: the TorchScript exporter is the only one
            torch.onnx.export(Forward(model), args, path, opset_version=17, **names)


def main():
    a = parser(__doc__.split("\n")[0]).parse_args()
    s = settings(a)
    c = s["config"]
    if "infer" not in s["what"]:
        log("onnx_bert.py: inference only; nothing to do")
        return
    try:
        import transformers  # noqa: F401

        kind = "hf"
    except ImportError:
        kind = "plain"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if a.threads:
        opts.intra_op_num_threads = a.threads
        opts.inter_op_num_threads = 1
    log(f"onnxruntime {ort.__version__} ({kind} model exported by torch {torch.__version__}); "
        f"{a.threads or 'default'} threads; model {c['name']}, seq {s['seq']}")
    rng = np.random.default_rng(1234)
    with tempfile.TemporaryDirectory(prefix="bertfuse-onnx-") as tmp:
        for b in s["infer_batches"]:
            path = os.path.join(tmp, f"b{b}.onnx")
            export(c, kind, b, s["seq"], path)
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            feeds = {
                "ids": rng.integers(0, c["vocab_size"], (b, s["seq"]), dtype=np.int64),
                "types": np.broadcast_to(np.arange(s["seq"]) >= s["seq"] // 2, (b, s["seq"])).astype(np.int64),
                "mask": np.ones((b, s["seq"]), dtype=np.int64),
            }
            t = time_it(lambda: sess.run(None, feeds), s["warmup"], s["iters"])
            emit(record(case_name(c, "infer", s["seq"], b), "onnxruntime", b, t, version=ort.__version__,
                        threads=a.threads or None, model=kind))
            del sess


if __name__ == "__main__":
    sys.exit(main())
