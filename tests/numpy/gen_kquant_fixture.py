"""Write tests/numpy/data/kquant.npz: float32 rows and the Q4_K, Q5_K and
Q6_K blocks ggml's reference quantizers (quantize_row_q4_K_ref, ...: what
llama-quantize writes without an importance matrix) make of them. The gguf
Python package dequantizes K-quants but does not quantize them, so
test_gguf.py checks qkv's quantizers against these blocks.

Run by hand with llama.cpp built (libggml-base.so from its build/bin):
  python3 tests/numpy/gen_kquant_fixture.py path/to/libggml-base.so
"""
import ctypes
import sys
from pathlib import Path

import numpy as np

QK_K = 256
BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}


def inputs():
    rng = np.random.default_rng(2026)
    edge = [
        np.zeros(QK_K),                                   # every scale 0
        np.full(QK_K, 5.0),                               # constant: max == min per sub-block
        np.abs(rng.standard_normal(QK_K)),                # no negative weight: the min is pinned to 0
        -np.abs(rng.standard_normal(QK_K)),               # no positive weight
        rng.standard_normal(QK_K) * 1e-8,                 # scales below f16's smallest normal
        rng.standard_t(2, QK_K),                          # heavy tails
        np.r_[rng.standard_normal(QK_K - 1) * 0.01, 40.0],  # one outlier
        rng.standard_normal(QK_K) * 1e4,                  # large
        np.repeat(rng.standard_normal(16), 16),           # constant sub-blocks
    ]
    ordinary = [rng.standard_normal(QK_K) * s for s in rng.choice([1e-3, 0.02, 1.0, 30.0], size=55)]
    return np.concatenate(edge + ordinary).astype(np.float32)


def main():
    lib = ctypes.CDLL(sys.argv[1])
    x = inputs()
    out = {"x": x}
    for name, size in BYTES.items():
        fn = getattr(lib, f"quantize_row_{name[0].lower()}{name[1]}_K_ref")
        blocks = np.zeros(x.size // QK_K * size, np.uint8)
        fn(x.ctypes.data_as(ctypes.c_void_p), blocks.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
        out[name] = blocks
    path = Path(__file__).parent / "data" / "kquant.npz"
    np.savez_compressed(path, **out)
    print(f"wrote {path}: {x.size // QK_K} blocks")


if __name__ == "__main__":
    main()
