#!/usr/bin/env bash
# Packs .offline/ for bench/gpu_run.sh, here, where there is a network: Deno (xz) and node_modules through
# ../shared/tools/offline-bundle.sh (or $OFFLINE_BUNDLE), then a CUDA kernel cache for sm_90 made by
# bench/gpu_precompile.ts (every kernel gpu_run.sh compiles), as .offline/cuda-cache.tar.xz.
#
#   bench/gpu_pack.sh [--small] [--no-cache] [--cache-only] [--keep-node-modules]
#
# NVRTC is looked for as the runtime looks for it (LD_LIBRARY_PATH, the toolkit, Python wheels). Where there
# is none but nvcc is installed, bench/nvrtc_nvcc_shim.c (NVRTC's interface over nvcc) is built and used for
# the precompile only. The cache key holds the NVRTC version and a hash of the CUDA headers' contents, so the
# entries hit on the GPU when its NVRTC has the same major.minor and its headers are the same files; the run
# reports how many kernels it still had to compile; .offline/cuda-cache.json records the key's inputs, which
# bench/gpu_probe.ts compares on the GPU (a miss there is compiled by 16 parallel shards). --small: gpu_run.sh --small's kernels (a rehearsal);
# --cache-only: no Deno bundle. BERTFUSE_OFFLINE: the folder to pack into (default .offline).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
small=()
cache=1
bundle_too=1
keep_modules=0
for a in "$@"; do
  case "$a" in
    --small) small=(--small) ;;
    --no-cache) cache=0 ;;
    --cache-only) bundle_too=0 ;;
    --keep-node-modules) keep_modules=1 ;;
    *) echo "bench/gpu_pack.sh: unknown argument $a (--small, --no-cache, --cache-only, --keep-node-modules)" >&2
      exit 1 ;;
  esac
done
offline=${BERTFUSE_OFFLINE:-.offline}
if [ $bundle_too = 1 ]; then
  bundle=${OFFLINE_BUNDLE:-$root/../shared/tools/offline-bundle.sh}
  [ -f "$bundle" ] || { echo "bench/gpu_pack.sh: $bundle not found (set OFFLINE_BUNDLE)" >&2; exit 1; }
  mkdir -p "$(git rev-parse --git-dir)/info" # the bundle adds /.offline/ to .git/info/exclude
  # gpu_run.sh runs Deno with --node-modules-dir=manual and imports no npm package: node_modules need not
  # travel (they are most of the bundle, over the device tool's 64 MiB with Deno and the repository), so
  # they are not even compressed (that took 20 minutes) unless asked for.
  if [ $keep_modules = 1 ]; then bash "$bundle"; else bash "$bundle" --deno-only; fi
fi
[ $cache = 1 ] || exit 0
mkdir -p "$offline"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
precompile() {
  deno run --node-modules-dir=manual -A bench/gpu_precompile.ts "${small[@]}" --cache "$work/cuda-cache" \
    --manifest "$work/cuda-cache.json"
}
if ! precompile 2>"$work/err"; then
  cat "$work/err" >&2
  if grep -q "NVRTC" "$work/err" && command -v nvcc >/dev/null 2>&1; then
    major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    echo "gpu_pack: no NVRTC here; compiling with nvcc $major through bench/nvrtc_nvcc_shim.c"
    mkdir -p "$work/shim"
    gcc -shared -fPIC -O1 -o "$work/shim/libnvrtc.so.$major" bench/nvrtc_nvcc_shim.c
    LD_LIBRARY_PATH="$work/shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" precompile
  else
    echo "gpu_pack: no kernel cache packed (no NVRTC and no nvcc here); the GPU run compiles every kernel" >&2
    exit 1
  fi
fi
tar -C "$work" -cf - cuda-cache | xz -T0 -6 >"$offline/cuda-cache.tar.xz"
# What the entries' keys depend on (NVRTC version, header identity): bench/gpu_probe.ts compares it there.
cp "$work/cuda-cache.json" "$offline/cuda-cache.json"
du -sh "$offline"/* | sed 's/^/  /'
echo "gpu_pack: $offline ready; carry it with the repository and run bench/gpu_run.sh there"
