#!/usr/bin/env bash
# One measured `tandem-bench load` run with the server's side of it: what the client saw
# (rate answered, goodput within the budget, p50, p99) and what the server spent (CPU time
# and context switches per request from /proc/<pid>, rows per batch and refusals by reason
# from /metrics). The building block of benches/ab.sh; usable alone.
#
#     benches/measure.sh [tandem-bench load flags]      # e.g. --rate 6500 --duration 8
#
# Flags go to `tandem-bench load` as they are (--rate, --duration, --shape, --connections,
# --bodies, --budget-ms, --rows, --binary, ...); --url, --model and --json are set here.
#
# Environment:
#   URL, SERVER_PID  a running server (benches/ab.sh sets both). Without URL a fresh server
#                    is started for this run and stopped after it: TANDEM_BIN serve
#                    --device cpu --model-repository REPO SERVE (SERVE default "--p99-ms 50"),
#                    and its warm-up's efficient batch is reported too.
#   TANDEM_BIN       the server's binary (default target/release/tandem); the load
#                    generator is always this checkout's target/release/tandem-bench.
#   REPO, MODEL      default target/bench-serve/repo and mlp (the 784→1024→1024→10 f32 MLP,
#                    made here if missing).
#   WARMUP           seconds of the same load before the measured run, not measured (default 1).
#   POLICY           adaptive | static:MICROSECONDS — set through the admin API first.
#   NEIGHBOUR        a process run beside the load: busy (two SCHED_IDLE busy loops),
#                    duty80[@CORE] (a SCHED_IDLE loop busy 4 ms of every 5, pinned to CORE if
#                    given), nice80@CORE (the same at nice 19), batch80@CORE (nice 19 and
#                    SCHED_BATCH), or any shell command.
#   SAMPLE_MS        also print the effective budget and observed p99 ("effective/observed"
#                    in ms) every SAMPLE_MS while the measured run goes.
#
# Prints a summary on stderr and, as the last line of stdout, `key=value` pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
loadgen=target/release/tandem-bench
bin=${TANDEM_BIN:-target/release/tandem}
repo=${REPO:-target/bench-serve/repo}
model=${MODEL:-mlp}
warmup=${WARMUP:-1}
out=target/bench-measure
mkdir -p "$out"
if [ "$model" = mlp ] && [ ! -f "$repo/mlp/1/model.safetensors" ]; then
  mkdir -p "$repo/mlp/1"
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
fi

# The load's flags, less --duration (the warm-up and the run each set their own).
duration=10
args=()
while (($#)); do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --duration=*) duration=${1#*=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

pids=()
cleanup() {
  ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  rm -f "$out/coloc-$$.sock"
}
trap cleanup EXIT

url=${URL:-}
server=${SERVER_PID:-}
log=
if [ -z "$url" ]; then
  log="$out/serve-$$.log"
  # No gRPC listener (TANDEM_GRPC_LISTEN='' works with builds from before gRPC too).
  # shellcheck disable=SC2086 # SERVE is a list of flags
  TANDEM_GRPC_LISTEN='' "$bin" serve --listen 127.0.0.1:0 --device cpu --model-repository "$repo" \
    --coloc-socket "$out/coloc-$$.sock" ${SERVE:---p99-ms 50} 2>"$log" &
  server=$!
  pids+=("$server")
  for _ in $(seq 600); do
    addr=$(grep -o 'listening addr=[0-9.:]*' "$log" | cut -d= -f2 || true)
    [ -n "$addr" ] && curl -sf "http://$addr/v2/health/ready" >/dev/null && url="http://$addr" && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "the server did not become ready; see $log" >&2; exit 1; }
fi

if [ -n "${POLICY:-}" ]; then
  case $POLICY in
    adaptive) body='{"policy":"adaptive"}' ;;
    static:*) body="{\"policy\":\"static\",\"max_queue_delay_us\":${POLICY#static:}}" ;;
    *) echo "POLICY must be adaptive or static:MICROSECONDS, got $POLICY" >&2; exit 2 ;;
  esac
  curl -sf -X PUT -d "$body" "$url/admin/models/$model/slo" >/dev/null
fi

loop='import time
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.004: pass
    time.sleep(0.001)'
neighbour() {
  local core=${1#*@}
  [ "$core" = "$1" ] && core=
  local pin=()
  [ -n "$core" ] && pin=(taskset -c "$core")
  case ${1%@*} in
    busy)
      chrt --idle 0 python3 -c 'while True: pass' & pids+=($!)
      chrt --idle 0 python3 -c 'while True: pass' & pids+=($!) ;;
    duty80) "${pin[@]}" chrt --idle 0 python3 -c "$loop" & pids+=($!) ;;
    nice80) "${pin[@]}" nice -n 19 python3 -c "$loop" & pids+=($!) ;;
    batch80) "${pin[@]}" nice -n 19 chrt --batch 0 python3 -c "$loop" & pids+=($!) ;;
    *) bash -c "$1" & pids+=($!) ;;
  esac
}
if [ -n "${NEIGHBOUR:-}" ]; then
  neighbour "$NEIGHBOUR"
  sleep 0.5
fi

load=("$loadgen" load --url "$url" --model "$model" "${args[@]}")
if [ "$warmup" != 0 ]; then
  "${load[@]}" --duration "$warmup" >/dev/null 2>&1
fi

metrics() { curl -s "$url/metrics"; }
ticks() { [ -n "$server" ] && awk '{ print $14 + $15 }' /proc/"$server"/stat || echo 0; }
switches() {
  [ -n "$server" ] && cat /proc/"$server"/task/*/status 2>/dev/null |
    awk '/ctxt_switches/ { s += $2 } END { print s + 0 }' || echo 0
}
json="$out/load-$$.json"
metrics >"$out/before-$$.prom"
cpu0=$(ticks)
sw0=$(switches)
if [ -n "${SAMPLE_MS:-}" ]; then
  "${load[@]}" --duration "$duration" --json "$json" >/dev/null 2>&1 &
  loader=$!
  while kill -0 "$loader" 2>/dev/null; do
    sleep "$(awk -v ms="$SAMPLE_MS" 'BEGIN { print ms / 1000 }')"
    metrics | awk -v m="$model" '
      $0 ~ "^tandem_slo_effective_budget_seconds\\{model=\"" m "\"" { e = $2 }
      $0 ~ "^tandem_observed_p99_seconds\\{model=\"" m "\"" { p = $2 }
      END { printf "%.2f/%.1f ", e * 1000, p * 1000 }' >&2
  done
  echo >&2
  wait "$loader"
else
  "${load[@]}" --duration "$duration" --json "$json" >/dev/null
fi
cpu1=$(ticks)
sw1=$(switches)
metrics >"$out/after-$$.prom"

python3 - "$json" "$out/before-$$.prom" "$out/after-$$.prom" "$model" "$cpu0" "$cpu1" \
  "$(getconf CLK_TCK)" "$sw0" "$sw1" "${log:-}" <<'EOF'
import json, re, sys
path, before, after, model, cpu0, cpu1, hz, sw0, sw1, log = sys.argv[1:]
r = json.load(open(path))
sent = max(r["sent"], 1)

def series(text):
    out = {}
    for name, labels, value in re.findall(r"^(\w+)\{([^}]*)\} (\S+)$", text, re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("model") == model:
            key = name + ("." + fields["reason"] if "reason" in fields else "")
            out[key] = out.get(key, 0.0) + float(value)
    return out

b, a = series(open(before).read()), series(open(after).read())
delta = lambda k: a.get(k, 0.0) - b.get(k, 0.0)
figures = {
    "achieved_rps": r["achieved_rps"],
    "goodput_rps": r["goodput_rps"],
    "p50_ms": r["p50_ms"],
    "p99_ms": r["p99_ms"],
    "within_budget": r["within_budget"],
}
if int(cpu1) > 0:
    figures["cpu_us_per_request"] = (int(cpu1) - int(cpu0)) / int(hz) / sent * 1e6
    figures["switches_per_request"] = (int(sw1) - int(sw0)) / sent
batches = delta("tandem_batch_rows_count")
if batches > 0:
    figures["rows_per_batch"] = delta("tandem_batch_rows_sum") / batches
if "tandem_observed_p99_seconds" in a:
    figures["server_p99_ms"] = a["tandem_observed_p99_seconds"] * 1e3
for key in sorted(a):
    if key.startswith("tandem_requests_rejected_total.") and delta(key) > 0:
        figures["rejected_" + key.split(".", 1)[1]] = delta(key)
if log:
    m = re.search(r"efficient_batch=(\d+)", open(log).read())
    if m:
        figures["efficient_batch"] = int(m.group(1))
print("  ".join(f"{k} {v:.4g}" for k, v in figures.items()), file=sys.stderr)
print(" ".join(f"{k}={v:.6g}" for k, v in figures.items()))
EOF
rm -f "$out/before-$$.prom" "$out/after-$$.prom"
