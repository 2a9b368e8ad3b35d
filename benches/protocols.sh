#!/usr/bin/env bash
# What TLS and HTTP/2 cost serving: single-row JSON requests to the 784→1024→1024→10 MLP at
# saturation, over plain HTTP/1.1, h2c (HTTP/2 by prior knowledge), HTTP/1.1 over TLS and
# HTTP/2 over TLS (ALPN). Two servers side by side, one plain and one with TLS (a
# certificate made here with openssl), each `--p99-ms 50`; h2load (Debian's nghttp2-client)
# drives each protocol in turn, closed loop, one request in flight per connection, the
# order rotating each round. Prints requests/s and mean latency per protocol and round, and
# each protocol's median and range against plain HTTP/1.1.
#
#     benches/protocols.sh              # ROUNDS=5 CONNECTIONS=64 REQUESTS=60000
#
# Needs h2load (apt-get install nghttp2-client) and openssl. Output: target/bench-protocols/.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
connections=${CONNECTIONS:-64}
requests=${REQUESTS:-60000}
bin=${TANDEM_BIN:-target/release/tandem}
out=target/bench-protocols
repo=$out/repo
mkdir -p "$repo/mlp/1"
command -v h2load >/dev/null || { echo "h2load missing: apt-get install nghttp2-client" >&2; exit 1; }
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$out/key.pem" -out "$out/cert.pem" 2>/dev/null
python3 -c 'import json,random; random.seed(1); print(json.dumps({"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,784],"data":[round(random.random(),4) for _ in range(784)]}]}))' >"$out/body.json"

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
start() { # NAME ARGS...: a server on a free port, its log in $out/NAME.log
  local name=$1; shift
  # No gRPC listener: both would want 8001.
  TANDEM_GRPC_LISTEN='' "$bin" serve --listen 127.0.0.1:0 --device cpu --model-repository "$repo" --p99-ms 50 \
    --coloc-socket "$out/coloc-$name.sock" "$@" >/dev/null 2>"$out/$name.log" &
  pids+=($!)
}
address() { # NAME: the server's address, once it is ready
  for _ in $(seq 600); do
    grep -q "serving ready=true" "$out/$1.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -o 'listening addr=[0-9.:]*' "$out/$1.log" | cut -d= -f2
}
start plain
start tls --tls-cert "$out/cert.pem" --tls-key "$out/key.pem"
plain=$(address plain)
tls=$(address tls)

ticks() { # PID: the process's user and system CPU time, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)

run() { # PROTOCOL: one h2load run; prints "req/s mean 2xx server_cpu_us_per_request"
  local url flags=() pid
  case $1 in
    h1) url=http://$plain; flags=(--h1); pid=${pids[0]} ;;
    h2c) url=http://$plain; pid=${pids[0]} ;;
    h1-tls) url=https://$tls; flags=(--h1); pid=${pids[1]} ;;
    h2-tls) url=https://$tls; pid=${pids[1]} ;;
  esac
  local before
  before=$(ticks "$pid")
  h2load "${flags[@]}" -n "$requests" -c "$connections" -m 1 -t 1 -d "$out/body.json" \
    -H 'content-type: application/json' "$url/v2/models/mlp/infer" >"$out/last.txt"
  local rps mean ok
  rps=$(awk '/^finished in/ {print $4}' "$out/last.txt")
  mean=$(awk '/^time for request:/ {print $6}' "$out/last.txt")
  ok=$(awk '/^status codes:/ {print $3}' "$out/last.txt")
  local cpu_us=$(( ($(ticks "$pid") - before) * 1000000 / hz / requests ))
  echo "$rps $mean $ok $cpu_us"
}

protocols=(h1 h2c h1-tls h2-tls)
for p in "${protocols[@]}"; do run "$p" >/dev/null; done # warm both servers and the caches
: >"$out/runs.txt"
for r in $(seq "$rounds"); do
  for i in "${!protocols[@]}"; do
    p=${protocols[$(((i + r) % ${#protocols[@]}))]}
    read -r rps mean ok cpu < <(run "$p")
    echo "round $r  $p  ${rps} req/s  mean $mean  2xx $ok  server_cpu_us $cpu" | tee -a "$out/runs.txt"
  done
done
python3 - "$out/runs.txt" <<'PY'
import re, statistics, sys
runs, cpu = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+)\s+(\S+)\s+([\d.]+) req/s.*server_cpu_us (\d+)", line)
    runs.setdefault(m[2], {})[int(m[1])] = float(m[3])
    cpu.setdefault(m[2], {})[int(m[1])] = float(m[4])
print(f"{'protocol':8} {'req/s':>7} {'vs h1':>6} {'range':>12} {'server µs/req':>14} {'vs h1':>6} {'range':>12}")
for p in runs:
    row = [p]
    for figures in (runs, cpu):
        by_round, base = figures[p], figures["h1"]
        ratios = [by_round[r] / base[r] for r in by_round]
        row.append(f"{statistics.median(by_round.values()):7.0f} {statistics.median(ratios):6.3f}"
                   f" {min(ratios):5.3f}-{max(ratios):.3f}")
    print(f"{row[0]:8} {row[1]}  {row[2]:>14}")
PY
