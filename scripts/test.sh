#!/usr/bin/env bash
# Command 2 of the README: the whole test suite. GoogleTest unit tests through
# CTest, then the NumPy cross-checks through pytest (NumPy and pytest live in
# .venv, never in the system Python). Fails if either fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check numpy pytest
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release -j2
QKV_BIN="$PWD/build/release/qkv" .venv/bin/python -m pytest -q tests/numpy
