#!/usr/bin/env bash
# The CUDA checks, for a machine with an NVIDIA GPU, in two steps:
#
#   scripts/gpu-check.sh build   # on the build machine: test + bench binaries into .gpu/
#   scripts/gpu-check.sh run     # on the GPU machine (with .gpu/ carried there): runs every
#                                # test binary (the CUDA variants must run, not skip) and
#                                # `bench forward` on cuda:0 for f32/f16/bf16, one table out
#
# Nothing is built or installed on the GPU machine; CUDA's libraries (cuBLAS, NVRTC) are
# looked up where its Python packages or a toolkit keep them. Fits well inside 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=.gpu

build() {
  rm -rf "$stage" && mkdir -p "$stage/tests"
  cargo build --release --quiet
  cp target/release/tandem "$stage/"
  cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' |
    while read -r exe; do cp "$exe" "$stage/tests/"; done
  for dtype in f32 f16 bf16; do
    python3 scripts/make_mlp.py --dims 784,1024,1024,10 --dtype "$dtype" --seed 1 \
      "$stage/mlp-$dtype.safetensors"
  done
  du -sh "$stage"
}

cuda_libs() {
  local dirs=""
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null || continue
    dirs+=$("$py" - <<'PY' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
seen = set()
for root in roots:
    for lib in glob.glob(os.path.join(root, "nvidia", "*", "lib")) + glob.glob(os.path.join(root, "nvidia", "cu13", "lib")):
        if lib not in seen:
            seen.add(lib); sys.stdout.write(":" + lib)
PY
)
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/nvidia/lib64; do
    [ -d "$d" ] && dirs+=":$d"
  done
  echo "${dirs#:}"
}

run() {
  [ -d "$stage" ] || { echo "no $stage/: run 'scripts/gpu-check.sh build' first and carry it" >&2; exit 2; }
  export LD_LIBRARY_PATH="$(cuda_libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TANDEM_REQUIRE_NVRTC=1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  local out=${OUT:-$stage/out}
  mkdir -p "$out"
  local failed=0 skipped=0
  for t in "$stage"/tests/*; do
    if ! "$t" --test-threads=1 >"$out/$(basename "$t").log" 2>&1; then
      failed=1; echo "FAILED: $(basename "$t")"; tail -30 "$out/$(basename "$t").log"
    fi
    skipped=$((skipped + $(grep -c '^SKIPPED' "$out/$(basename "$t").log" || true)))
  done
  grep -h '^SKIPPED' "$out"/*.log || true
  echo "tests: $( (grep -h '^test result' "$out"/*.log || true) | awk '{p+=$4; f+=$6} END {print p" passed, "f" failed"}'), $skipped skipped"
  for dtype in f32 f16 bf16; do
    "$stage/tandem" bench forward --model "$stage/mlp-$dtype.safetensors" --device cuda:0 \
      --batch 1,8,32,128,512,2048 --seconds 1 --json "$out/forward-cuda-$dtype.json"
  done
  "$stage/tandem" bench forward --model "$stage/mlp-f32.safetensors" --device cpu \
    --batch 1,128 --seconds 1 --json "$out/forward-cpu-f32.json"
  [ "$failed" = 0 ] && [ "$skipped" = 0 ] || { echo "GPU CHECK FAILED (failures or skipped CUDA tests)"; exit 1; }
  echo "GPU CHECK PASSED"
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
