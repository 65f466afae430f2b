#!/usr/bin/env bash
# Installs qkv's Debian build dependencies (only what is missing, so a warm
# machine skips apt entirely). Sourced by setup.sh and test.sh.
set -euo pipefail
QKV_APT_PACKAGES=(build-essential cmake ninja-build pkg-config
                  libcli11-dev libstb-dev nlohmann-json3-dev libgtest-dev libgmock-dev
                  # oneDNN, the GEMM; its CMake package also wants OpenCL's, which
                  # apt only recommends
                  libdnnl-dev ocl-icd-opencl-dev
                  # Unicode tables for the tokenizers (BERT's WordPiece, the BPE pre-tokenizers)
                  libutf8proc-dev
                  # the tsan preset: clang with LLVM's OpenMP runtime and Archer;
                  # the fuzz targets: libFuzzer and the sanitizer runtimes, lld
                  clang libomp-dev libclang-rt-14-dev lld
                  # qkv::mpi: ring attention and data-parallel training
                  openmpi-bin libopenmpi-dev
                  python3 python3-venv
                  # the API reference, a test (docs/Doxyfile)
                  doxygen
                  # the browser test of explain's HTML page (Selenium drives it headless)
                  chromium chromium-driver)
missing=()
for p in "${QKV_APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
