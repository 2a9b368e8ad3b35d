#!/usr/bin/env bash
# Trains the bundled default model: the digits classifier in config/models/digits/1,
# with `tandem train` on the CPU (one thread, seed 1, until 97% held-out accuracy).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
tmp=$(mktemp -d)
target/release/tandem train --data digits --device cpu --threads 1 --seed 1 \
  --target-accuracy 0.97 --checkpoint-every 0.5 --seconds 120 --repository "$tmp"
latest=$(ls "$tmp/digits" | sort -n | tail -1)
mkdir -p config/models/digits/1
cp "$tmp/digits/$latest/model.safetensors" config/models/digits/1/model.safetensors
rm -rf "$tmp"
echo "wrote config/models/digits/1/model.safetensors"
