#!/usr/bin/env bash
# Command 2 of the README: the whole test suite. GoogleTest unit tests through
# CTest, then the NumPy cross-checks through pytest (NumPy, pytest and Selenium
# live in .venv, never in the system Python). Fails if either fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check numpy pytest selenium
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release -j2
QKV_BIN="$PWD/build/release/qkv" .venv/bin/python -m pytest -q tests/numpy

# Sanitizers, in CI (CI=true) or when asked (QKV_SANITIZERS=1): AddressSanitizer
# + UBSan over the whole GoogleTest suite, ThreadSanitizer over the threaded
# kernels' tests (presets in CMakePresets.json; both run the heavy random-case
# tests at QKV_TEST_SCALE=0.1). 8 minutes from a clean tree on 2 cores (485 s,
# the whole of .ci/run 14 min), most of it the two builds.
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
  for target in npy checkpoint vocab tokenizer model cli; do
    bash fuzz/run.sh "$target" 30
  done
  echo "fuzzing: $((SECONDS - start)) s"
fi
