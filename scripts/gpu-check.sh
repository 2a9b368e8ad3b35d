#!/usr/bin/env bash
# The CUDA checks, for a machine with an NVIDIA GPU, in two steps:
#
#   scripts/gpu-check.sh build   # on the build machine: stripped test and bench binaries
#                                # and the models they load into .gpu/ (carried there)
#   scripts/gpu-check.sh run     # on the GPU machine: one command of at most 6 minutes
#   scripts/gpu-check.sh coloc   # on the GPU machine: the co-location scenario of
#                                # docs/performance.md's "On a GPU"
#                                # (10,000 req/s, 2 ms budget, a ~100M-parameter trainer)
#
# `run`'s steps, each under its own timeout, inside a 345 s deadline:
#   env        library paths and versions (NVRTC, cuBLAS, driver), the GPU, its compute mode
#   tests      the CUDA tests of every binary that has them (test names holding "cuda"; the
#              CPU co-location tests, whose timing assumes the build machine's cores, are
#              not run), in parallel; any SKIPPED line fails the check. The encoder tests
#              compare with a numpy reference (the first python3 here that has numpy);
#              all-MiniLM-L6-v2's (90 MB, past what `run` can carry) are left out
#   sanitizer  compute-sanitizer --tool memcheck over the numeric and training CUDA tests
#   forward    `bench forward` on cuda:0 for f32, f16 and bf16, and on the CPU for scale
#   serve      the server on cuda:0: a goodput sweep at p99 <= 10 ms
#   coloc      `bench coloc` beside a CUDA trainer, one round
#
# Every step runs under `timeout` (which signals its whole process group, so a server a
# step started goes with it) and under PR_SET_PDEATHSIG (`setpriv --pdeathsig KILL`, or a
# python3 ctypes prctl wrapper where setpriv lacks it), so nothing outlives this script if
# it is killed itself. Everything lands in $OUT as one archive (gpu-check.tar.gz: every log
# and JSON) and one summary.json: the device tool returns only a few files.
#
# Nothing is built or installed on the GPU machine; CUDA's libraries (cuBLAS, NVRTC) are
# looked up where its Python packages or a toolkit keep them.
set -uo pipefail
cd "$(dirname "$0")/.."
self=$PWD/scripts/gpu-check.sh
stage=.gpu

# Test binaries with CUDA tests, and the filter that selects them (empty: all of them).
declare -A cuda_tests=(
  [kernels]=cuda [nvrtc]="" [numerics]=cuda [training]=cuda [encoder]=cuda
  [digits]=cuda [cuda]=cuda [coloc]=on_cuda
)
# Tests left out on the GPU machine: all-MiniLM-L6-v2's folder does not travel there.
declare -A cuda_skips=([encoder]=minilm)
# The binaries compute-sanitizer checks: numerics and training.
sanitized=(numerics training)

build() {
  set -e
  rm -rf "$stage" && mkdir -p "$stage/tests"
  cargo build --release --quiet -p tandem -p tandem-bench
  local target
  target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  strip -o "$stage/tandem" "$target/release/tandem"
  strip -o "$stage/tandem-bench" "$target/release/tandem-bench"
  cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' |
    while read -r exe; do
      local name; name=$(basename "$exe"); name=${name%-*}
      if [[ -v cuda_tests[$name] ]]; then strip -o "$stage/tests/$name" "$exe"; fi
    done
  # The test binaries find the tandem binary and the repository's files by the absolute
  # paths they were built with; `run` recreates them.
  pwd >"$stage/root"
  echo "$target" >"$stage/target"
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
    for lib in glob.glob(os.path.join(root, "nvidia", "*", "lib")):
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

# Runs "$@" so that it gets SIGKILL when this script dies.
pdeath() {
  if [ "$pdeath_kind" = setpriv ]; then
    setpriv --pdeathsig KILL -- "$@"
  else
    python3 -c 'import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
if os.getppid() == 1: sys.exit(137)
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
  fi
}

# step NAME BUDGET CMD...: runs CMD under a timeout of BUDGET seconds (less if the deadline
# is nearer), output in $out/NAME.log; records its status and duration.
step() {
  local name=$1 budget=$2; shift 2
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "$name: skipped, the deadline is near"
    echo "{\"step\": \"$name\", \"rc\": null, \"seconds\": 0, \"skipped\": true}" >>"$out/steps.jsonl"
    return 1
  fi
  [ "$budget" -gt "$left" ] && budget=$left
  local t0=$SECONDS rc
  echo "== $name (up to ${budget}s)"
  # A function of this script runs in a fresh instance of it (`timeout` runs programs).
  if declare -F "$1" >/dev/null; then set -- "$self" __fn "$@"; fi
  pdeath timeout -k 5 "$budget" pdeath "$@" >"$out/$name.log" 2>&1 &
  local pid=$!
  groups+=("$pid")
  wait "$pid"; rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0)), \"timed_out\": $([ $rc = 124 ] || [ $rc = 137 ] && echo true || echo false)}" >>"$out/steps.jsonl"
  echo "   rc $rc in $((SECONDS - t0))s"; tail -3 "$out/$name.log" | sed 's/^/   /'
  return "$rc"
}

# Whatever ends the script, every process group a step started goes (a `timeout` leads its
# own group).
cleanup() {
  for g in "${groups[@]:-}"; do [ -n "$g" ] && kill -KILL -- "-$g" 2>/dev/null; done
  bundle
}

bundle() {
  [ -n "${out:-}" ] && [ -d "$out" ] || return 0
  summarize >"$OUT/summary.json" 2>"$out/summary.err" || true
  cp "$OUT/summary.json" "$out/" 2>/dev/null
  tar -C "$out" -czf "$OUT/gpu-check.tar.gz" . 2>/dev/null || true
}

# One JSON of what the run found: each step's status and time, the tests' counts, the
# sanitizer's error summaries, the libraries, the forward passes' and sweep's headline
# figures, the co-location results.
summarize() {
  python3 - "$out" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
summary = {"steps": [], "tests": {}, "skipped": [], "memcheck": {}}
try:
    with open(os.path.join(out, "steps.jsonl")) as f:
        summary["steps"] = [json.loads(l) for l in f if l.strip()]
except OSError:
    pass
for log in sorted(glob.glob(os.path.join(out, "test-*.log"))):
    name = os.path.basename(log)[5:-4]
    text = open(log, errors="replace").read()
    passed = sum(int(m) for m in re.findall(r"test result: \w+\. (\d+) passed", text))
    failed = sum(int(m) for m in re.findall(r"(\d+) failed", text))
    summary["tests"][name] = {"passed": passed, "failed": failed}
    summary["skipped"] += [l for l in text.splitlines() if l.startswith("SKIPPED")]
for log in glob.glob(os.path.join(out, "memcheck-*.txt")):
    text = open(log, errors="replace").read()
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    summary["memcheck"][os.path.basename(log)[9:-4]] = int(m.group(1)) if m else None
summary["libraries"] = load("libraries.json")
summary["forward"] = {f[8:-5]: load(f) for f in map(os.path.basename, glob.glob(os.path.join(out, "forward-*.json")))}
sweep = load("sweep-cuda.json")
summary["sweep_best_goodput_rps"] = sweep and sweep.get("best_goodput_rps")
summary["coloc"] = {f[:-5]: load(f) for f in map(os.path.basename, glob.glob(os.path.join(out, "coloc-*.json")))}
for name in ("pdeath.txt",):
    try:
        summary[name[:-4]] = open(os.path.join(out, name)).read().strip()
    except OSError:
        pass
summary["verdict"] = load("verdict.json")
print(json.dumps(summary, indent=1))
PY
}

setup() {
  [ -d "$stage" ] || { echo "no $stage/: run 'scripts/gpu-check.sh build' first and carry it" >&2; exit 2; }
  export OUT=${OUT:-$stage/out}
  out=$(mktemp -d /tmp/gpu-check.XXXX)
  mkdir -p "$OUT"
  export out stage
  groups=()
  trap cleanup EXIT
  if setpriv --pdeathsig KILL true 2>/dev/null; then pdeath_kind=setpriv; else pdeath_kind=prctl; fi
  export pdeath_kind
  echo "children die with this script through: $pdeath_kind" | tee "$out/pdeath.txt"
  export LD_LIBRARY_PATH="$(cuda_libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TANDEM_REQUIRE_NVRTC=1
  # The encoder tests' float64 reference needs numpy.
  for py in python3 /opt/torch/.venv/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import numpy' 2>/dev/null; then
      TANDEM_PYTHON=$(command -v "$py"); export TANDEM_PYTHON; break
    fi
  done
  # Where the test binaries look for the tandem binary and the repository's files.
  local root target; root=$(cat "$stage/root"); target=$(cat "$stage/target")
  if [ "$root" != "$PWD" ] && [ ! -e "$root" ]; then mkdir -p "$(dirname "$root")"; ln -s "$PWD" "$root"; fi
  mkdir -p "$target/release" && cp "$stage/tandem" "$stage/tandem-bench" "$target/release/"
  mkdir -p /tmp/gpu-repo/mlp/1 && cp "$stage/mlp-f32.safetensors" /tmp/gpu-repo/mlp/1/model.safetensors
}

# The libraries the binaries will load, where from and which versions; the driver, the GPU
# and its compute mode.
environment() {
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.total,memory.used --format=csv || true
  nvidia-smi -q | grep -iE "MPS|Compute Mode|MIG Mode" -A1 || true
  python3 - <<'PY'
import ctypes, json, os
info = {}
def where(lib):
    with open("/proc/self/maps") as f:
        for line in f:
            if lib in line:
                return line.split()[-1]
def load(name, key, version):
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        info[key] = {"error": str(e)}; return
    entry = {"path": where(name.split(".so")[0] + ".so")}
    try:
        entry["version"] = version(lib)
    except Exception as e:
        entry["version_error"] = str(e)
    info[key] = entry
def nvrtc(lib):
    a, b = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)); return f"{a.value}.{b.value}"
def cublas(lib):
    parts = []
    for prop in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = ctypes.c_int(); lib.cublasGetProperty(prop, ctypes.byref(v)); parts.append(str(v.value))
    return ".".join(parts)
def driver(lib):
    v = ctypes.c_int(); lib.cuDriverGetVersion(ctypes.byref(v)); return f"{v.value // 1000}.{v.value % 1000 // 10}"
load("libnvrtc.so.13", "nvrtc", nvrtc)
load("libcublas.so.13", "cublas", cublas)
load("libcuda.so.1", "driver_api", driver)
print(json.dumps(info, indent=1))
with open(os.path.join(os.environ["out"], "libraries.json"), "w") as f:
    json.dump(info, f)
PY
  command -v compute-sanitizer && compute-sanitizer --version | tail -1 || echo "compute-sanitizer: absent"
}

# The CUDA tests of every binary, side by side (16 cores; the GPU is shared, as in
# production).
tests() {
  local pids=() failed=0
  for t in "$stage"/tests/*; do
    local name; name=$(basename "$t")
    "$t" ${cuda_tests[$name]:+"${cuda_tests[$name]}"} ${cuda_skips[$name]:+--skip "${cuda_skips[$name]}"} \
      --test-threads=4 >"$out/test-$name.log" 2>&1 &
    pids+=("$!:$name")
  done
  for p in "${pids[@]}"; do
    wait "${p%%:*}" || { failed=1; echo "FAILED: ${p#*:}"; grep -A12 "panicked\|^failures:" "$out/test-${p#*:}.log" | head -40; }
  done
  grep -h '^SKIPPED' "$out"/test-*.log && { echo "CUDA tests were skipped"; failed=1; }
  echo "tests: $(grep -h '^test result' "$out"/test-*.log | awk '{p+=$4; f+=$6} END {print p" passed, "f" failed"}')"
  return $failed
}

sanitizer() {
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer: absent on this machine; memcheck not run"
    return 0
  fi
  local failed=0
  for name in "${sanitized[@]}"; do
    [ -x "$stage/tests/$name" ] || continue
    compute-sanitizer --tool memcheck --error-exitcode 86 --log-file "$out/memcheck-$name.txt" \
      "$stage/tests/$name" cuda --test-threads=1 >"$out/memcheck-$name.log" 2>&1 || {
      failed=1; echo "memcheck: $name failed"; tail -20 "$out/memcheck-$name.txt"; }
    grep -h "ERROR SUMMARY" "$out/memcheck-$name.txt" || true
  done
  return $failed
}

forward() {
  local failed=0
  for dtype in f32 f16 bf16; do
    "$stage/tandem-bench" forward --model "$stage/mlp-$dtype.safetensors" --device cuda:0 \
      --batch 1,8,32,128,512,2048 --seconds 0.5 --json "$out/forward-cuda-$dtype.json" || failed=1
  done
  "$stage/tandem-bench" forward --model "$stage/mlp-f32.safetensors" --device cpu \
    --batch 1,128 --seconds 0.5 --json "$out/forward-cpu-f32.json" || true
  return $failed
}

# The server on cuda:0 and the highest constant rate whose p99 stays within 10 ms.
serve_sweep() {
  "$stage/tandem" serve --listen 127.0.0.1:18000 --device cuda:0 --p99-ms 10 \
    --model "mlp=$stage/mlp-f32.safetensors" --coloc-socket /tmp/tandem-gpu-18000.sock \
    2>"$out/serve-18000.log" &
  local server=$!
  for _ in $(seq 100); do
    grep -q "serving ready=true" "$out/serve-18000.log" 2>/dev/null && break
    kill -0 "$server" 2>/dev/null || { echo "the server on cuda:0 exited"; tail -20 "$out/serve-18000.log"; return 1; }
    sleep 0.2
  done
  "$stage/tandem-bench" sweep --url http://127.0.0.1:18000 --model mlp \
    --budget-ms 10 --duration 2 --min-rate 1000 --max-rate 100000 --precision 0.15 \
    --cooldown 0.5 --threads 4 --connections 256 --json "$out/sweep-cuda.json"
  local rc=$?
  kill "$server"; wait "$server" 2>/dev/null
  return $rc
}

coloc_once() {
  local best rate
  best=$(python3 -c "import json; print(int(json.load(open('$out/sweep-cuda.json'))['best_goodput_rps'] or 2000))" 2>/dev/null || echo 2000)
  rate=$((best / 2 < 20000 ? best / 2 : 20000))
  "$stage/tandem-bench" coloc --device cuda:0 --model-repository /tmp/gpu-repo \
    --model mlp --rate "$rate" --shape constant --budget-ms 10 --rounds 1 --duration 5 \
    --json "$out/coloc-cuda-constant.json"
}

run() {
  setup
  deadline=$((SECONDS + 345))
  local failed=0
  step env 15 environment || true
  step tests 130 tests || failed=1
  step sanitizer 60 sanitizer || failed=1
  step forward 30 forward || failed=1
  step serve 40 serve_sweep || failed=1
  step coloc 60 coloc_once || failed=1
  if [ "$failed" = 0 ]; then echo "GPU CHECK PASSED"; else echo "GPU CHECK FAILED"; fi
  echo "{\"passed\": $([ $failed = 0 ] && echo true || echo false)}" >"$out/verdict.json"
  return $failed
}

# The co-location scenario on a GPU: serving at RATE (10,000 req/s) with a BUDGET (2 ms) p99, alone,
# beside an unmanaged trainer of ~100M parameters and beside a managed one, constant and
# burst load, one round each (about 2 x 150 s).
coloc() {
  setup
  deadline=$((SECONDS + 345))
  step env 15 environment || true
  for shape in constant burst; do
    step "coloc-$shape" 165 "$stage/tandem-bench" coloc --device cuda:0 \
      --model-repository /tmp/gpu-repo --model mlp --rate "${RATE:-10000}" --shape "$shape" \
      --budget-ms "${BUDGET:-2}" --rounds "${ROUNDS:-1}" --duration 8 \
      --train-dims 4096,8192,8192,10 --train-batch 1024 \
      --json "$out/coloc-heavy-$shape.json" || true
  done
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  coloc) coloc ;;
  # A step's function, in the instance `step` starts under its timeout.
  __fn) shift; "$@" ;;
  *) echo "usage: $0 build|run|coloc" >&2; exit 2 ;;
esac
