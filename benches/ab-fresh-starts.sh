#!/usr/bin/env bash
# Two builds of `tandem serve` on the same load, a fresh server for every run (so whatever a
# server decides at start-up, such as the adaptive policy's efficient batch from its
# warm-up, is drawn again each time), the builds taking turns and swapping order each round.
# Prints p50, p99 and the efficient batch the server logged ("?" for a build that does not
# log it) per run, then each build's medians.
#
#     benches/ab-fresh-starts.sh OLD_BINARY NEW_BINARY    # RATE=10000 ROUNDS=6 DURATION=6
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("${1:?usage: benches/ab-fresh-starts.sh OLD_BINARY NEW_BINARY}" "${2:?usage: benches/ab-fresh-starts.sh OLD_BINARY NEW_BINARY}")
rate=${RATE:-10000}
rounds=${ROUNDS:-6}
duration=${DURATION:-6}
out=target/bench-fresh
repo=target/bench-serve/repo
port=18295
mkdir -p "$out" "$repo/mlp/1"
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null || true' EXIT

: >"$out/runs.txt"
for round in $(seq "$rounds"); do
  order="0 1"
  [ $((round % 2)) = 0 ] && order="1 0"
  for b in $order; do
    name=$([ "$b" = 0 ] && echo old || echo new)
    log="$out/$name-$round.log"
    "${bins[$b]}" serve --listen "127.0.0.1:$port" --device cpu --model-repository "$repo" \
      --p99-ms 50 --coloc-socket "$out/coloc.sock" 2>"$log" &
    server=$!
    for _ in $(seq 300); do
      curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break
      sleep 0.2
    done
    target/release/tandem bench load --url "http://127.0.0.1:$port" --model mlp --rate "$rate" \
      --shape constant --duration "$duration" --connections 128 --budget-ms 50 \
      --json "$out/$name-$round.json" >/dev/null
    kill "$server"
    wait "$server" 2>/dev/null || true
    server=
    knee=$(sed -n 's/.*warmed up model=mlp.*efficient_batch=\([0-9]*\).*/\1/p' "$log")
    python3 - "$name" "$round" "${knee:-?}" "$out/$name-$round.json" <<'PY' | tee -a "$out/runs.txt"
import json, sys
name, rnd, knee, path = sys.argv[1:]
r = json.load(open(path))
print(f"{name} {rnd} {knee} {r['p50_ms']:.2f} {r['p99_ms']:.2f}")
PY
  done
done
python3 - "$out/runs.txt" <<'PY'
import statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
for name in ("old", "new"):
    mine = [r for r in runs if r[0] == name]
    print(f"{name}: median p50 {statistics.median(float(r[3]) for r in mine):.2f} ms, "
          f"median p99 {statistics.median(float(r[4]) for r in mine):.2f} ms, "
          f"efficient batches {sorted(r[2] for r in mine)}")
PY
