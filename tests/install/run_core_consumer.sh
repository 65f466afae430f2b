#!/usr/bin/env bash
# qkv::core on its own: configures and builds this source tree with only the
# core layer (QKV_BUILD_IO=OFF) while oneDNN, nlohmann_json, CLI11, stb and
# MPI cannot be found, installs it into a scratch prefix, and builds
# examples/consumer (find_package(qkv COMPONENTS core)) against it, again with
# oneDNN hidden. Both consumer programs must run and exit 0.
#   run_core_consumer.sh SOURCE_DIR [COMPILER_LAUNCHER]
set -euo pipefail
src=$1 launcher=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
hidden=(-DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
        -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON
        -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
launch=()
[ -n "$launcher" ] && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")

echo "== qkv with QKV_BUILD_IO=OFF (core only)"
cmake -S "$src" -B "$work/qkv-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQKV_BUILD_IO=OFF \
      "${launch[@]}" "${hidden[@]}" >/dev/null
cmake --build "$work/qkv-build" >/dev/null
cmake --install "$work/qkv-build" --prefix "$prefix" >/dev/null
for f in lib/libqkv_core.so lib/libqkv_core.a lib/cmake/qkv/qkv-core-targets.cmake include/qkv/attention.h; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
for f in lib/libqkv_model.so lib/libqkv_io.so bin/qkv include/qkv/gpt.h; do
  [ ! -e "$prefix/$f" ] || { echo "installed by a core-only build: $f"; exit 1; }
done

echo "== find_package(qkv REQUIRED COMPONENTS core), oneDNN hidden"
cmake -S "$src/examples/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
"$work/consumer/consumer_static"
