#!/usr/bin/env bash
# Two builds of tandem over HTTP/2 by prior knowledge (h2c), taking turns: each round starts
# one server per build in a rotating order and drives it with h2load (Debian's
# nghttp2-client), closed loop, one request in flight per connection — single-row JSON
# infer to the 784→1024→1024→10 MLP, then `GET /v2/health/ready`. Prints requests/s per
# build and round, then each figure's median and range of NEW over OLD per round.
#
#     benches/h2-ab.sh OLD_BINARY NEW_BINARY     # ROUNDS=6 CONNECTIONS=64
#
# Output: target/bench-h2-ab/.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2
rounds=${ROUNDS:-6}
connections=${CONNECTIONS:-64}
out=target/bench-h2-ab
repo=$out/repo
mkdir -p "$repo/mlp/1"
command -v h2load >/dev/null || { echo "h2load missing: apt-get install nghttp2-client" >&2; exit 1; }
[ -f "$repo/mlp/1/model.safetensors" ] ||
  python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 "$repo/mlp/1/model.safetensors"
python3 -c 'import json,random; random.seed(1); print(json.dumps({"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,784],"data":[round(random.random(),4) for _ in range(784)]}]}))' >"$out/body.json"
rate() { grep -oP 'finished in [0-9.]+s, \K[0-9.]+(?= req/s)'; }
: >"$out/rounds.txt"
for round in $(seq 1 "$rounds"); do
  sides=(old new)
  [ $((round % 2)) -eq 0 ] && sides=(new old)
  for side in "${sides[@]}"; do
    bin=$old; [ "$side" = new ] && bin=$new
    # No gRPC listener: the variable, which builds from before gRPC ignore, not --grpc-listen "".
    TANDEM_GRPC_LISTEN='' "$bin" serve --listen 127.0.0.1:18123 --device cpu --model-repository "$repo" --p99-ms 50 2>/dev/null &
    pid=$!
    for _ in $(seq 1 100); do curl -sf http://127.0.0.1:18123/v2/health/ready >/dev/null && break; sleep 0.1; done
    h2load -n 3000 -c 16 -m 1 http://127.0.0.1:18123/v2/health/ready >/dev/null 2>&1
    infer=$(h2load -n 20000 -c "$connections" -m 1 -d "$out/body.json" -H 'content-type: application/json' \
      http://127.0.0.1:18123/v2/models/mlp/infer 2>/dev/null | rate)
    health=$(h2load -n 60000 -c "$connections" -m 1 http://127.0.0.1:18123/v2/health/ready 2>/dev/null | rate)
    echo "round=$round side=$side infer_rps=$infer health_rps=$health" | tee -a "$out/rounds.txt"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
python3 - "$out/rounds.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    kv = dict(x.split("=") for x in line.split())
    runs.setdefault(kv["round"], {})[kv["side"]] = kv
for what in ("infer_rps", "health_rps"):
    ratios = [float(r["new"][what]) / float(r["old"][what]) for r in runs.values()]
    print(f"{what}: new/old median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds)")
PY
