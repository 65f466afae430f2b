#!/usr/bin/env bash
# Command 1 of the README: install, build, run the lesson.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/qkv demo
