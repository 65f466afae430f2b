#!/usr/bin/env bash
# fuzz/build.sh: builds the libFuzzer targets into build/fuzz/ with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   bash fuzz/build.sh            # all targets: npy checkpoint vocab tokenizer
#   bash fuzz/build.sh npy        # one target
#
# Standalone (no CMake, no oneDNN): each target is compiled with only the
# library sources it needs. Needs Debian's clang and libclang-rt-14-dev.
# Rebuilds an object only when its source or a header it includes changed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build/fuzz"
CXX="${CXX_FUZZ:-clang++}"
mkdir -p "$out/obj"

if ! command -v "$CXX" >/dev/null; then
  echo "fuzz/build.sh: $CXX not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -ffunction-sections -fdata-sections
       -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/include" -I"$root/src" -Wall -Wextra)

# The library sources each target links (its own file comes first).
io_core=(src/core/tensor.cpp src/io/byte_source.cpp src/io/atomic_file.cpp src/io/npy_header.cpp)
declare -A sources=(
  [npy]="fuzz/fuzz_npy.cpp ${io_core[*]} src/io/npy.cpp"
  [checkpoint]="fuzz/fuzz_checkpoint.cpp ${io_core[*]} src/io/json_strict.cpp src/io/safetensors.cpp src/model/checkpoint.cpp src/model/gpt.cpp"
  [vocab]="fuzz/fuzz_vocab.cpp src/io/npy_header.cpp src/io/json_strict.cpp src/model/tokenizer.cpp"
  [tokenizer]="fuzz/fuzz_tokenizer.cpp src/io/npy_header.cpp src/io/json_strict.cpp src/model/tokenizer.cpp"
)

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(npy checkpoint vocab tokenizer)

# Stale when missing or older than any file its compiler-written .d lists.
stale_obj() {
  [ -f "$1" ] && [ -f "$1.d" ] || return 0
  local dep
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$1.d"); do
    [ "$dep" -nt "$1" ] && return 0
  done
  return 1
}

for t in "${targets[@]}"; do
  [ -n "${sources[$t]+x}" ] || { echo "fuzz/build.sh: unknown target '$t'" >&2; exit 2; }
  objs=()
  for src in ${sources[$t]}; do
    obj="$out/obj/$(echo "$src" | tr / _).o"
    if stale_obj "$obj"; then
      echo "  CXX $src"
      "$CXX" "${flags[@]}" -MMD -MF "$obj.d" -c "$root/$src" -o "$obj"
    fi
    objs+=("$obj")
  done
  bin="$out/fuzz_$t"
  stale=0
  [ -f "$bin" ] || stale=1
  for obj in "${objs[@]}"; do [ "$obj" -nt "$bin" ] && stale=1; done
  if [ $stale -eq 1 ]; then
    echo "  LINK $bin"
    "$CXX" -fsanitize=fuzzer,address,undefined -fuse-ld=lld -Wl,--gc-sections "${objs[@]}" -o "$bin"
  fi
done
