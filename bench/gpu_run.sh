#!/usr/bin/env bash
# One command for a GPU run (issue 16 item 7): on a bare GPU machine with no network, from the repository root
# with .offline/ packed beforehand by bench/gpu_pack.sh (Deno, node_modules, a CUDA kernel cache for sm_90):
#
#   bench/gpu_run.sh [--small] [--stages check,bert-base,bench,profile,peers] [--out FILE]
#
# Stages, each run to its end whatever the others did (a failure is recorded, never a reason to stop, so
# no figure measured is thrown away):
#   check      bench/gpu_check.ts: every fusion case on CUDA vs the reference, graphs, cuBLASLt
#   bert-base  a random BERT-base (Hugging Face layout) through deno task infer --backend cuda, compared
#              with transformers in float64 (bench/peers/bert_base_check.py)
#   bench      deno task bench:bert --backend cuda, BERT-large fp16 train b64 s128 + inference, fused and unfused
#   profile    per-kernel times of the BERT-large step (bench/gpu_profile.ts) set beside the cost model's
#              prediction: deno task compile --measured, the report kept as bench/results/<date>-<device>-report.md
#   peers      bench/peers/torch_bert.py: PyTorch eager and torch.compile, fp16 and bf16
# Results: bench/results/<date>-<device>.json (device, date, command, each stage's status, time and log
# tail, the checks, the BERT-base errors, every benchmark case, the predicted and measured step); also copied
# to $OUT when that is set (the device tool's output folder). Running again the same day on the same device
# with other --stages merges into the same file.
#
# --small: BERT-tiny shapes everywhere, for a rehearsal (tests/nvcc/gpu_run_rehearsal.test.ts runs this
# with the fake driver of tests/nvcc/cuda_runtime_fake.test.ts on LD_LIBRARY_PATH).
# Environment: GPU_RUN_WORK (scratch folder, default /tmp/bertfuse-gpu-run), GPU_RUN_DEVICE (device name
# when nvidia-smi is absent), GPU_RUN_TIMEOUT (seconds per stage, default 540), BERTFUSE_CACHE (the kernel
# cache in use; default $GPU_RUN_WORK/cuda-cache), BERTFUSE_OFFLINE (where cuda-cache.tar.xz is; default
# .offline), GPU_RUN_PEER_ARGS (arguments for torch_bert.py, e.g. "--precision fp16 --impl eager").
# The device tool allows 10 minutes a call: run the stages in groups (--stages), and put the results file
# each call brings back into bench/results/ before the next, which merges into it.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command_line="bench/gpu_run.sh $*"
small=0
stages="check,bert-base,bench,profile,peers"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --small) small=1 ;;
    --stages) stages="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "bench/gpu_run.sh: unknown argument $1 (see the header of bench/gpu_run.sh)" >&2; exit 1 ;;
  esac
  shift
done

work=${GPU_RUN_WORK:-/tmp/bertfuse-gpu-run}
mkdir -p "$work"
rm -f "$work"/stages.jsonl
limit=${GPU_RUN_TIMEOUT:-540}

# Deno and node_modules from the bundle when this machine has none.
if ! command -v deno >/dev/null 2>&1; then
  if [ -f .offline/activate.sh ]; then
    # shellcheck disable=SC1091
    . .offline/activate.sh
  else
    echo "bench/gpu_run.sh: no deno on PATH and no .offline/activate.sh (run bench/gpu_pack.sh where there is a network)" >&2
    exit 1
  fi
fi
# The packed kernel cache, copied so a run never alters the bundle.
export BERTFUSE_CACHE=${BERTFUSE_CACHE:-$work/cuda-cache}
mkdir -p "$BERTFUSE_CACHE"
offline=${BERTFUSE_OFFLINE:-.offline}
if [ -f "$offline/cuda-cache.tar.xz" ]; then
  xz -dc "$offline/cuda-cache.tar.xz" | tar -xf - -C "$BERTFUSE_CACHE" --strip-components=1 --skip-old-files
fi
cached_before=$(find "$BERTFUSE_CACHE" -name '*.cubin' | wc -l)

device=${GPU_RUN_DEVICE:-}
if [ -z "$device" ] && command -v nvidia-smi >/dev/null 2>&1; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
fi
device=${device:-unknown-gpu}
slug=$(echo "$device" | tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
date=$(date -u +%F)
result=${out:-bench/results/$date-$slug.json}
echo "gpu_run: $device, $date, stages $stages, results $result, kernel cache $BERTFUSE_CACHE ($cached_before CUBINs)"

# stage NAME CMD...: runs CMD under the time limit, its output in $work/NAME.log, one JSON line of status.
stage() {
  local name=$1
  shift
  local t0 t1 rc
  echo "== $name: $*"
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" > >(tee "$work/$name.log") 2>&1
  rc=$?
  t1=$(date +%s.%N)
  python3 -c 'import json,sys; print(json.dumps({"stage": sys.argv[1], "command": sys.argv[2], "exit_code": int(sys.argv[3]), "seconds": round(float(sys.argv[5]) - float(sys.argv[4]), 1)}))' \
    "$name" "$*" "$rc" "$t0" "$t1" >>"$work/stages.jsonl"
  [ $rc = 0 ] && echo "== $name: ok" || echo "== $name: FAILED (exit $rc; timeout is 124)"
  return 0
}
want() { case ",$stages," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

if [ $small = 1 ]; then
  large=models/bert-tiny.ts batch=2 seq=16 preds=4
  check_args=(--dtypes f32 --only "^(LayerNorm|Softmax)") bench_args=(--rounds 1 --steps-per-round 1 --infer-batch-size 2)
  base_args=(--small)
  peer_args=(--device cpu --tiny --what train)
else
  large=models/bert-large.ts batch=64 seq=128 preds=20
  check_args=() bench_args=()
  base_args=()
  # shellcheck disable=SC2206
  peer_args=(${GPU_RUN_PEER_ARGS:-})
fi
shape=(--batch-size "$batch" --seq-len "$seq" --max-predictions "$preds")
# Deno scripts run with --node-modules-dir=manual: none of them imports an npm package, and so Deno neither
# installs node_modules (no network) nor needs them carried (deno task would install every package first).
deno_run=(deno run --node-modules-dir=manual -A)

want check && stage check "${deno_run[@]}" bench/gpu_check.ts --json "$work/check.json" "${check_args[@]}"
if want bert-base; then
  rm -rf "$work/bert-base" "$work/bert-base.json"
  stage bert-base-make python3 bench/peers/bert_base_check.py make "$work/bert-base" "${base_args[@]}"
  stage bert-base-infer "${deno_run[@]}" cli/infer.ts --backend cuda --checkpoint "$work/bert-base/checkpoint" \
    --input "$work/bert-base/inputs.jsonl" --output "$work/bert-base/ours.safetensors"
  stage bert-base-compare python3 bench/peers/bert_base_check.py compare "$work/bert-base"
fi
want bench && stage bench "${deno_run[@]}" bench/bert.ts --backend cuda --model "$large" --precision fp16 "${shape[@]}" \
  "${bench_args[@]}" --json "$work/bench.json"
if want profile; then
  rm -rf "$work/compiled"
  stage profile "${deno_run[@]}" bench/gpu_profile.ts --model "$large" --precision fp16 "${shape[@]}" --json "$work/timings.json"
  stage cost-model "${deno_run[@]}" cli/compile.ts "$large" --mode train --precision fp16 --target cuda "${shape[@]}" \
    --out "$work/compiled" --summary "$work/compile-summary.json" --measured "$work/timings.json"
fi
want peers && stage peers bash -c 'python3 bench/peers/torch_bert.py "$@" > "'"$work"'/peers.jsonl"' peers "${peer_args[@]}"

mkdir -p "$(dirname "$result")"
cached_after=$(find "$BERTFUSE_CACHE" -name '*.cubin' | wc -l)
python3 - "$work" "$result" "$device" "$date" "$command_line" "$cached_before" "$cached_after" <<'PY'
import json, os, sys
work, result, device, date, command, cached, cached_after = sys.argv[1:8]
def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def tail(name, n=15):
    try:
        with open(os.path.join(work, name + ".log"), errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []
prior = {}
if os.path.exists(result):
    try:
        prior = json.load(open(result))
    except ValueError:
        prior = {}
stages = {s["stage"]: s for s in prior.get("stages", [])}
for line in open(os.path.join(work, "stages.jsonl")):
    s = json.loads(line)
    s["ok"] = s["exit_code"] == 0
    s["log_tail"] = tail(s["stage"])
    stages[s["stage"]] = s
out = dict(prior, device=device, date=date, command=command, stages=list(stages.values()),
           kernel_cache_entries_at_start=int(cached), kernel_cache_entries_at_end=int(cached_after))
ran = {s["stage"] for s in map(json.loads, open(os.path.join(work, "stages.jsonl")))}
check = load("check.json")
if "check" in ran and check:
    out["check"] = {"device": check.get("device"), "passed": sum(c["ok"] for c in check["checks"]),
                    "total": len(check["checks"]), "failed": [c for c in check["checks"] if not c["ok"]]}
if "bert-base-compare" in ran:
    lines = [l for l in tail("bert-base-compare", 50) if l.startswith("{")]
    out["bert_base"] = json.loads(lines[-1]) if lines else None
cases = [c for c in prior.get("cases", []) if not (("bench" in ran and c.get("impl", "").startswith("bertfuse"))
                                               or ("peers" in ran and c.get("impl", "").startswith("torch")))]
bench = load("bench.json")
if "bench" in ran and bench:
    cases += bench["cases"]
    out["bench_device"] = bench.get("device")
if "peers" in ran and os.path.exists(os.path.join(work, "peers.jsonl")):
    cases += [json.loads(l) for l in open(os.path.join(work, "peers.jsonl")) if l.startswith("{")]
out["cases"] = cases
timings, summary = load("timings.json"), load("compile-summary.json")
if "profile" in ran:
    out["cost_model"] = {"predicted_step_ms": summary and summary.get("predicted_step_ms"),
                         "predicted_seq_per_s": summary and summary.get("predicted_seq_per_s"),
                         "gemm_flops": summary and summary.get("gemm_flops"),
                         "gemm_flops_library": summary and summary.get("gemm_flops_library"),
                         "measured_step_ms": timings and timings.get("step_ms"),
                         "measured_kernel_ms": timings and round(sum(timings["kernels"].values()), 4),
                         "report": result[:-len(".json")] + "-report.md" if summary else None}
with open(result, "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
print(f"gpu_run: wrote {result}; {int(cached_after) - int(cached)} kernels compiled by NVRTC during the run "
      f"({cached} were in the cache at the start)")
for s in out["stages"]:
    print(f"  {s['stage']:<18} {'ok' if s['ok'] else 'FAILED exit ' + str(s['exit_code']):<16} {s['seconds']:>7.1f} s")
for c in cases:
    print(f"  {c['name']:<36} {c['impl']:<18} {c['seq_per_s']:>10.1f} seq/s {c['ms']:>9.2f} ms")
PY
if [ -f "$work/compiled/report.md" ] && want profile; then cp "$work/compiled/report.md" "${result%.json}-report.md"; fi
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  # The device tool brings back at most 8 files: the results, the report and one archive of the logs.
  cp "$result" "$OUT"/
  [ -f "${result%.json}-report.md" ] && cp "${result%.json}-report.md" "$OUT"/
  (cd "$work" && tar -czf "$OUT/gpu-run-logs.tgz" ./*.log ./*.json 2>/dev/null)
fi
exit 0
