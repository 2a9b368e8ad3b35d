#!/usr/bin/env bash
# Runs one command under two or more settings ("sides") in turn, for ROUNDS rounds, and
# reports each figure's median per side, the ratio of medians against the first side with a
# 90% bootstrap interval (rounds drawn in pairs: the sides of a round saw the same moment of
# the host), and in how many rounds the side was higher. This machine's speed drifts by
# tens of percent within minutes: only interleaved runs compare, and each round starts with
# the next side so that no side always goes first.
#
#     benches/ab.sh SIDE SIDE [SIDE...] -- COMMAND [ARG...]      # ROUNDS=6
#
# A SIDE is either a label, or `VAR=value` assignments separated by spaces (values without
# spaces) exported to COMMAND for that side, e.g. `TANDEM_BIN=/tmp/old/tandem`. COMMAND
# prints `key=value` pairs as the last line of its stdout (benches/measure.sh does).
#
# SERVE="FLAGS" starts one server per side before the rounds, side by side, and keeps them
# for every round: `$TANDEM_BIN serve --device cpu --model-repository REPO FLAGS` (the side's
# TANDEM_BIN, default target/release/tandem; REPO default target/bench-serve/repo); COMMAND
# then gets that side's URL and SERVER_PID. SHARED=1 starts one server (the first side's
# binary) that every side uses, for sides that differ only in what COMMAND does to it (a
# policy switched through the admin API). Without SERVE, COMMAND starts what it needs.
#
# Two builds on the same load, alone and beside two SCHED_IDLE busy loops:
#   SERVE="--p99-ms 50" benches/ab.sh TANDEM_BIN=/tmp/old/tandem TANDEM_BIN=target/release/tandem \
#       -- benches/measure.sh --rate 6500 --duration 8
#   ... "TANDEM_BIN=/tmp/old/tandem NEIGHBOUR=busy" "TANDEM_BIN=target/release/tandem NEIGHBOUR=busy" -- ...
# Two builds past saturation, overload reaching the server:
#   SERVE="--p99-ms 50" benches/ab.sh TANDEM_BIN=OLD TANDEM_BIN=NEW -- \
#       benches/measure.sh --rate 20000 --connections 1000 --bodies 64 --duration 5
# Policies at half load, on one server: SERVE="--p99-ms 50" SHARED=1 benches/ab.sh
#   POLICY=adaptive POLICY=static:2000 POLICY=static:5000 -- benches/measure.sh --rate 6500 --bodies 64
# Where a neighbour runs: SERVE="--p99-ms 50" SHARED=1 benches/ab.sh alone NEIGHBOUR=duty80 NEIGHBOUR=duty80@1 \
#   NEIGHBOUR=nice80@1 -- benches/measure.sh --rate 6500 --duration 6
# Two builds, a fresh server every run (start-up choices drawn again each time):
#   benches/ab.sh TANDEM_BIN=OLD TANDEM_BIN=NEW -- benches/measure.sh --rate 10000 --duration 6
# One side, many starts (the efficient batch each warm-up chose): ROUNDS=30 benches/ab.sh starts \
#   -- env WARMUP=0 benches/measure.sh --rate 100 --duration 1
#
# Every run's output: target/bench-ab/<date>-<time>-<pid>/ (one folder per call).
set -euo pipefail
cd "$(dirname "$0")/.."
sides=()
while (($#)) && [ "$1" != -- ]; do
  sides+=("$1")
  shift
done
(($#)) || { echo "usage: benches/ab.sh SIDE [SIDE...] -- COMMAND [ARG...]" >&2; exit 2; }
shift
command=("$@")
((${#sides[@]})) && ((${#command[@]})) || { echo "usage: benches/ab.sh SIDE [SIDE...] -- COMMAND" >&2; exit 2; }
rounds=${ROUNDS:-6}
repo=${REPO:-target/bench-serve/repo}
out=target/bench-ab/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$out"
echo "runs in $out" >&2

# The assignments of side $1, one per line (none for a bare label).
assignments() { tr ' ' '\n' <<<"$1" | grep -E '^[A-Za-z_][A-Za-z0-9_]*=' || true; }
side_bin() { assignments "$1" | sed -n 's/^TANDEM_BIN=//p' | tail -1; }

servers=()
trap '((${#servers[@]})) && kill "${servers[@]}" 2>/dev/null; wait 2>/dev/null || true' EXIT
urls=()
if [ -n "${SERVE:-}" ]; then
  if [ ! -f "$repo/mlp/1/model.safetensors" ]; then
    mkdir -p "$repo/mlp/1"
    python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
  fi
  count=${#sides[@]}
  [ "${SHARED:-0}" = 1 ] && count=1
  for ((i = 0; i < count; i++)); do
    bin=$(side_bin "${sides[$i]}")
    port=$((18280 + i))
    # No gRPC listener (all would want 8001): the variable, which builds from before gRPC
    # ignore, not --grpc-listen "".
    # shellcheck disable=SC2086 # SERVE is a list of flags
    TANDEM_GRPC_LISTEN='' "${bin:-${TANDEM_BIN:-target/release/tandem}}" serve --listen "127.0.0.1:$port" --device cpu \
      --model-repository "$repo" --coloc-socket "$out/coloc-$i.sock" $SERVE 2>"$out/serve-$i.log" &
    servers+=($!)
    urls+=("http://127.0.0.1:$port")
  done
  for ((i = 0; i < count; i++)); do
    for _ in $(seq 600); do
      curl -sf "${urls[$i]}/v2/health/ready" >/dev/null && break
      sleep 0.1
    done
    curl -sf "${urls[$i]}/v2/health/ready" >/dev/null ||
      { echo "server $i did not become ready; see $out/serve-$i.log" >&2; exit 1; }
  done
fi

n=${#sides[@]}
for round in $(seq "$rounds"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + round - 1) % n))
    env_args=()
    while read -r a; do [ -n "$a" ] && env_args+=("$a"); done < <(assignments "${sides[$i]}")
    if [ -n "${SERVE:-}" ]; then
      s=$i
      [ "${SHARED:-0}" = 1 ] && s=0
      env_args+=("URL=${urls[$s]}" "SERVER_PID=${servers[$s]}")
    fi
    echo "== round $round, ${sides[$i]}" >&2
    env "${env_args[@]}" "${command[@]}" >"$out/stdout.txt"
    line=$(grep -E '^[A-Za-z_][A-Za-z0-9_.]*=' "$out/stdout.txt" | tail -1 || true)
    [ -n "$line" ] || { echo "the command printed no key=value line" >&2; exit 1; }
    echo "$line" >"$out/run-$round-$i.txt"
    sleep 1
  done
done

python3 - "$out" "$rounds" "${sides[@]}" <<'EOF'
import math, os, statistics, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benches"))
from compare_mlserver import ratio_interval

out, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = [[dict(kv.split("=", 1) for kv in open(f"{out}/run-{r}-{i}.txt").read().split())
         for r in range(1, rounds + 1)] for i in range(len(sides))]
# Refusals by reason appear only where there were some: absent means none.
seen = [k for side in runs for run in side for k in run]
keys = [k for k in dict.fromkeys(seen)
        if k.startswith("rejected_") or all(k in run for side in runs for run in side)]
for key in keys:
    values = [[float(run.get(key, 0)) for run in side] for side in runs]
    print(f"\n{key} (medians of {rounds} rounds)")
    base = values[0]
    for name, vals in zip(sides, values):
        line = f"  {name:<40} {statistics.median(vals):>12.4g}"
        if len(sides) == 1:
            line += f"   min {min(vals):.4g}, max {max(vals):.4g}"
        elif vals is not base:
            b = statistics.median(base)
            ratio = statistics.median(vals) / b if b else math.inf
            lo, hi = ratio_interval(vals, base)
            higher = sum(v > w for v, w in zip(vals, base))
            line += f"   {ratio:.3f}x (90% {lo:.3f}-{hi:.3f}), higher in {higher} of {rounds}"
        print(line)
EOF
