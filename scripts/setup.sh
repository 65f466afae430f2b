#!/usr/bin/env bash
# Command 1 of the README: install, build, run the lesson.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/qkv demo
# The Python package, into ${QKV_VENV:-$HOME/.cache/qkv/venv} (NumPy only;
# the tests add PyTorch): then `$HOME/.cache/qkv/venv/bin/python -c "import qkv"`.
bash scripts/python_env.sh
