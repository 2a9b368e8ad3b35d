#!/usr/bin/env bash
# gRPC against HTTP (issue 62): the highest rate at which single-row requests to the
# 784→1024→1024→10 f32 MLP keep p99 <= 50 ms, over KServe v2's gRPC API (`ModelInfer`, the
# row little-endian in raw_input_contents, as tritonclient sends it), over HTTP with JSON
# and over HTTP with Triton's binary extension. One server on the CPU (`--p99-ms 50`, both
# listeners); each round sweeps the three in turn, the order rotating, with `tandem-bench
# sweep`: open loop, latency from each request's scheduled send (no coordinated omission),
# a rate passing when 99% of the requests sent are answered within 50 ms (a refusal counts
# as a miss). The load is the same for all three: BODIES bodies of their own random rows in
# turn (the same rows over each protocol), one request at a time on each of CONNECTIONS
# connections (HTTP/1.1, or HTTP/2 for gRPC), opened before the clock starts. After each
# sweep one run at CPU_RATE (well under every protocol's capacity) gives the CPU time per
# request of the server (from /proc) and of the load generator, which shares its cores.
# Prints each round's rates, then each protocol's median rate and CPU per request, and the
# ratios gRPC / JSON and binary / JSON: their median and min-max over the rounds.
#
#     benches/grpc.sh     # ROUNDS=3 DURATION=5 PRECISION=0.05 MIN_RATE=1000 CPU_RATE=4000 CONNECTIONS=128 BODIES=64 SHAPE=constant
#
# A round takes about 5 minutes at the defaults; ROUNDS=3 starts each protocol's turn
# first once. TANDEM_BIN picks the server's binary (default target/release/tandem). Output:
# target/bench-grpc/ (each sweep's and CPU run's JSON and text, the server's log,
# rounds.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
duration=${DURATION:-5}
precision=${PRECISION:-0.05}
min_rate=${MIN_RATE:-1000}
cpu_rate=${CPU_RATE:-4000}
connections=${CONNECTIONS:-128}
bodies=${BODIES:-64}
shape=${SHAPE:-constant}
tandem=${TANDEM_BIN:-target/release/tandem}
bench=target/release/tandem-bench
out=target/bench-grpc
repo=$out/repo
mkdir -p "$repo/mlp/1"
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"

"$tandem" serve --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --device cpu \
  --model-repository "$repo" --p99-ms 50 --coloc-socket "$out/coloc.sock" \
  >/dev/null 2>"$out/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "serving ready=true" "$out/server.log" && break
  kill -0 $server 2>/dev/null || { echo "the server exited; see $out/server.log" >&2; exit 1; }
  sleep 0.1
done
http=$(grep -o 'listening addr=[0-9.:]*' "$out/server.log" | cut -d= -f2)
grpc=$(grep -o 'grpc_addr=[0-9.:]*' "$out/server.log" | cut -d= -f2)
[ -n "$http" ] && [ -n "$grpc" ] || { echo "no HTTP or gRPC address in $out/server.log" >&2; exit 1; }

load=(--url "http://$http" --model mlp --budget-ms 50 --bodies "$bodies"
  --connections "$connections" --shape "$shape" --seed 1)
flags() { # PROTOCOL: what tells the load generator to speak it
  case $1 in
    grpc) echo "--grpc $grpc" ;;
    json) ;;
    binary) echo --binary ;;
  esac
}
ticks() { # the server's user and system CPU time, in clock ticks
  awk '{print $14 + $15}' "/proc/$server/stat"
}
hz=$(getconf CLK_TCK)
protocols=(grpc json binary)
for p in "${protocols[@]}"; do # warm the server on each protocol
  # shellcheck disable=SC2046
  "$bench" load "${load[@]}" $(flags "$p") --rate "$min_rate" --duration 2 >/dev/null
done

: >"$out/rounds.txt"
for round in $(seq "$rounds"); do
  for i in "${!protocols[@]}"; do
    p=${protocols[$(((i + round - 1) % ${#protocols[@]}))]}
    echo "== round $round, $p" >&2
    # shellcheck disable=SC2046
    "$bench" sweep "${load[@]}" $(flags "$p") --duration "$duration" --min-rate "$min_rate" \
      --max-rate 50000 --precision "$precision" --cooldown 1 --min-within-budget 0.99 \
      --json "$out/sweep-$round-$p.json" >"$out/sweep-$round-$p.txt"
    rate=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["best_rps"] or 0))' \
      "$out/sweep-$round-$p.json")
    # The CPU run: the server's ticks from /proc, the load generator's from its rusage.
    before=$(ticks)
    # shellcheck disable=SC2046
    client_s=$(python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[2:], check=True, stdout=open(sys.argv[1], "w"))
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$out/cpu-$round-$p.txt" "$bench" load "${load[@]}" $(flags "$p") \
      --rate "$cpu_rate" --duration "$duration" --json "$out/cpu-$round-$p.json")
    server_s=$(python3 -c "print(($(ticks) - $before) / $hz)")
    echo "round=$round protocol=$p rate=$rate server_s=$server_s client_s=$client_s" |
      tee -a "$out/rounds.txt"
  done
done

python3 - "$out" "$cpu_rate" <<'PY'
import json, statistics, sys
out, cpu_rate = sys.argv[1], sys.argv[2]
runs = {}
for line in open(f"{out}/rounds.txt"):
    kv = dict(x.split("=") for x in line.split())
    n, p = int(kv["round"]), kv["protocol"]
    cpu = json.load(open(f"{out}/cpu-{n}-{p}.json"))
    sent = max(cpu["sent"], 1)
    runs.setdefault(n, {})[p] = {"rate": float(kv["rate"]), "p99": cpu["p99_ms"],
                                 "server": float(kv["server_s"]) / sent * 1e6,
                                 "client": float(kv["client_s"]) / sent * 1e6}
names = ("grpc", "json", "binary")
print("\nhighest rate at p99 <= 50 ms (every request sent, a refusal a miss), req/s; CPU per "
      f"request at {cpu_rate} req/s, server + load generator, us:")
ratios = {"grpc": [], "binary": []}
for n, r in sorted(runs.items()):
    for p in ratios:
        ratios[p].append(r[p]["rate"] / r["json"]["rate"] if r["json"]["rate"] else float("inf"))
    cells = ", ".join(f"{p} {r[p]['rate']:.0f} ({r[p]['server']:.0f} + {r[p]['client']:.0f} us)"
                      for p in names)
    print(f"  round {n}: {cells}; grpc/json {ratios['grpc'][-1]:.2f}x, "
          f"binary/json {ratios['binary'][-1]:.2f}x")
for p in names:
    med = {k: statistics.median(r[p][k] for r in runs.values())
           for k in ("rate", "server", "client", "p99")}
    print(f"{p:6} median {med['rate']:6.0f} req/s; at {cpu_rate} req/s server {med['server']:.0f} us "
          f"and load generator {med['client']:.0f} us per request, p99 {med['p99']:.2f} ms")
for p, rs in ratios.items():
    print(f"{p}/json: median {statistics.median(rs):.2f}x (min-max {min(rs):.2f}-{max(rs):.2f}, "
          f"{len(rs)} rounds)")
PY
