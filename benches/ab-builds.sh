#!/usr/bin/env bash
# Two builds of `tandem serve` side by side on the same load, interleaved run by run (this
# machine's speed drifts by tens of percent within minutes, so only interleaved runs
# compare): p50, p99, and the server's CPU time and context switches per request (counted
# from /proc/<pid>, so a build without the switch metric compares too), each build
# (a) alone and (b) beside two SCHED_IDLE busy loops, which take no memory and no cache to
# speak of: what any lowest-priority neighbour that keeps the cores busy costs serving, the
# floor under what a co-located trainer can cost it.
#
#     benches/ab-builds.sh OLD_BINARY NEW_BINARY      # RATE=6500 ROUNDS=4 DURATION=8
#
# BODIES=N sends N distinct request bodies in turn (default 1; 64 is what realistic
# clients cost, see "Decoding a JSON request" in benches/README.md); IDLE=0 skips the runs
# beside the busy loops.
#
# REPO=DIR serves another model repository (a model named mlp; default
# target/bench-serve/repo, made here as the 784→1024→1024→10 f32 MLP if missing).
#
# Prints one line per run and the medians; the JSON of each run is in target/bench-ab/.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: benches/ab-builds.sh OLD_BINARY NEW_BINARY}
new=${2:?usage: benches/ab-builds.sh OLD_BINARY NEW_BINARY}
rate=${RATE:-6500}
rounds=${ROUNDS:-4}
duration=${DURATION:-8}
bodies=${BODIES:-1}
idle=${IDLE:-1}
out=target/bench-ab
repo=${REPO:-target/bench-serve/repo}
mkdir -p "$out" "$repo/mlp/1"
rm -f "$out"/old*.json "$out"/new*.json
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"

pids=()
spinners=()
cleanup() {
  kill "${spinners[@]}" "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT

start() { # binary port log
  "$1" serve --listen "127.0.0.1:$2" --device cpu --model-repository "$repo" --p99-ms 50 \
    --coloc-socket "$out/coloc-$2.sock" 2>"$3" &
  pids+=($!)
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$2/v2/health/ready" >/dev/null && return
    sleep 0.2
  done
  echo "the server on port $2 did not become ready; see $3" >&2
  exit 1
}
start "$old" 18281 "$out/old.log"
old_pid=${pids[0]}
start "$new" 18282 "$out/new.log"
new_pid=${pids[1]}

switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ { s += $2 } END { print s }'; }
# utime + stime of the whole process, in clock ticks (fields 14 and 15 of /proc/<pid>/stat;
# the command name, field 2, has no spaces here).
ticks() { awk '{ print $14 + $15 }' /proc/"$1"/stat; }

run() { # name port pid round
  local json="$out/$1-$4.json" before after cpu0 cpu1
  before=$(switches "$3")
  cpu0=$(ticks "$3")
  target/release/tandem bench load --url "http://127.0.0.1:$2" --model mlp --rate "$rate" \
    --shape constant --duration "$duration" --connections 128 --budget-ms 50 \
    --bodies "$bodies" --json "$json" >/dev/null
  after=$(switches "$3")
  cpu1=$(ticks "$3")
  python3 - "$json" "$1" "$4" "$before" "$after" "$cpu0" "$cpu1" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
path, name, round_, before, after, cpu0, cpu1, hz = sys.argv[1:]
r = json.load(open(path))
sent = max(r["sent"], 1)
r["switches_per_request"] = (int(after) - int(before)) / sent
r["cpu_us_per_request"] = (int(cpu1) - int(cpu0)) / int(hz) / sent * 1e6
json.dump(r, open(path, "w"))
print(f"{name:<9} round {round_}  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
      f"switches/request {r['switches_per_request']:.2f}  CPU/request {r['cpu_us_per_request']:.0f} us")
EOF
  sleep 1
}

# The builds take turns at going first, round by round (use an even ROUNDS): with a fixed
# order, two runs of the same pair of builds at 10,000 req/s gave the lower p50 to the
# build that went first in 8 of 8 rounds, whichever it was; in the next run, with turns,
# the build that went second had it in 4 of 4. The slot's edge is the host's drift, not a
# constant, and turns spread it over both builds.
pair() { # suffix round
  if (($2 % 2)); then
    run "old$1" 18281 "$old_pid" "$2"
    run "new$1" 18282 "$new_pid" "$2"
  else
    run "new$1" 18282 "$new_pid" "$2"
    run "old$1" 18281 "$old_pid" "$2"
  fi
}

for round in $(seq "$rounds"); do
  pair "" "$round"
  ((idle)) || continue
  chrt --idle 0 python3 -c 'while True: pass' &
  spinners=($!)
  chrt --idle 0 python3 -c 'while True: pass' &
  spinners+=($!)
  sleep 1
  pair +idle "$round"
  kill "${spinners[@]}"
  wait "${spinners[@]}" 2>/dev/null || true
  spinners=()
  sleep 1
done

python3 - "$out" "$rounds" <<'EOF'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"\nmedians of {rounds} rounds")
print("| build | neighbour | p50 ms | p99 ms | switches/request | server CPU/request |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for name in ["old", "new"] + (["old+idle", "new+idle"] if os.path.exists(f"{out}/old+idle-1.json") else []):
    runs = [json.load(open(f"{out}/{name}-{i}.json")) for i in range(1, rounds + 1)]
    med = lambda k: statistics.median(r[k] for r in runs)
    build, _, idle = name.partition("+")
    print(f"| {build} | {'2 SCHED_IDLE busy loops' if idle else 'none'} | {med('p50_ms'):.2f} | "
          f"{med('p99_ms'):.2f} | {med('switches_per_request'):.2f} | "
          f"{med('cpu_us_per_request'):.0f} µs |")
EOF
