#!/usr/bin/env bash
# Starts Seldon MLServer 1.7.1 with adaptive batching on tandem's safetensors MLP (numpy
# runtime in runtime.py), in a venv this script makes (.venv-mlserver). Prints its URL on
# stdout when ready; stops when killed.
#
#     benches/peers/mlserver.sh MODEL.safetensors PORT [MAX_BATCH_SIZE] [MAX_BATCH_TIME_S]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$(realpath "$1")
port=${2:-8088}
max_batch=${3:-64}
max_time=${4:-0.002}
if [ ! -x .venv-mlserver/bin/mlserver ]; then
  python3 -m venv .venv-mlserver
  # uvloop 0.22+ breaks MLServer 1.7.1 workers ("no current event loop"): pin it.
  .venv-mlserver/bin/pip install --quiet --disable-pip-version-check "mlserver==1.7.1" "uvloop==0.21.0" numpy
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/mlp"
cp benches/peers/mlserver/runtime.py "$dir/mlp/runtime.py"
width=$(python3 -c "
import json,struct,sys
d=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',d[:8])[0]; h=json.loads(d[8:8+n])
print(h['layers.0.weight']['shape'][1])" "$model")
cat > "$dir/settings.json" <<JSON
{"http_port": $port, "grpc_port": $((port + 1)), "metrics_port": $((port + 2)), "debug": false}
JSON
cat > "$dir/mlp/model-settings.json" <<JSON
{"name": "mlp", "implementation": "runtime.MlpRuntime",
 "max_batch_size": $max_batch, "max_batch_time": $max_time,
 "parameters": {"uri": "$model"},
 "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, $width]}],
 "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [-1, 10]}]}
JSON
cd "$dir"
"$OLDPWD/.venv-mlserver/bin/mlserver" start . > "$dir/mlserver.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT TERM INT
for _ in $(seq 300); do
  if curl -sf "http://127.0.0.1:$port/v2/models/mlp/ready" >/dev/null; then
    echo "http://127.0.0.1:$port"
    wait $pid
    exit 0
  fi
  kill -0 $pid 2>/dev/null || { cat "$dir/mlserver.log" >&2; exit 1; }
  sleep 0.2
done
cat "$dir/mlserver.log" >&2
exit 1
