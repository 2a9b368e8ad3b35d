#!/usr/bin/env bash
# Cold start: from exec of `tandem serve` to readiness and to the first 200, for the bundled
# digits MLP (v2 infer) and all-MiniLM-L6-v2 (`/v1/embeddings`) on the CPU. Each run starts a
# fresh process on a free port, polls readiness and the first request every 2 ms, and stops
# it; prints each run and the medians.
#
#     benches/cold-start.sh        # RUNS=5 TANDEM_BIN=target/release/tandem; target/bench-cold-start/
#
# The model comes from scripts/fetch-models.sh; the page cache is warm after the first run (a
# pod's image layers usually are too), so the first run is shown apart from the median.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
tandem=${TANDEM_BIN:-target/release/tandem}
out=target/bench-cold-start
mkdir -p "$out"
minilm=$(scripts/fetch-models.sh)
digits_body=$(python3 -c 'import json; print(json.dumps({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 64], "data": [0.5] * 64}]}))')
embed_body='{"model": "minilm", "input": "a cold start"}'

now_ms() { date +%s%3N; }

# One run: MODEL_ARGS, the path and body of the first request; prints "ready_ms first_ms".
run() {
  local path=$1 body=$2
  shift 2
  local port=$((20000 + RANDOM % 20000))
  local start ready="" first=""
  start=$(now_ms)
  # No gRPC listener (TANDEM_GRPC_LISTEN='' works with builds from before gRPC too).
  TANDEM_GRPC_LISTEN='' "$tandem" serve --listen "127.0.0.1:$port" --device cpu --coloc-socket "$out/coloc-$port.sock" "$@" \
    2>"$out/serve.log" &
  local pid=$!
  for _ in $(seq 5000); do
    if [ -z "$ready" ] && curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null 2>&1; then
      ready=$(( $(now_ms) - start ))
    fi
    if [ -n "$ready" ] && curl -sf -o /dev/null -H 'content-type: application/json' \
        -d "$body" "http://127.0.0.1:$port$path" 2>/dev/null; then
      first=$(( $(now_ms) - start ))
      break
    fi
    sleep 0.002
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ -n "$first" ] || { echo "no answer within the polls; see $out/serve.log" >&2; exit 1; }
  echo "$ready $first"
}

report() {
  local name=$1
  shift
  local lines=()
  for i in $(seq 1 "$runs"); do
    lines+=("$("$@")")
    echo "$name run $i: ready ${lines[-1]% *} ms, first 200 ${lines[-1]#* } ms"
  done
  printf '%s\n' "${lines[@]:1}" | python3 -c '
import statistics, sys
rows = [tuple(map(int, l.split())) for l in sys.stdin if l.strip()]
ready, first = zip(*rows)
print(f"'"$name"' median of runs 2-{len(rows) + 1}: ready {statistics.median(ready):.0f} ms, "
      f"first 200 {statistics.median(first):.0f} ms (range {min(first)}-{max(first)} ms)")'
}

report digits run /v2/models/digits/infer "$digits_body" --model-repository config/models
report minilm run /v1/embeddings "$embed_body" --model "minilm=$minilm"
