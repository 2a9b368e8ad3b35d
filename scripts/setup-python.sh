#!/usr/bin/env bash
# Makes .venv with the Python packages the tests need (scripts/requirements-test.txt).
# Idempotent: does nothing when .venv already matches the requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
req=scripts/requirements-test.txt
stamp=.venv/.requirements
if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
