#!/usr/bin/env bash
# One budgeted command for a GPU lease (issue 24): on a bare GPU machine with no network, from the repository
# root, with .offline/ packed beforehand by bench/gpu_pack.sh (Deno, a CUDA kernel cache and its manifest):
#
#   bench/gpu_run.sh [--small] [--stages LIST] [--out FILE]
#
# Stages, in order of value; each gets the lesser of its own cap and the time left before the deadline
# (GPU_RUN_DEADLINE seconds after the start, default 540), is skipped when under 20 s are left, prints one
# summary line when it ends, and a failure never stops the stages after it:
#   probe        GPU, driver, NVRTC / cuBLASLt / NCCL paths and versions, packed kernel cache hit or miss
#   precompile   the BERT training step's kernels compiled by NVRTC in 16 parallel shards (fast when the
#                packed cache hits); the other graphs' kernels go on compiling in the background
#   train        bench/gpu_train.ts: BERT-large fp16 b64 s128 fused: the loss at init, 20 steps on one batch,
#                seq/s, per-kernel event times; then unfused from the same feeds: fused = unfused, and seq/s
#   check        bench/gpu_check.ts: every fusion case on CUDA against the reference (f32, f16, bf16), one
#                BERT layer with graphs on and off, cuBLASLt GEMMs and epilogues against the CPU
#   peer         PyTorch eager fp16 on the same shapes (bench/peers/torch_bert.py)
#   infer        bench/bert.ts --mode infer: BERT-large fp16 inference at batch 64 and 1, fused and unfused
#   bert-base    a random BERT-base through deno task infer --backend cuda against transformers in float64
#   compile      torch.compile fp16 (cold compiles: minutes), last, so it is the first thing cut
# After every stage the merged results (bench/results/<date>-<device>.json, the table in ...-summary.txt, the
# logs in gpu-run-logs.tgz) are copied to $OUT when that is set (the device tool's output folder), so a
# command killed at any moment returns every stage that finished. The cost-model merge (deno task compile
# --measured with the train stage's timings) runs afterwards on the CPU: docs/cuda.md says how.
#
# --small: BERT-tiny shapes everywhere, for the offline rehearsal (tests/nvcc/gpu_run_rehearsal.test.ts runs it
# with the fake driver of tests/nvcc/cuda_runtime_fake.test.ts on LD_LIBRARY_PATH).
# Environment: GPU_RUN_WORK (scratch folder, default /tmp/bertfuse-gpu-run), GPU_RUN_DEVICE (device name when
# nvidia-smi is absent), GPU_RUN_DEADLINE (seconds, default 540), GPU_RUN_SHARDS (parallel NVRTC processes,
# default the core count, at most 16), BERTFUSE_CACHE (the kernel cache, CUBINs in its cuda/; default $GPU_RUN_WORK/cache),
# BERTFUSE_OFFLINE (where cuda-cache.tar.xz is; default .offline).
set -u
start=$(date +%s)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command_line="bench/gpu_run.sh $*"
small=0
stages="probe,precompile,train,check,peer,infer,bert-base,compile"
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
deadline=$((start + ${GPU_RUN_DEADLINE:-540}))
work=${GPU_RUN_WORK:-/tmp/bertfuse-gpu-run}
mkdir -p "$work"
rm -f "$work"/stages.jsonl "$work"/*.log

if ! command -v deno >/dev/null 2>&1; then
  if [ -f .offline/activate.sh ]; then
    # shellcheck disable=SC1091
    . .offline/activate.sh
  else
    echo "bench/gpu_run.sh: no deno on PATH and no .offline/activate.sh (run bench/gpu_pack.sh first)" >&2
    exit 1
  fi
fi
export BERTFUSE_CACHE=${BERTFUSE_CACHE:-$work/cache}
cubins=$BERTFUSE_CACHE/cuda
mkdir -p "$cubins"
offline=${BERTFUSE_OFFLINE:-.offline}
if [ -f "$offline/cuda-cache.tar.xz" ]; then
  xz -dc "$offline/cuda-cache.tar.xz" | tar -xf - -C "$cubins" --strip-components=1 --skip-old-files --no-same-owner
fi
cached_before=$(find "$cubins" -name '*.cubin' | wc -l)

device=${GPU_RUN_DEVICE:-}
if [ -z "$device" ] && command -v nvidia-smi >/dev/null 2>&1; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
fi
device=${device:-unknown-gpu}
slug=$(echo "$device" | tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
date=$(date -u +%F)
result=${out:-bench/results/$date-$slug.json}
mkdir -p "$(dirname "$result")"
echo "gpu_run: $device, $date, stages $stages, deadline ${GPU_RUN_DEADLINE:-540} s, kernel cache $cached_before CUBINs"

# Merges every stage's files into $result and its -summary.txt, then copies both and the logs to $OUT.
publish() {
  python3 bench/gpu_run_merge.py "$work" "$result" "$device" "$date" "$command_line" "$cached_before" \
    "$(find "$cubins" -name '*.cubin' | wc -l)" >"$work/summary.txt" 2>>"$work/merge.err"
  cp "$work/summary.txt" "${result%.json}-summary.txt" 2>/dev/null
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$result" "${result%.json}-summary.txt" "$OUT"/ 2>/dev/null
    (cd "$work" && tar -czf "$OUT/gpu-run-logs.tgz.tmp" ./*.log ./*.json ./*.err 2>/dev/null &&
      mv "$OUT/gpu-run-logs.tgz.tmp" "$OUT/gpu-run-logs.tgz")
  fi
}

# stage NAME CAP CMD...: runs CMD for at most CAP seconds (or what is left before the deadline), output in
# $work/NAME.log, one JSON line of status, one summary line, then publish.
stage() {
  local name=$1 cap=$2
  shift 2
  local now left t0 t1 rc status
  now=$(date +%s)
  left=$((deadline - now - 10))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 20 ]; then
    echo "== $name: SKIPPED (${left} s left before the deadline)"
    python3 -c 'import json,sys; print(json.dumps({"stage": sys.argv[1], "exit_code": None, "skipped": True, "seconds": 0}))' \
      "$name" >>"$work/stages.jsonl"
    return 0
  fi
  echo "== $name (cap $cap s, at $((now - start)) s): $*"
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$cap" "$@" >"$work/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  python3 -c 'import json,sys; print(json.dumps({"stage": sys.argv[1], "command": sys.argv[2], "exit_code": int(sys.argv[3]), "seconds": round(float(sys.argv[5]) - float(sys.argv[4]), 1)}))' \
    "$name" "$*" "$rc" "$t0" "$t1" >>"$work/stages.jsonl"
  case $rc in 0) status=ok ;; 124 | 137) status="TIMED OUT after $cap s" ;; *) status="FAILED (exit $rc)" ;; esac
  # The stage's last meaningful line is its summary (each script ends with one).
  echo "== $name: $status in $(python3 -c "print(round($t1 - $t0, 1))") s; $(grep -v '^\s*$' "$work/$name.log" | tail -1 | cut -c1-300)"
  publish
  return 0
}
want() { case ",$stages," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

if [ $small = 1 ]; then
  model=models/bert-tiny.ts batch=2 seq=16 preds=4 infer_batch=2
  small_flag=(--small) check_args=(--dtypes f32 --only "^(LayerNorm|Softmax)") train_args=(--steps 3 --rounds 1 --steps-per-round 1 --iterations 1)
  bench_args=(--rounds 1 --steps-per-round 1) peer_args=(--device cpu --tiny)
else
  model=models/bert-large.ts batch=64 seq=128 preds=20 infer_batch=64
  small_flag=() check_args=() train_args=() bench_args=() peer_args=()
fi
shape=(--batch-size "$batch" --seq-len "$seq" --max-predictions "$preds")
cores=$(nproc 2>/dev/null || echo 4)
shards=${GPU_RUN_SHARDS:-$((cores > 16 ? 16 : cores))}
# Deno runs with --node-modules-dir=manual: none of these scripts imports an npm package, so Deno neither
# installs node_modules (no network there) nor needs them carried.
deno_run=(deno run --node-modules-dir=manual -A)
precompile() { # precompile LABEL-FILTER...: every shard in parallel, waits for all
  local pids=() i
  for ((i = 0; i < shards; i++)); do
    "${deno_run[@]}" bench/gpu_precompile.ts "${small_flag[@]}" --cache "$cubins" --shard "$i/$shards" "$@" \
      >"$work/precompile-$i.out" 2>&1 &
    pids+=($!)
  done
  local bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  echo "precompile $*: $shards shards, $bad failed; $(find "$cubins" -name '*.cubin' | wc -l) kernels in the cache"
  [ $bad = 0 ]
}

want probe && stage probe 60 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1; nvcc --version 2>&1 | tail -1; "$@"' \
  probe "${deno_run[@]}" bench/gpu_probe.ts --json "$work/probe.json" --manifest "$offline/cuda-cache.json"
if want precompile; then
  stage precompile 150 bash -c "$(declare -f precompile); $(declare -p deno_run small_flag shards work cubins); precompile --only 'train'"
  # The rest (the check battery's cases, inference, BERT-base) compiles while the GPU trains; niced so the
  # train stage's own host work comes first.
  (precompile --skip 'train' >"$work/precompile-rest.log" 2>&1 &)
fi
want train && stage train 240 "${deno_run[@]}" bench/gpu_train.ts --model "$model" --precision fp16 "${shape[@]}" \
  "${train_args[@]}" --json "$work/train.json" --timings "$work/timings.json"
want check && stage check 120 "${deno_run[@]}" bench/gpu_check.ts --json "$work/check.json" "${check_args[@]}"
want peer && stage peer 90 bash -c 'python3 bench/peers/torch_bert.py "$@" >"'"$work"'/peer.jsonl"; r=$?; tail -3 "'"$work"'/peer.jsonl"; exit $r' \
  peer "${peer_args[@]}" --precision fp16 --impl eager
want infer && stage infer 120 "${deno_run[@]}" bench/bert.ts --backend cuda --model "$model" --precision fp16 --mode infer \
  "${shape[@]}" --infer-batch-size "$infer_batch" "${bench_args[@]}" --json "$work/infer.json"
if want bert-base; then
  rm -rf "$work/bert-base"
  stage bert-base 90 bash -c 'set -e; python3 bench/peers/bert_base_check.py make "$1" "${@:2}"
    deno run --node-modules-dir=manual -A cli/infer.ts --backend cuda --checkpoint "$1/checkpoint" --input "$1/inputs.jsonl" \
      --output "$1/ours.safetensors" >/dev/null
    python3 bench/peers/bert_base_check.py compare "$1"' bert-base "$work/bert-base" "${small_flag[@]}"
fi
want compile && stage compile 240 bash -c 'python3 bench/peers/torch_bert.py "$@" >"'"$work"'/compile.jsonl"; r=$?; tail -3 "'"$work"'/compile.jsonl"; exit $r' \
  compile "${peer_args[@]}" --precision fp16 --impl compile
publish
cat "$work/summary.txt"
echo "gpu_run: done in $(($(date +%s) - start)) s; results in $result"
exit 0
