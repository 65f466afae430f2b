#!/usr/bin/env bash
# Builds the GEMM benchmark (bench/gemm/CMakeLists.txt) and runs every backend
# it found at 1..THREADS threads (default 2), printing Markdown tables.
#   bash bench/gemm/run.sh [THREADS]
# Needs: libdnnl-dev libopenblas-openmp-dev libblis-openmp-dev libeigen3-dev, and
# MKL from PyPI in ~/.cache/qkv/mkl (bench/gemm/CMakeLists.txt says how; those
# missing are skipped). Other jobs on the machine distort the 2-thread
# figures badly (an OpenMP thread that loses its core stalls the other at the
# next barrier): run it on a quiet machine, twice, and compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-2}
build=build/gemm-bench
cmake -S bench/gemm -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j1 >/dev/null
run() { [ -x "$build/$1" ] && "${@:2}" "$build/$1" "$threads"; }
run gemm_bench_qkv env
run gemm_bench_dnnl env
run gemm_bench_qkv_bf16 env
run gemm_bench_dnnl_bf16 env
run gemm_bench_mkl env
run gemm_bench_mkl_bf16 env
echo "oneDNN limited to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2: what a CPU without AVX-512 gets):"
echo
run gemm_bench_qkv env ONEDNN_MAX_CPU_ISA=AVX2
run gemm_bench_openblas env
run gemm_bench_blis env
echo "BLIS with its Skylake-X kernels forced (BLIS_ARCH_TYPE=skx):"
echo
run gemm_bench_blis env BLIS_ARCH_TYPE=skx
for isa in sse2 avx2 avx512; do run gemm_bench_eigen_$isa env; done
