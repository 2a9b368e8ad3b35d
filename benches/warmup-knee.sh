#!/usr/bin/env bash
# How much the adaptive policy's efficient batch (the knee of cost per row, which batches
# wait to grow towards) moves between starts of the same server: starts
# `tandem serve --device cpu` on the 784→1024→1024→10 MLP STARTS times, and prints each
# start's warm-up timings (rows:µs per batch-size bucket) and the efficient batch it chose,
# both from the "model version loaded and warmed up" log line, then the tally.
#
#     benches/warmup-knee.sh            # STARTS=30; BIN=target/release/tandem
set -euo pipefail
cd "$(dirname "$0")/.."
starts=${STARTS:-30}
bin=${BIN:-target/release/tandem}
out=target/bench-knee
repo=target/bench-serve/repo
mkdir -p "$out" "$repo/mlp/1"
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"

: >"$out/knees.txt"
for i in $(seq "$starts"); do
  log="$out/serve-$i.log"
  "$bin" serve --listen 127.0.0.1:0 --device cpu --model-repository "$repo" \
    --coloc-socket "$out/coloc.sock" 2>"$log" &
  server=$!
  for _ in $(seq 200); do
    grep -q "warmed up model=mlp" "$log" && break
    sleep 0.05
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  line=$(grep "warmed up model=mlp" "$log" || true)
  [ -n "$line" ] || { echo "start $i: no warm-up line in $log" >&2; exit 1; }
  warmup=$(sed 's/.*warmup_us=\([0-9:,]*\).*/\1/' <<<"$line")
  knee=$(sed -n 's/.*efficient_batch=\([0-9]*\).*/\1/p' <<<"$line")
  echo "start $i: warmup_us=$warmup efficient_batch=${knee:-?}"
  echo "${knee:-?}" >>"$out/knees.txt"
done
echo "efficient batch (rows: starts):" \
  "$(sort -n "$out/knees.txt" | uniq -c | awk '{ printf "%s: %s, ", $2, $1 }' | sed 's/, $//')"
