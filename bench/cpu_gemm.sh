#!/bin/sh
# deno task bench:gemm [OPENBLAS_PATH [THREADS [ONEDNN_PATH]]]: builds bench/cpu_gemm.c with the CPU backend's pool and
# sgemm (runtime/cpu/pool.c, sgemm.c, as runtime/cpu/pool.ts joins them) and the kernels' flags, then runs it.
# Benchmark with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE as on the user's machine (unset them for this command).
set -e
case "$1" in -h | --help)
  sed -n '2,4p' "$0" | cut -c3-
  exit 0
  ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/bertfuse-gemm-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cat "$root/runtime/cpu/pool.c" "$root/runtime/cpu/sgemm.c" > "$dir/pool.c"
"${CC:-cc}" -O3 -march=native -fopenmp-simd -fno-math-errno -std=gnu11 -pthread \
  -o "$dir/cpu_gemm" "$root/bench/cpu_gemm.c" "$dir/pool.c" -ldl
"$dir/cpu_gemm" "${1:-libopenblas.so.0}" "${2:-$(nproc)}" "${3:-libdnnl.so.2}"
