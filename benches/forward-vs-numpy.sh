#!/usr/bin/env bash
# tandem's CPU forward pass against numpy (OpenBLAS) on the same 784→1024→1024→10 f32 MLP,
# same threads, run alternately (tandem, numpy, tandem, numpy) so both see the same machine.
# Prints both tables and the ratios of the best round of each; writes JSON to $OUT_DIR.
#
#     benches/forward-vs-numpy.sh            # THREADS=2 SECONDS_PER_BATCH=2 by default
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
seconds=${SECONDS_PER_BATCH:-2}
batches=${BATCHES:-1,8,32,128,512}
out=${OUT_DIR:-target/bench-forward}
mkdir -p "$out"
scripts/setup-python.sh
model="$out/mlp-784-1024-1024-10.safetensors"
[ -f "$model" ] || python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$model"
cargo build --release --quiet -p tandem -p tandem-bench
for round in 1 2; do
  target/release/tandem-bench forward --model "$model" --device cpu --threads "$threads" \
    --batch "$batches" --seconds "$seconds" --json "$out/tandem-$round.json"
  .venv/bin/python benches/numpy_mlp.py --model "$model" --threads "$threads" \
    --batch "$batches" --seconds "$seconds" --json "$out/numpy-$round.json"
done
.venv/bin/python - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def best(name):
    runs = [json.load(open(f"{out}/{name}-{r}.json"))["rows"] for r in (1, 2)]
    return {row["batch"]: max((r for rr in runs for r in rr if r["batch"] == row["batch"]),
                              key=lambda r: r["samples_per_second"]) for row in runs[0]}
t, n = best("tandem"), best("numpy")
print("\nbest of two rounds       tandem                 numpy            ratio (tandem/numpy)")
print(f"{'batch':>6} {'p50 µs':>9} {'samples/s':>10} {'p50 µs':>9} {'samples/s':>10}  {'throughput':>10} {'p50 latency':>11}")
for b in t:
    print(f"{b:>6} {t[b]['p50_us']:>9.1f} {t[b]['samples_per_second']:>10.0f} {n[b]['p50_us']:>9.1f} "
          f"{n[b]['samples_per_second']:>10.0f}  {t[b]['samples_per_second']/n[b]['samples_per_second']:>9.2f}x "
          f"{t[b]['p50_us']/n[b]['p50_us']:>10.2f}x")
json.dump({"tandem": t, "numpy": n}, open(f"{out}/summary.json", "w"), indent=2)
PY
