"""What bertfuse's CPU peers share (bench/peers/*.py, run one after another by `deno task bench:bert`): the
configurations, the command line bench/bert.ts passes, the timing (median, min and max, with the load average
read just before), and the one-line report of a peer whose library is missing.

Output protocol, on stdout: one JSON line per measurement, {"name", "impl", "seq_per_s", "ms", "min_ms",
"max_ms", "load", "peak_bytes", "version", ...}; a peer whose library does not import prints one line
{"peer": NAME, "missing": WHY} and exits with MISSING, so that bench/bert.ts can print one line and record a
null instead of failing the run. Progress goes to stderr.
"""

import argparse
import json
import os
import statistics
import sys
import time

# Exit status of a peer whose library is not installed.
MISSING = 3

BERT_LARGE = dict(
    name="bert-large", vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
    intermediate_size=4096, max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02,
)
# Small enough that a CPU smoke run takes seconds.
TINY = dict(BERT_LARGE, name="bert-tiny", vocab_size=1024, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=256)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def emit(record):
    print(json.dumps(record), flush=True)


def missing(peer, error):
    """The peer's library does not import: one line for bench/bert.ts, and exit MISSING."""
    emit({"peer": peer, "missing": f"{type(error).__name__}: {error}"})
    sys.exit(MISSING)


def load_average():
    """The 1-, 5- and 15-minute load averages (/proc/loadavg), or None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def time_it(fn, warmup, iters, sync=lambda: None):
    """Warm-up calls, then `iters` timed calls: {"ms" (median), "min_ms", "max_ms", "load"}, the load read
    just before the timed calls (the warm-up includes compilation, which is not what the load should show)."""
    for _ in range(warmup):
        fn()
    sync()
    load = load_average()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1000)
    return dict(ms=statistics.median(times), min_ms=min(times), max_ms=max(times), load=load)


def pin_threads(threads):
    """Keeps the process on `threads` CPUs, for a library whose thread pool has no size setting of its own
    (XLA's sizes itself to the CPUs the process may run on); call before that library is imported."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if threads and 0 < threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])


def parser(description):
    """The command line every CPU peer takes (bench/bert.ts passes its own model's configuration and shapes)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tiny", action="store_true", help="a tiny model and sizes, for a smoke test")
    ap.add_argument("--config", default=None, help="the model's configuration as JSON (Hugging Face keys and a "
                    "\"name\"), instead of BERT-large's; bench/bert.ts passes its model's")
    ap.add_argument("--what", default="train,infer", help="comma list of train,infer")
    ap.add_argument("--train-batch", type=int, default=None, help="training batch (default 64; tiny 2)")
    ap.add_argument("--infer-batches", default=None, help="comma list of inference batches (default 64,1)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default 128; tiny 32)")
    ap.add_argument("--masked", type=int, default=None, help="masked positions per sequence (default 20; tiny 5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default 5; tiny 1)")
    ap.add_argument("--iters", type=int, default=None, help="timed iterations (default 20; tiny 2)")
    ap.add_argument("--threads", type=int, default=0, help="threads (default: the library's own choice)")
    return ap


def settings(a):
    """The configuration and shapes from parsed arguments (see parser), defaults filled in."""
    c = TINY if a.tiny else BERT_LARGE
    if a.config:
        # Only the keys the peers' models read (a model file's config also holds e.g. hidden_act, num_labels).
        c = dict(BERT_LARGE, **{k: v for k, v in json.loads(a.config).items() if k in BERT_LARGE})
    return dict(
        config=c,
        seq=a.seq or (32 if a.tiny else 128),
        masked=a.masked or (5 if a.tiny else 20),
        train_batch=a.train_batch or (2 if a.tiny else 64),
        infer_batches=tuple(int(b) for b in a.infer_batches.split(",")) if a.infer_batches else
        ((2, 1) if a.tiny else (64, 1)),
        warmup=a.warmup if a.warmup is not None else (1 if a.tiny else 5),
        iters=a.iters or (2 if a.tiny else 20),
        what=a.what.split(","),
    )


def case_name(c, what, seq, batch=None):
    """The case names bench/bert.ts uses, so that its figures and the peers' meet in one table."""
    return f"{c['name']}-train-s{seq}-fp32" if what == "train" else f"{c['name']}-infer-s{seq}-b{batch}-fp32"


def record(name, impl, batch, timing, **more):
    return dict(name=name, impl=impl, seq_per_s=batch / (timing["ms"] / 1000), **timing, peak_bytes=None,
                batch=batch, precision="fp32", **more)
