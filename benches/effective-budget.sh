#!/usr/bin/env bash
# The adaptive policy's feedback loop at work: a fresh `tandem serve` at a p99 budget,
# loaded with 1,000 connections, its effective budget and observed p99 read every 250 ms.
#
#     benches/effective-budget.sh [BINARY]      # SHAPE=burst RATE=6000 BUDGET_MS=10
#
# After WARMUP seconds of the same load (default 2, not sampled), DURATION seconds (default
# 5) are sampled; each sample prints "effective/observed" in ms. Then the load's own p99 and
# goodput, and the server's refusals by reason. REPO=DIR as in ab-capacity.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/tandem}
shape=${SHAPE:-burst}
rate=${RATE:-6000}
budget=${BUDGET_MS:-10}
warmup=${WARMUP:-2}
duration=${DURATION:-5}
repo=${REPO:-target/bench-serve/repo}
out=target/bench-effective-budget
port=18190
mkdir -p "$out"
if [ ! -f "$repo/mlp/1/model.safetensors" ]; then
    mkdir -p "$repo/mlp/1"
    python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
fi
"$bin" serve --device cpu --model-repository "$repo" --listen 127.0.0.1:$port \
    --p99-ms "$budget" --coloc-socket "$out/coloc.sock" 2>"$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true; wait' EXIT
url=http://127.0.0.1:$port
for _ in $(seq 300); do curl -sf $url/v2/models/mlp/ready >/dev/null && break; sleep 0.2; done
load=(bench load --url "$url" --model mlp --rate "$rate" --shape "$shape" --connections 1000
    --bodies 64 --budget-ms "$budget")
"$bin" "${load[@]}" --duration "$warmup" >/dev/null 2>&1
"$bin" "${load[@]}" --duration "$duration" --json "$out/load.json" >/dev/null 2>&1 &
loader=$!
for _ in $(seq $((duration * 4))); do
    sleep 0.25
    curl -s $url/metrics | awk '
        /^tandem_slo_effective_budget_seconds\{model="mlp"/ {e = $2}
        /^tandem_observed_p99_seconds\{model="mlp"/ {p = $2}
        END {printf "%.2f/%.1f ", e * 1000, p * 1000}'
done
wait $loader
echo
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(f\"client p99 {d['p99_ms']:.1f} ms, answered {d['achieved_rps']:.0f} req/s, within {sys.argv[2]} ms {d['goodput_rps']:.0f}\")" "$out/load.json" "$budget"
curl -s $url/metrics | grep -E '^tandem_requests_rejected_total\{model="mlp"' | grep -v ' 0$' || true
