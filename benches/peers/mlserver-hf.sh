#!/usr/bin/env bash
# Starts Seldon MLServer 1.7.1 with adaptive batching on a sentence-transformers folder
# (all-MiniLM-L6-v2 from scripts/fetch-models.sh), as model `minilm`, in a venv this script
# makes (.venv-mlserver-hf). Prints its URL on stdout when ready; stops when killed.
#
#     benches/peers/mlserver-hf.sh MODEL_DIR PORT [MAX_BATCH_SIZE] [MAX_BATCH_TIME_S] [TORCH_THREADS]
#
# TORCH_THREADS: torch's intra-op threads in the model's worker (0, the default: torch's own
# choice, one per core).
#
# The runtime is runtime.py beside this script (sentence-transformers: mean pooling and
# L2 normalisation), not mlserver-huggingface 1.7.1: that runtime's only embedding task,
# `feature-extraction`, is transformers' pipeline of that name, which answers each text
# with its per-token hidden states ([1, tokens, 384], no pooling, not normalised): not a
# sentence embedding, and up to 256 times the bytes of one. It also imports TensorFlow and
# optimum<2 beside torch. A v2 request: BYTES input `text` of shape [n]; the answer: FP32
# output `embedding` of shape [n, 384], as tandem's v2 endpoint for the same model.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$(realpath "$1")
port=${2:-8098}
max_batch=${3:-32}
max_time=${4:-0.002}
torch_threads=${5:-0}
venv=.venv-mlserver-hf
if [ ! -x $venv/bin/mlserver ]; then
  python3 -m venv $venv
  # uvloop 0.22+ breaks MLServer 1.7.1 workers ("no current event loop"): pin it. torch,
  # transformers and sentence-transformers as in the encoder benchmark's environment
  # (benches/encoder_vs_pytorch.py); torch is PyPI's build (CUDA libraries unused here).
  $venv/bin/pip install --quiet --disable-pip-version-check "mlserver==1.7.1" "uvloop==0.21.0" \
    "torch==2.15.0" "transformers==5.24.0" "sentence-transformers==6.3.0"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/minilm"
cp benches/peers/mlserver-hf/runtime.py "$dir/minilm/runtime.py"
cat > "$dir/settings.json" <<JSON
{"http_port": $port, "grpc_port": $((port + 1)), "metrics_port": $((port + 2)), "debug": false}
JSON
cat > "$dir/minilm/model-settings.json" <<JSON
{"name": "minilm", "implementation": "runtime.SentenceEmbeddingRuntime",
 "max_batch_size": $max_batch, "max_batch_time": $max_time,
 "parameters": {"uri": "$model", "extra": {"torch_threads": $torch_threads}},
 "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
 "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}]}
JSON
cd "$dir"
"$OLDPWD/$venv/bin/mlserver" start . > "$dir/mlserver.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT TERM INT
for _ in $(seq 600); do
  if curl -sf "http://127.0.0.1:$port/v2/models/minilm/ready" >/dev/null; then
    echo "http://127.0.0.1:$port"
    wait $pid
    exit 0
  fi
  kill -0 $pid 2>/dev/null || { cat "$dir/mlserver.log" >&2; exit 1; }
  sleep 0.2
done
cat "$dir/mlserver.log" >&2
exit 1
