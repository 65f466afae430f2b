"""`qkv attention --dtype bf16` and `qkv bench --dtype bf16`.

The CLI rounds float32/float64 .npy inputs to bfloat16 on load (round to
nearest even, via float32) and writes float32 results. The error rule: against
the float64 truth on the rounded values, at most 2x the error of a plain NumPy
bf16-input / float32-everywhere implementation (reference.py with float32),
plus the same 1e-5 floor as test_attention_numpy.py; for the fast kernel's
out, beyond what rounding the weights to bf16 may move it (see below)."""
import json

import numpy as np
import pytest

from test_attention_numpy import case_for, max_err, numpy_attention, run_case


def to_bf16(x):
    """x rounded to bfloat16 (nearest even), as float32 values."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def test_rounding_helper_ties_to_even():
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -2.5], np.float32)
    np.testing.assert_array_equal(to_bf16(x), [1.0, 1.0, 1.0 + 2.0**-6, -2.5])


@pytest.mark.parametrize("kernel", ["fast", "auto", "reference"])
@pytest.mark.parametrize("seed", range(0, 240, 6))
def test_bf16_matches_plain_rule(seed, kernel, run, tmp_path, monkeypatch):
    c = case_for(seed)
    r, out, w, lse = run_case(c, kernel, lambda *a: run(*a, "--dtype", "bf16"), tmp_path)
    assert r.returncode == 0, r.stderr
    rounded = dict(c, q=to_bf16(c["q"]), k=to_bf16(c["k"]), v=to_bf16(c["v"]))
    want = numpy_attention(rounded)
    plain = numpy_attention(rounded, np.float32)
    for name, got, exp, p32 in zip(("out", "weights", "lse"), (out, w, lse), want, plain):
        assert got.dtype == np.float32 and got.shape == exp.shape, name
        err, bound = max_err(got, exp), 2 * max_err(p32, exp) + 1e-5
        if name == "out" and kernel != "reference":
            # With AVX512-BF16 the weights are rounded to bf16 for P·V (as
            # PyTorch's bf16 kernel does), which moves an output by at most
            # 2^-9 sum_j w_j |v_j|: allowed twice that, element by element.
            spread = numpy_attention(dict(rounded, v=np.abs(rounded["v"])))[0]
            excess = np.abs(got.astype(np.float64) - exp) - 2.0**-8 * spread
            err = max(0.0, float(np.nanmax(excess, initial=0.0)))
        assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g}"


def test_help_says_inputs_are_converted(run):
    r = run("attention", "--help")
    assert r.returncode == 0
    assert "bfloat16 on load" in r.stdout and "float32" in r.stdout


def test_bench_bf16_json(run):
    r = run("bench", "--json", "--reps", "2", "--warmup", "1", "--n", "40", "--s", "70", "--d",
            "16", "--heads", "2", "--threads", "1", "--dtype", "bf16", "--compare-reference")
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(line) for line in r.stdout.strip().splitlines()]
    assert row["dtype"] == "bf16" and row["case"].endswith(" bf16")
    assert row["isa"] in ("scalar", "avx2", "avx512", "avx512bf16", "amx")
    assert row["cpu"]
    # A bf16 out against the float32 reference on the same (rounded) inputs:
    # bf16 rounding of values below 1 in magnitude.
    assert 0 <= row["max_abs_err"] < 2.0**-8


def test_bench_rejects_unknown_dtype(run):
    r = run("bench", "--dtype", "float16")
    assert r.returncode == 2
