#!/usr/bin/env bash
# What each batching policy costs at a load the server carries easily: one `tandem serve`,
# the policies switched through the admin API and taking turns round by round (this
# machine's speed drifts by tens of percent within minutes, so only interleaved runs
# compare). Per run: p50, p99, rows per batch (from /metrics) and the server's CPU time per
# request (from /proc/<pid>/stat). At a load this far from saturation the budget leaves
# room to wait for bigger batches, and bigger batches cost less CPU per row: the figure
# that tells what serving leaves to a co-located trainer, and what an inference costs.
#
#     benches/moderate-load-policies.sh     # RATE=6500 ROUNDS=3 DURATION=8 BODIES=64
#
# POLICIES is a space-separated list of `adaptive` and `static:MICROSECONDS` (default
# "adaptive static:2000 static:5000"); the budget is 50 ms. REPO=DIR serves another
# model repository (a model named mlp; default target/bench-serve/repo, made here as the
# 784→1024→1024→10 f32 MLP if missing). JSON of each run: target/bench-moderate/.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${RATE:-6500}
rounds=${ROUNDS:-3}
duration=${DURATION:-8}
bodies=${BODIES:-64}
read -r -a policies <<<"${POLICIES:-adaptive static:2000 static:5000}"
out=target/bench-moderate
repo=${REPO:-target/bench-serve/repo}
port=18291
url="http://127.0.0.1:$port"
mkdir -p "$out" "$repo/mlp/1"
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"

target/release/tandem serve --listen "127.0.0.1:$port" --device cpu --model-repository "$repo" \
  --p99-ms 50 2>"$out/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "$url/v2/health/ready" >/dev/null && break
  sleep 0.2
done
curl -sf "$url/v2/health/ready" >/dev/null || { echo "not ready; see $out/server.log" >&2; exit 1; }

# utime + stime of the whole process, in clock ticks (fields 14 and 15; the command name,
# field 2, has no spaces here).
ticks() { awk '{ print $14 + $15 }' /proc/"$server"/stat; }
batches() { curl -s "$url/metrics" | awk '/^tandem_batch_rows_count\{model="mlp"/ { print $2 }'; }

run() { # policy round
  local name=${1/:/-} json body b0 b1 cpu0 cpu1
  json="$out/$name-$2.json"
  if [ "$1" = adaptive ]; then
    body='{"policy":"adaptive"}'
  else
    body="{\"policy\":\"static\",\"max_queue_delay_us\":${1#static:}}"
  fi
  curl -sf -X PUT -d "$body" "$url/admin/models/mlp/slo" >/dev/null
  # A second of the same load, unmeasured, so that each policy is measured settled.
  target/release/tandem bench load --url "$url" --model mlp --rate "$rate" --duration 1 \
    --bodies "$bodies" >/dev/null
  b0=$(batches)
  cpu0=$(ticks)
  target/release/tandem bench load --url "$url" --model mlp --rate "$rate" \
    --duration "$duration" --budget-ms 50 --bodies "$bodies" --json "$json" >/dev/null
  cpu1=$(ticks)
  b1=$(batches)
  python3 - "$json" "$1" "$2" "$b0" "$b1" "$cpu0" "$cpu1" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
path, name, round_, b0, b1, cpu0, cpu1, hz = sys.argv[1:]
r = json.load(open(path))
sent = max(r["sent"], 1)
r["policy"] = name
r["rows_per_batch"] = sent / max(float(b1) - float(b0), 1)
r["cpu_us_per_request"] = (int(cpu1) - int(cpu0)) / int(hz) / sent * 1e6
json.dump(r, open(path, "w"))
print(f"{name:<13} round {round_}  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
      f"rows/batch {r['rows_per_batch']:5.1f}  CPU/request {r['cpu_us_per_request']:.0f} us")
EOF
  sleep 1
}

for round in $(seq "$rounds"); do
  # Each round starts one policy later than the last, so no policy always goes first.
  n=${#policies[@]}
  for i in $(seq 0 $((n - 1))); do
    run "${policies[$(((i + round - 1) % n))]}" "$round"
  done
done

python3 - "$out" "$rounds" "$rate" "${policies[@]}" <<'EOF'
import json, statistics, sys
out, rounds, rate, policies = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
print(f"\nmedians of {rounds} rounds at {rate} req/s, budget 50 ms")
print("| policy | p50 ms | p99 ms | rows per batch | server CPU/request |")
print("| --- | ---: | ---: | ---: | ---: |")
for p in policies:
    runs = [json.load(open(f"{out}/{p.replace(':', '-')}-{i}.json")) for i in range(1, rounds + 1)]
    med = lambda k: statistics.median(r[k] for r in runs)
    print(f"| {p} | {med('p50_ms'):.2f} | {med('p99_ms'):.2f} | {med('rows_per_batch'):.1f} | "
          f"{med('cpu_us_per_request'):.0f} us |")
EOF
