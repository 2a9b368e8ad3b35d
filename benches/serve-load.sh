#!/usr/bin/env bash
# Serving over HTTP on this machine, load generator included (it shares the cores):
#  1. the highest rate at which single-row requests to the 784→1024→1024→10 f32 MLP keep
#     p99 <= 50 ms (`tandem-bench sweep`, JSON requests, 128 keep-alive connections);
#  2. the gateway's own overhead: p50 of an infer on a 1-layer 4→4 model at 500 req/s,
#     with no batching delay for that model (its config.toml sets max_queue_delay_us = 0),
#     measured by the client from the request's scheduled send time to its last byte.
# Results: target/bench-serve/*.json and the printed summary.
#
#     benches/serve-load.sh          # DURATION=5 per run by default
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-target/bench-serve}
duration=${DURATION:-5}
mkdir -p "$out/repo/mlp/1" "$out/repo/tiny/1"
cargo build --release --quiet -p tandem -p tandem-bench
[ -f "$out/repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$out/repo/mlp/1/model.safetensors"
[ -f "$out/repo/tiny/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 4,4 --seed 1 "$out/repo/tiny/1/model.safetensors"
echo "max_queue_delay_us = 0" > "$out/repo/tiny/config.toml"

target/release/tandem serve --listen 127.0.0.1:0 --grpc-listen "" --device cpu --model-repository "$out/repo" \
  2>"$out/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  addr=$(grep -o 'listening addr=[0-9.:]*' "$out/server.log" | cut -d= -f2 || true)
  [ -n "$addr" ] && curl -sf "http://$addr/v2/health/ready" >/dev/null && break
  sleep 0.1
done
url="http://$addr"

echo "== gateway overhead: tiny 4→4 model, 500 req/s"
target/release/tandem-bench load --url "$url" --model tiny --rate 500 --duration "$duration" \
  --json "$out/overhead.json"
echo
echo "== highest rate with p99 <= 50 ms: 784→1024→1024→10, single-row JSON requests"
target/release/tandem-bench sweep --url "$url" --model mlp --budget-ms 50 \
  --min-rate 1000 --max-rate 40000 --duration "$duration" --json "$out/sweep.json" | grep -E '^=>|^highest'
