#!/usr/bin/env bash
# The CUDA checks, for a machine with an NVIDIA GPU, in two steps:
#
#   scripts/gpu-check.sh build   # on the build machine: stripped test + bench binaries into
#                                # .gpu/ (under the device tool's 64 MiB)
#   scripts/gpu-check.sh run     # on the GPU machine (with .gpu/ carried there): runs every
#                                # test binary that holds CUDA variants (they must run, not
#                                # skip), `bench forward` on cuda:0 for f32/f16/bf16, then the
#                                # server on cuda:0 end to end: a goodput sweep at p99 <= 10 ms
#                                # and `bench coloc` with a CUDA trainer beside it
#   scripts/gpu-check.sh coloc   # on the GPU machine: `bench coloc` with a trainer big
#                                # enough to contend for the GPU (about 3 minutes)
#
# Nothing is built or installed on the GPU machine; CUDA's libraries (cuBLAS, NVRTC) are
# looked up where its Python packages or a toolkit keep them. Fits well inside 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=.gpu
# Test binaries with CUDA variants (or CUDA code paths under test): the crates' own unit
# tests and these integration tests.
cuda_tests='^(kernels|models|trainer|nvrtc|numerics|training|digits|cuda|coloc)-[0-9a-f]+$'

build() {
  rm -rf "$stage" && mkdir -p "$stage/tests"
  cargo build --release --quiet
  strip -o "$stage/tandem" target/release/tandem
  cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' |
    while read -r exe; do
      if [[ $(basename "$exe") =~ $cuda_tests ]]; then strip -o "$stage/tests/$(basename "$exe")" "$exe"; fi
    done
  # The test binaries find the tandem binary and the repository's files by the absolute
  # paths they were built with; `run` recreates them.
  pwd >"$stage/root"
  for dtype in f32 f16 bf16; do
    python3 scripts/make_mlp.py --dims 784,1024,1024,10 --dtype "$dtype" --seed 1 \
      "$stage/mlp-$dtype.safetensors"
  done
  du -sh "$stage"; ls "$stage/tests"
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

# Serves .gpu/mlp-f32 on cuda:0 at 127.0.0.1:$1 in the background; waits until ready.
serve_on_gpu() {
  "$stage/tandem" serve --listen "127.0.0.1:$1" --device cuda:0 --p99-ms 10 \
    --model "mlp=$stage/mlp-f32.safetensors" --coloc-socket "/tmp/tandem-gpu-$1.sock" \
    2>"$out/serve-$1.log" &
  server_pid=$!
  for _ in $(seq 100); do
    grep -q "serving ready=true" "$out/serve-$1.log" 2>/dev/null && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "the server on cuda:0 did not become ready"; tail -20 "$out/serve-$1.log"; return 1
}

setup() {
  [ -d "$stage" ] || { echo "no $stage/: run 'scripts/gpu-check.sh build' first and carry it" >&2; exit 2; }
  export LD_LIBRARY_PATH="$(cuda_libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TANDEM_REQUIRE_NVRTC=1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  out=${OUT:-$stage/out}
  mkdir -p "$out"
  # Where the test binaries look for the tandem binary and the repository's files.
  local root; root=$(cat "$stage/root")
  if [ "$root" != "$PWD" ] && [ ! -e "$root" ]; then mkdir -p "$(dirname "$root")"; ln -s "$PWD" "$root"; fi
  mkdir -p target/release && cp "$stage/tandem" target/release/tandem
  mkdir -p /tmp/gpu-repo/mlp/1 && cp "$stage/mlp-f32.safetensors" /tmp/gpu-repo/mlp/1/model.safetensors
}

# Co-location on the GPU with a trainer big enough to contend for it (~100M parameters,
# 1,024-row steps): serving at RATE (default 10,000 req/s) alone, beside it unmanaged, and
# managed, on constant and burst load.
coloc() {
  setup
  for shape in constant burst; do
    timeout 150 "$stage/tandem" bench coloc --device cuda:0 --model-repository /tmp/gpu-repo \
      --model mlp --rate "${RATE:-10000}" --shape "$shape" --budget-ms "${BUDGET:-10}" --rounds "${ROUNDS:-3}" \
      --duration 5 --train-dims 4096,8192,8192,10 --train-batch 1024 \
      --json "$out/coloc-heavy-$shape-${BUDGET:-10}ms.json" | tail -8
  done
}

run() {
  setup
  # The test binaries side by side (16 cores; the GPU is shared, as in production).
  local failed=0 skipped=0 pids=()
  for t in "$stage"/tests/*; do
    timeout 300 "$t" >"$out/$(basename "$t").log" 2>&1 &
    pids+=("$!:$(basename "$t")")
  done
  for p in "${pids[@]}"; do
    if ! wait "${p%%:*}"; then
      failed=1; echo "FAILED: ${p#*:}"; grep -A12 "panicked\|^failures:" "$out/${p#*:}.log" | head -60
    fi
  done
  skipped=$(cat "$out"/*.log | grep -c '^SKIPPED' || true)
  grep -h '^SKIPPED' "$out"/*.log || true
  echo "tests: $( (grep -h '^test result' "$out"/*.log || true) | awk '{p+=$4; f+=$6} END {print p" passed, "f" failed"}'), $skipped skipped"

  for dtype in f32 f16 bf16; do
    timeout 60 "$stage/tandem" bench forward --model "$stage/mlp-$dtype.safetensors" --device cuda:0 \
      --batch 1,8,32,128,512,2048 --seconds 1 --json "$out/forward-cuda-$dtype.json" || failed=1
  done
  timeout 30 "$stage/tandem" bench forward --model "$stage/mlp-f32.safetensors" --device cpu \
    --batch 1,128 --seconds 1 --json "$out/forward-cpu-f32.json" || true

  # End to end on the GPU: the highest constant rate whose p99 stays within 10 ms, then
  # co-location at half of it (constant and burst) with a CUDA trainer beside the server.
  if serve_on_gpu 18000; then
    timeout 120 "$stage/tandem" bench sweep --url http://127.0.0.1:18000 --model mlp \
      --budget-ms 10 --duration 3 --min-rate 1000 --max-rate 100000 --precision 0.1 \
      --cooldown 1 --threads 4 --connections 256 --json "$out/sweep-cuda.json" | tail -4 || failed=1
    kill "$server_pid" 2>/dev/null || true
  else
    failed=1
  fi
  local best
  best=$(python3 -c "import json; print(int(json.load(open('$out/sweep-cuda.json'))['best_goodput_rps'] or 2000))" 2>/dev/null || echo 2000)
  for shape in constant burst; do
    timeout 90 "$stage/tandem" bench coloc --device cuda:0 --model-repository /tmp/gpu-repo \
      --model mlp --rate $((best / 2 < 20000 ? best / 2 : 20000)) --shape "$shape" --budget-ms 10 --rounds 1 --duration 6 \
      --json "$out/coloc-cuda-$shape.json" | tail -7 || failed=1
  done
  [ "$failed" = 0 ] && [ "$skipped" = 0 ] || { echo "GPU CHECK FAILED (failures or skipped CUDA tests)"; exit 1; }
  echo "GPU CHECK PASSED"
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  coloc) coloc ;;
  *) echo "usage: $0 build|run|coloc" >&2; exit 2 ;;
esac
