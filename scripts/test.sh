#!/usr/bin/env bash
# Command 2 of the README: the whole test suite. GoogleTest unit tests through
# CTest, then the NumPy cross-checks and the Python package's tests through
# pytest. Python, NumPy, PyTorch and pytest live in one venv outside the clone,
# ${QKV_VENV:-$HOME/.cache/qkv/venv} (scripts/python_env.sh fills it when
# needed and installs the package into it with `pip install .`), never in the
# system Python. Fails if any suite fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/python_env.sh --test
PY="${QKV_VENV:-$HOME/.cache/qkv/venv}/bin/python"
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release -j2
QKV_BIN="$PWD/build/release/qkv" QKV_BPE_CHECK="$PWD/build/release/tests/bpe_check" \
  QKV_GGUF_CHECK="$PWD/build/release/tests/gguf_check" "$PY" -m pytest -q tests/numpy
# The installed package (tests/python/conftest.py refuses a source folder).
"$PY" -m pytest -q tests/python

# Sanitizers, in CI (CI=true) or when asked (QKV_SANITIZERS=1): AddressSanitizer
# + UBSan over the whole GoogleTest suite, ThreadSanitizer over the threaded
# kernels' tests (presets in CMakePresets.json; both run the heavy random-case
# tests at QKV_TEST_SCALE=0.1). Most of their time is the two builds; the
# whole of .ci/run takes about 35 minutes on 2 cores.
if [ "${QKV_SANITIZERS:-0}" = 1 ] || [ "${CI:-}" = true ]; then
  start=$SECONDS
  for preset in asan tsan; do
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j2
    ctest --preset "$preset" -j2
  done
  echo "sanitizers: $((SECONDS - start)) s"
  # A short run of every loader's fuzz target (fuzz/README.md); a crash fails CI.
  start=$SECONDS
  for target in npy checkpoint gguf vocab tokenizer model cli; do
    bash fuzz/run.sh "$target" 30
  done
  echo "fuzzing: $((SECONDS - start)) s"
fi
