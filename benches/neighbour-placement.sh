#!/bin/bash
# What a SCHED_IDLE neighbour busy 80% of the time (4 ms on, 1 ms asleep) costs serving's
# p99, by where it runs: nowhere (alone), floating over every core, pinned to core 1, or
# pinned to core 0 — or, for contrast, pinned to core 1 at nice 19 instead of SCHED_IDLE
# (nice1), also as SCHED_BATCH (batch1). One server, the placements taking turns each round.
#   benches/neighbour-placement.sh        # ROUNDS=4 RATE=6500 PLACEMENTS="alone free cpu1 cpu0"
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-4}; RATE=${RATE:-6500}; PLACEMENTS=${PLACEMENTS:-"alone free cpu1 cpu0"}
BIN=target/release/tandem
REPO=target/bench-serve/repo
[ -f $REPO/mlp/1/model.safetensors ] || python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 $REPO/mlp/1/model.safetensors
cargo build --release --quiet
log=$(mktemp)
$BIN serve --listen 127.0.0.1:0 --device cpu --model-repository $REPO --p99-ms 50 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
addr=""
for _ in $(seq 300); do
  addr=$(grep -o 'listening addr=[0-9.:]*' "$log" | cut -d= -f2 || true)
  [ -n "$addr" ] && curl -sf "http://$addr/v2/health/ready" >/dev/null && break
  sleep 0.2
done
LOOP='import time
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.004: pass
    time.sleep(0.001)'
echo "round placement p50_ms p99_ms"
for round in $(seq "$ROUNDS"); do
  for placement in $PLACEMENTS; do
    loop=""
    case $placement in
      alone) ;;
      free) chrt --idle 0 python3 -c "$LOOP" & loop=$! ;;
      cpu1) taskset -c 1 chrt --idle 0 python3 -c "$LOOP" & loop=$! ;;
      cpu0) taskset -c 0 chrt --idle 0 python3 -c "$LOOP" & loop=$! ;;
      nice1) taskset -c 1 nice -n 19 python3 -c "$LOOP" & loop=$! ;;
      batch1) taskset -c 1 nice -n 19 chrt --batch 0 python3 -c "$LOOP" & loop=$! ;;
    esac
    sleep 0.5
    figures=$($BIN bench load --url "http://$addr" --model mlp --duration 6 --rate "$RATE" --budget-ms 50 \
      | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $4, $6}')
    [ -n "$loop" ] && kill "$loop"
    echo "$round $placement $figures"
  done
done
