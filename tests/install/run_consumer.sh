#!/usr/bin/env bash
# Installs this build into a scratch prefix and builds examples/consumer
# against it twice, as an outside project would: with find_package(qkv) and
# with pkg-config. Both programs must run and exit 0.
#   run_consumer.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/qkv/attention.h lib/cmake/qkv/qkvConfig.cmake lib/cmake/qkv/qkvConfigVersion.cmake \
         lib/pkgconfig/qkv.pc lib/libqkv_core.a lib/libqkv_core.so bin/qkv; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done

echo "== find_package(qkv REQUIRED COMPONENTS core)"
cmake -S "$src/examples/consumer" -B "$work/cmake-build" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
"$work/cmake-build/consumer_static"

echo "== pkg-config --cflags --libs qkv"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
c++ -std=c++20 -O2 "$src/examples/consumer/main.cpp" -o "$work/consumer-pc" \
    $(pkg-config --cflags --libs qkv) -Wl,-rpath,"$prefix/lib"
"$work/consumer-pc"

