#!/usr/bin/env python3
"""Merges what bench/gpu_run.sh's stages wrote so far into one results file and prints a short table.

  python3 bench/gpu_run_merge.py WORK RESULT DEVICE DATE COMMAND CACHED_BEFORE CACHED_NOW

Runs after every stage, so the table and RESULT always hold every stage that finished; a file a stage did not
write (it failed, was killed or skipped) is left out, never guessed. Stage files: probe.json, train.json,
timings.json (per-kernel times; summarised here, kept whole in the logs archive), check.json, peer.jsonl,
infer.json, bert-base.log (its last JSON line), compile.jsonl.
"""
import json
import os
import sys

work, result, device, date, command, cached_before, cached_now = sys.argv[1:8]


def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def json_lines(name):
    try:
        with open(os.path.join(work, name), errors="replace") as f:
            return [json.loads(line) for line in f if line.startswith("{")]
    except (OSError, ValueError):
        return []


stages = []
try:
    with open(os.path.join(work, "stages.jsonl")) as f:
        stages = [json.loads(line) for line in f]
except OSError:
    pass
for s in stages:
    s["ok"] = s.get("exit_code") == 0
    try:
        with open(os.path.join(work, s["stage"] + ".log"), errors="replace") as f:
            s["log_tail"] = f.read().splitlines()[-12:]
    except OSError:
        s["log_tail"] = []

out = {"device": device, "date": date, "command": command, "stages": stages,
       "kernel_cache_entries_at_start": int(cached_before), "kernel_cache_entries_now": int(cached_now)}
probe, train, timings, check = load("probe.json"), load("train.json"), load("timings.json"), load("check.json")
if probe:
    out["probe"] = probe
if train:
    out["train"] = train
if timings:
    kernels = timings.get("kernels", {})
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:15]
    out["profile"] = {"step_ms": timings.get("step_ms"), "kernel_ms": round(sum(kernels.values()), 4),
                      "kernels_timed": len(kernels), "top": top}
if check:
    out["check"] = {"device": check.get("device"), "passed": sum(c["ok"] for c in check["checks"]),
                    "total": len(check["checks"]), "failed": [c for c in check["checks"] if not c["ok"]]}
base = [r for r in (json_lines("bert-base.log")) if "worst" in r]
if base:
    out["bert_base"] = base[-1]
cases = []
for side in ("fused", "unfused"):
    t = (train or {}).get(side) or {}
    if "ms" in t:
        shape = train["shape"]
        cases.append({"name": f"{train['model']}-train-s{shape['seq']}-{train['precision']}",
                      "impl": "bertfuse" if side == "fused" else "bertfuse-unfused", "ms": t["ms"],
                      "seq_per_s": t["seq_per_s"], "kernels": t.get("kernels")})
cases += (load("infer.json") or {}).get("cases", [])
cases += json_lines("peer.jsonl") + json_lines("compile.jsonl")
out["cases"] = cases
tmp = result + ".tmp"
with open(tmp, "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
os.replace(tmp, result)

print(f"{device}, {date}: kernel cache {cached_before} -> {cached_now} entries")
for s in stages:
    state = "skipped" if s.get("skipped") else ("ok" if s["ok"] else f"FAILED exit {s.get('exit_code')}")
    print(f"  {s['stage']:<11} {state:<15} {s.get('seconds', 0):>6.1f} s")
for side in ("fused", "unfused"):
    t = (train or {}).get(side) or {}
    f = t.get("first_step")
    if f:
        print(f"  train {side}: first step MLM {f['mlm_loss']:.4f} NSP {f['nsp_loss']:.4f} scale {f['loss_scale']} "
              f"grad norm {f['grad_norm']:.5g}" + (f", init loss {'ok' if t.get('init_loss_ok') else 'OFF'}"))
    if t.get("losses"):
        print(f"  train {side}: loss {t['losses'][0]:.3f} -> {t['losses'][-1]:.3f} over {len(t['losses']) - 1} steps")
for pair, d in ((train or {}).get("update_diffs") or {}).items():
    worst = ", ".join(f"{t['tensor']} {t['rel']:.2e}" for t in d["worst_tensors"][:3])
    print(f"  {pair.replace('_vs_', ' vs ')}: loss {d['loss_rel']:.2e}, grad norm {d['grad_norm_rel']:.2e}, "
          f"update {d['update_rel']:.2e} (worst {worst}) {'ok' if d['ok'] else 'DIFFER'}")
if "profile" in out:
    p = out["profile"]
    print(f"  profile: {p['kernels_timed']} kernels, {p['kernel_ms']:.2f} ms of kernels, step {p['step_ms']:.2f} ms")
if "check" in out:
    c = out["check"]
    print(f"  check: {c['passed']}/{c['total']} passed" +
          "".join(f"\n    FAIL {x['name']}: {x['detail'][:160]}" for x in c["failed"][:8]))
if "bert_base" in out:
    print(f"  bert-base vs transformers f64: {json.dumps(out['bert_base'])[:200]}")
for c in cases:
    print(f"  {c['name']:<34} {c['impl']:<20} {c['seq_per_s']:>9.1f} seq/s {c['ms']:>9.2f} ms")
