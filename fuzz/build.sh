#!/usr/bin/env bash
# fuzz/build.sh: builds the libFuzzer targets into build/fuzz/ with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   bash fuzz/build.sh            # all targets: npy checkpoint gguf vocab tokenizer model cli
#   bash fuzz/build.sh npy        # one target
#
# Standalone (no CMake, no oneDNN): each target is compiled with only the
# library sources it needs. Needs Debian's clang and libclang-rt-14-dev.
# Except `cli`, `checkpoint` and `model`: what they load builds a GPT, which
# reaches the whole library, so they link the release build's layer archives
# (libqkv_*.a: cmake --build --preset release first) with oneDNN, stb and
# libgomp; only their own sources are instrumented.
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
io_core=(src/core/tensor.cpp src/core/zeroed_memory.cpp src/core/runtime/interrupt.cpp src/core/view.cpp src/io/byte_source.cpp src/io/atomic_file.cpp src/io/npy_header.cpp)
declare -A sources=(
  [npy]="fuzz/fuzz_npy.cpp ${io_core[*]} src/io/npy.cpp"
  [checkpoint]="fuzz/fuzz_checkpoint.cpp ${io_core[*]} src/io/json_strict.cpp src/io/safetensors.cpp src/model/checkpoint.cpp src/model/gpt.cpp"
  # (safetensors.cpp for float_from_half, which the f16 scales use)
  [gguf]="fuzz/fuzz_gguf.cpp ${io_core[*]} src/io/json_strict.cpp src/io/safetensors.cpp src/io/mapped_file.cpp src/io/gguf.cpp src/io/gguf_types.cpp src/io/gguf_metadata.cpp src/linalg/weight_types.cpp src/linalg/quant_32.cpp src/linalg/quant_k.cpp src/linalg/quant_k_make.cpp"
  [vocab]="fuzz/fuzz_vocab.cpp src/io/npy_header.cpp src/io/json_strict.cpp src/text/tokenizer.cpp"
  [tokenizer]="fuzz/fuzz_tokenizer.cpp src/io/npy_header.cpp src/io/json_strict.cpp src/text/tokenizer.cpp"
  [model]="fuzz/fuzz_model.cpp ${io_core[*]} src/io/json_strict.cpp src/io/safetensors.cpp src/model/checkpoint.cpp src/model/gpt.cpp src/text/tokenizer.cpp"
  # Every file of the command but its main() and the MPI entries (built
  # without QKV_HAVE_MPI: --sequence-parallel is a usage error here, and
  # train never starts data parallelism).
  [cli]="fuzz/fuzz_cli.cpp $(cd "$root" && ls tools/qkv/*.cpp | grep -v -e /main.cpp -e /sequence_parallel.cpp -e /data_parallel.cpp | tr '\n' ' ')"
)
# What a target links besides its objects. A model directory's loader builds
# a GPT, which needs the layers, the GEMM and the attention kernels: those
# come from the release build's static libraries, uninstrumented, while the
# parsers above are compiled here with the sanitizers. The loader's own
# objects come first and win (--allow-multiple-definition), so the archives
# only fill in what the harness does not compile itself.
release_libs="-Wl,--allow-multiple-definition $root/build/release/libqkv_model.a $root/build/release/libqkv_text.a $root/build/release/libqkv_linalg.a \
  $root/build/release/libqkv_io.a $root/build/release/libqkv_core.a -ldnnl -lutf8proc -lgomp -lpthread"
declare -A libs=(
  [checkpoint]="$release_libs"
  [model]="$release_libs"
  [cli]="$root/build/release/libqkv_cli_support.a $root/build/release/libqkv_viz.a $release_libs -lstb"
)

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(npy checkpoint gguf vocab tokenizer model cli)

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
      "$CXX" "${flags[@]}" -I"$root/tools/qkv" -MMD -MF "$obj.d" -c "$root/$src" -o "$obj"
    fi
    objs+=("$obj")
  done
  bin="$out/fuzz_$t"
  stale=0
  [ -f "$bin" ] || stale=1
  for obj in "${objs[@]}"; do [ "$obj" -nt "$bin" ] && stale=1; done
  if [ -n "${libs[$t]+x}" ]; then
    lib="$root/build/release/libqkv_core.a"
    [ -f "$lib" ] || { echo "fuzz/build.sh: $t links $lib: build the release preset first" >&2; exit 2; }
    [ "$lib" -nt "$bin" ] && stale=1
  fi
  if [ $stale -eq 1 ]; then
    echo "  LINK $bin"
    # shellcheck disable=SC2086  # the library list splits on purpose
    # libgomp: a tensor asks omp_in_parallel() before zeroing in slices.
    "$CXX" -fsanitize=fuzzer,address,undefined -fuse-ld=lld -Wl,--gc-sections "${objs[@]}" \
      ${libs[$t]:-} -lgomp -o "$bin"
  fi
done
