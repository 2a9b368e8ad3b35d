#!/usr/bin/env bash
# The response cache (issue 63): `/v1/embeddings` to all-MiniLM-L6-v2 on the CPU, one sentence a
# request, half of them (REPEAT) repeating a sentence sent earlier in the run (drawn by a Zipf law
# over the sentences sent so far, the first sent the most popular) and the rest sentences not sent
# before: a share of repeats that holds from a run's first second to its last. Two servers run side by side, the same model and 50 ms budget, one whose model
# uses the cache and one whose model does not; each round sweeps one and then the other (the order
# alternating) while the other stays idle: `tandem-bench sweep` for the highest rate whose p99 over
# every request sent stays within 50 ms (a 429 counts as a miss), each run starting from an empty
# cache (--clear-cache) so that only repeats within the run can hit. Then one `tandem-bench load` at
# the cache-on server's median rate gives the hits' p99. Prints each round's rates and their ratio,
# the median ratio with its min-max over the rounds, the share of requests that repeated, and the
# hits' p99 and count at that rate.
#
#     benches/cache.sh     # ROUNDS=2 ZIPF=0.8 REPEAT=0.5 BODIES=6000 DURATION=5 PRECISION=0.1 CPU_THREADS=0
#
# BODIES bounds the new sentences a run can send (a run at R req/s for D s sends R x D x (1 -
# REPEAT)); past it the sentences come round again and repeat more. The corpus: the sentences
# of this Python's standard-library docstrings (compare_text_peers.py's source, cut into
# sentences), shuffled, written once to target/bench-cache/corpus.json. The model comes from
# scripts/fetch-models.sh. Output: target/bench-cache/.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-2}
zipf=${ZIPF:-0.8}
repeat=${REPEAT:-0.5}
bodies=${BODIES:-6000}
duration=${DURATION:-5}
precision=${PRECISION:-0.1}
cpu_threads=${CPU_THREADS:-0}
tandem=${TANDEM_BIN:-target/release/tandem}
bench=target/release/tandem-bench
out=target/bench-cache
mkdir -p "$out"
model=$(scripts/fetch-models.sh)
corpus=$out/corpus.json
[ -f "$corpus" ] || python3 - "$corpus" <<'PY'
import json, platform, random, re, sys
sys.path.insert(0, "benches")
from compare_text_peers import stdlib_docstrings  # noqa: E402

sentences = {}
for doc in stdlib_docstrings():
    for para in re.split(r"\n\s*\n", doc):
        text = re.sub(r"\s+", " ", para).strip()
        for s in re.split(r"(?<=[a-z0-9)][.!?]) (?=[A-Z])", text):
            prose = sum(c.isalpha() or c == " " for c in s) >= 0.85 * len(s)
            if (s[:1].isupper() and s.endswith(".") and s.isascii() and prose
                    and 3 <= len(s.split()) <= 40 and ">>>" not in s and "::" not in s):
                sentences[s] = None
texts = list(sentences)
random.Random(1).shuffle(texts)
json.dump({"source": f"sentences of Python {platform.python_version()}'s standard-library "
                     "docstrings", "texts": texts}, open(sys.argv[1], "w"))
PY
have=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["texts"]))' "$corpus")
[ "$have" -ge "$bodies" ] || { echo "$corpus has $have sentences, BODIES=$bodies" >&2; exit 1; }

declare -A url
pids=()
trap '((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null || true' EXIT
port=18310
for side in on off; do
  cache=false
  [ "$side" = on ] && cache=true
  cat >"$out/$side.toml" <<EOF
cpu_threads = $cpu_threads

[models.minilm]
path = "$model"
p99_ms = 50
cache = $cache

[cache]
max_bytes = 67108864
EOF
  # No gRPC listener: both would want 8001.
  TANDEM_GRPC_LISTEN='' "$tandem" serve --config "$out/$side.toml" --listen "127.0.0.1:$port" --device cpu \
    --coloc-socket "$out/$side.sock" 2>"$out/serve-$side.log" &
  pids+=($!)
  url[$side]=http://127.0.0.1:$port
  port=$((port + 1))
done
for side in on off; do
  for _ in $(seq 600); do
    curl -sf "${url[$side]}/v2/models/minilm/ready" >/dev/null && break
    sleep 0.1
  done
  curl -sf "${url[$side]}/v2/models/minilm/ready" >/dev/null ||
    { echo "the cache-$side server is not ready; see $out/serve-$side.log" >&2; exit 1; }
done

load=(--model minilm --api openai --texts "$corpus" --zipf "$zipf" --repeat-share "$repeat" --bodies "$bodies" --clear-cache
  --budget-ms 50 --duration "$duration" --seed 1)
# The sweep's best rate and the share of that run's requests that repeated.
best() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rate = r["best_rps"] or 0
share = next((run["repeated_share"] for ok, run in r["runs"] if ok and run["offered_rps"] == rate), 0)
print(f"rate={rate:.0f} repeated={share:.3f}")
PY
}
: >"$out/rounds.txt"
for round in $(seq 1 "$rounds"); do
  sides=(on off)
  [ $((round % 2)) -eq 0 ] && sides=(off on)
  for side in "${sides[@]}"; do
    echo "== round $round, cache $side" >&2
    "$bench" sweep --url "${url[$side]}" "${load[@]}" --min-rate 100 --max-rate 20000 \
      --precision "$precision" --cooldown 1 --min-within-budget 0.99 \
      --json "$out/sweep-$round-$side.json" >"$out/sweep-$round-$side.txt"
    echo "round=$round side=$side $(best "$out/sweep-$round-$side.json")" | tee -a "$out/rounds.txt"
  done
done

rate_on=$(python3 - "$out/rounds.txt" <<'PY'
import statistics, sys
runs = [dict(kv.split("=") for kv in line.split()) for line in open(sys.argv[1])]
print(statistics.median(float(r["rate"]) for r in runs if r["side"] == "on"))
PY
)
echo "== the cache-on server at $rate_on req/s" >&2
"$bench" load --url "${url[on]}" "${load[@]}" --rate "$rate_on" --json "$out/load-on.json" \
  >"$out/load-on.txt"

python3 - "$out/rounds.txt" "$out/load-on.json" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    kv = dict(x.split("=") for x in line.split())
    runs.setdefault(kv["round"], {})[kv["side"]] = kv
print("\nhighest rate at p99 <= 50 ms (every request sent, a 429 a miss), req/s:")
ratios = []
for n, r in runs.items():
    on, off = float(r["on"]["rate"]), float(r["off"]["rate"])
    ratios.append(on / off if off else float("inf"))
    print(f"  round {n}: cache on {on:.0f} (requests repeating one sent before: "
          f"{float(r['on']['repeated']):.1%}), off {off:.0f}: {ratios[-1]:.2f}x")
median = {s: statistics.median(float(r[s]["rate"]) for r in runs.values()) for s in ("on", "off")}
print(f"medians: on {median['on']:.0f}, off {median['off']:.0f}; on/off median "
      f"{statistics.median(ratios):.2f}x (min-max {min(ratios):.2f}-{max(ratios):.2f}, "
      f"{len(ratios)} rounds)")
load = json.load(open(sys.argv[2]))
c = load["cache"] or {}
print(f"at {load['offered_rps']:.0f} req/s on the cache-on server: {load['repeated_share']:.1%} of "
      f"requests repeat one sent before; within budget {load['within_budget']:.2%}, p99 "
      f"{load['p99_ms']:.2f} ms; hits {c.get('hits', 0)}, p50 {c.get('hit_p50_ms', 0):.2f} ms, "
      f"p99 {c.get('hit_p99_ms', 0):.2f} ms; misses {c.get('misses', 0)}, partial "
      f"{c.get('partial', 0)}, p99 {c.get('rest_p99_ms', 0):.2f} ms")
PY
