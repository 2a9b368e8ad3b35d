#!/usr/bin/env bash
# Two builds of `tandem serve` side by side past saturation, loaded in turn: how many
# requests per second each answers when offered more than the cores can serve (the
# capacity that goodput at a budget sits under). Interleaved run by run, since this
# machine's speed drifts by tens of percent within minutes.
#
#     benches/ab-capacity.sh OLD_BINARY NEW_BINARY      # RATE=20000 ROUNDS=6 DURATION=5
#
# Each run follows a second of the same load that is not measured, with 64 request bodies
# in turn. REPO=DIR serves another model repository (a model named mlp; default
# target/bench-serve/repo, made here as the 784→1024→1024→10 f32 MLP if missing).
# SHAPE=constant|poisson|burst and CONNECTIONS=N (default 128) set the load; with more
# connections than requests in flight, overload reaches the server instead of waiting in
# the generator. BUDGET_MS (default 50) is the servers' p99 budget and the goodput's.
# Prints one line per run (answered, answered within the budget, the p99) and each
# build's medians, the ratio per round, and how many runs kept the p99 within the budget.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: benches/ab-capacity.sh OLD_BINARY NEW_BINARY}
new=${2:?usage: benches/ab-capacity.sh OLD_BINARY NEW_BINARY}
rate=${RATE:-20000}
rounds=${ROUNDS:-6}
duration=${DURATION:-5}
shape=${SHAPE:-constant}
connections=${CONNECTIONS:-128}
budget=${BUDGET_MS:-50}
repo=${REPO:-target/bench-serve/repo}
out=target/bench-capacity
mkdir -p "$out"
cargo build --release --quiet
tandem=target/release/tandem
if [ ! -f "$repo/mlp/1/model.safetensors" ]; then
    mkdir -p "$repo/mlp/1"
    python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
fi

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait' EXIT
for i in 0 1; do
    bin=$old
    [ $i = 1 ] && bin=$new
    "$bin" serve --listen 127.0.0.1:$((18180 + i)) --device cpu --model-repository "$repo" \
        --coloc-socket "$out/coloc-$i.sock" --p99-ms "$budget" 2>"$out/serve-$i.log" &
    pids+=($!)
done
for i in 0 1; do
    ready=0
    for _ in $(seq 300); do
        curl -sf http://127.0.0.1:$((18180 + i))/v2/models/mlp/ready >/dev/null && ready=1 && break
        sleep 0.2
    done
    [ $ready = 1 ] || { echo "server $i did not become ready; see $out/serve-$i.log" >&2; exit 1; }
done

for r in $(seq "$rounds"); do
    # Each build goes first in every other round: the host's speed drifts within a round,
    # and a fixed order puts that drift on one side (two servers of the same binary, always
    # in the same order, read 0.94 in four rounds of four).
    order="0 1"
    [ $((r % 2)) = 0 ] && order="1 0"
    for i in $order; do
        url=http://127.0.0.1:$((18180 + i))
        load=(bench load --url "$url" --model mlp --rate "$rate" --shape "$shape"
            --connections "$connections" --budget-ms "$budget" --bodies 64)
        "$tandem" "${load[@]}" --duration 1 --json "$out/warm.json" >/dev/null 2>&1
        "$tandem" "${load[@]}" --duration "$duration" --json "$out/run-$r-$i.json" \
            >/dev/null 2>&1
    done
done

python3 - "$out" "$rounds" "$budget" <<'EOF'
import json, statistics, sys
out, rounds, budget = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = [[json.load(open(f"{out}/run-{r}-{i}.json")) for i in (0, 1)]
        for r in range(1, rounds + 1)]
got = [[run["achieved_rps"] for run in pair] for pair in runs]
for r, (a, b) in enumerate(runs, 1):
    print(f"round {r}  old {a['achieved_rps']:8.0f} ({a['goodput_rps']:.0f} within {budget} ms,"
          f" p99 {a['p99_ms']:.1f})  new {b['achieved_rps']:8.0f} ({b['goodput_rps']:.0f},"
          f" p99 {b['p99_ms']:.1f}) req/s  new/old {b['achieved_rps'] / a['achieved_rps']:.3f}")
ratios = [b / a for a, b in got]
print(f"medians: old {statistics.median(a for a, _ in got):.0f}, "
      f"new {statistics.median(b for _, b in got):.0f} req/s; "
      f"median ratio {statistics.median(ratios):.3f}, new higher in "
      f"{sum(x > 1 for x in ratios)} of {rounds}")
good = [[run["goodput_rps"] for run in pair] for pair in runs]
print(f"within {budget} ms, medians: old {statistics.median(a for a, _ in good):.0f}, "
      f"new {statistics.median(b for _, b in good):.0f} req/s")
p99 = [[run["p99_ms"] for run in pair] for pair in runs]
passed = [sum(pair[i] <= float(budget) for pair in p99) for i in (0, 1)]
print(f"p99 (ms), medians: old {statistics.median(a for a, _ in p99):.1f}, new "
      f"{statistics.median(b for _, b in p99):.1f}; within {budget} ms in {passed[0]} and "
      f"{passed[1]} of {rounds} runs")
EOF
