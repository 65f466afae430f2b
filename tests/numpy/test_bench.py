"""`qkv bench` on tiny shapes: the JSON it prints has the promised keys and
sane values, the work it counts matches the mask, and bad options exit 2
with one clear line. No timing assertions: this machine is shared and slow
runs must not fail CI."""
import json

import numpy as np
import pytest

USAGE = 2
KEYS = {"case", "batch", "heads", "kv_heads", "n", "s", "d", "dv", "causal", "window", "kernel",
        "isa", "threads", "reps", "warmup", "pairs", "flops", "median_ms", "gflops", "peak_gflops",
        "peak_fraction", "peak_gflops_1t", "peak_busy", "ref_ms", "ref_rows", "ref_scaled",
        "speedup", "rss_mb", "kv_gbps", "mem_gbps", "bw_fraction", "max_abs_err"}


def bench_json(run, *args):
    r = run("bench", "--json", "--reps", "2", "--warmup", "1", *args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    return [json.loads(line) for line in lines]


def visible_pairs(n, s, causal, window):
    """Visible (query, key) pairs of one head, from the rules in qkv/attention.h."""
    i, j = np.arange(n)[:, None], np.arange(s)[None, :]
    diag = i + s - n if causal == "bottom-right" else i
    visible = np.ones((n, s), bool)
    if causal != "none" or window is not None:
        visible &= j <= diag
    if window is not None:
        visible &= j >= diag - window
    return int(visible.sum())


@pytest.mark.parametrize("kernel", ["reference", "fast", "auto"])
def test_tiny_case_json_is_sane(run, kernel):
    (row,) = bench_json(run, "--n", "8", "--s", "8", "--d", "4", "--heads", "2", "--threads",
                        "1", "--kernel", kernel)
    assert KEYS <= row.keys()
    assert (row["n"], row["s"], row["d"], row["dv"], row["heads"], row["kv_heads"]) == \
        (8, 8, 4, 4, 2, 2)
    assert row["kernel"] == kernel and row["threads"] == 1
    assert row["isa"] in ("scalar", "avx2", "avx512", "avx512bf16", "amx")
    for key in ("median_ms", "gflops", "peak_gflops", "ref_ms", "speedup", "rss_mb"):
        assert row[key] > 0, key
    assert 0 < row["peak_fraction"] < 1.5
    assert row["pairs"] == 2 * 8 * 8 and row["flops"] == row["pairs"] * (2 * 4 + 2 * 4)
    # N <= 16 is a decode shape: K/V bandwidth against the measured memory bandwidth.
    assert row["kv_gbps"] > 0 and row["mem_gbps"] > 0 and row["bw_fraction"] > 0
    assert row["max_abs_err"] is None  # only with --compare-reference


@pytest.mark.parametrize("causal, window", [("none", None), ("top-left", None),
                                            ("bottom-right", None), ("none", 3),
                                            ("bottom-right", 5)])
def test_counts_only_visible_pairs(run, causal, window):
    n, s, d, dv = 24, 30, 5, 3
    args = ["--batch", "2", "--heads", "4", "--kv-heads", "2", "--n", n, "--s", s, "--d", d,
            "--dv", dv, "--causal", causal, "--compare-reference"]
    if window is not None:
        args += ["--window", window]
    (row,) = bench_json(run, *args)
    pairs = 2 * 4 * visible_pairs(n, s, causal, window)
    assert row["pairs"] == pairs
    assert row["flops"] == pytest.approx(pairs * (2 * d + 2 * dv))
    assert row["causal"] == causal and row["window"] == window
    assert row["kv_gbps"] is None and row["bw_fraction"] is None  # not a decode shape
    assert 0 <= row["max_abs_err"] < 1e-4
    assert row["ref_rows"] == 0 and row["ref_scaled"] is False  # small: reference timed whole


def test_decode_bandwidth_counts_each_visible_key_once(run):
    # 4 queries, bottom-right window 5 over 40 keys: rows see keys 31..36, 32..37, 33..38 and
    # 34..39, so each of the 2 K/V heads (shared by 3 query heads) reads keys 31..39 once.
    (row,) = bench_json(run, "--n", "4", "--s", "40", "--d", "8", "--dv", "4", "--heads", "6",
                        "--kv-heads", "2", "--causal", "bottom-right", "--window", "5")
    kv_bytes = 2 * 9 * (8 + 4) * 4
    assert row["kv_gbps"] * row["median_ms"] * 1e6 == pytest.approx(kv_bytes, rel=1e-4)
    assert row["bw_fraction"] == pytest.approx(row["kv_gbps"] / row["mem_gbps"], rel=1e-4)


def test_reference_on_a_subset_when_the_problem_is_big(run):
    (row,) = bench_json(run, "--n", "1024", "--d", "64", "--heads", "2", "--compare-reference")
    assert row["ref_scaled"] is True and row["ref_rows"] == 64
    assert row["ref_ms"] > 0 and 0 <= row["max_abs_err"] < 1e-4


def test_text_table(run):
    r = run("bench", "--n", "20", "--d", "8", "--causal", "top-left", "--reps", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "measured on this machine: FMA peak" in out and "GFLOP/s" in out
    assert "B1 H8/8 N20 S20 D8 top-left" in out
    assert "counts only the visible (query, key) pairs" in out


def test_help(run):
    r = run("bench", "--help")
    assert r.returncode == 0 and "--suite" in r.stdout and "--kv-heads" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n: expected a positive integer, found 0"),
    (["--d", "-3"], "--d: expected a positive integer, found -3"),
    (["--s", "0"], "--s: expected a positive integer, found 0"),
    (["--kv-heads", "0"], "--kv-heads: expected a positive integer, found 0"),
    (["--heads", "6", "--kv-heads", "4"], "--kv-heads: expected a divisor of --heads 6, found 4"),
    (["--kernel", "fastest"], "--kernel: expected reference, fast or auto, found 'fastest'"),
    (["--causal", "sideways"],
     "--causal: expected none, top-left or bottom-right, found 'sideways'"),
    (["--reps", "0"], "--reps: expected a positive integer, found 0"),
    (["--threads", "-1"], "--threads: expected an integer from 0 (all cores) to "),
    (["--window", "-2"], "--window: expected a non-negative integer, found -2"),
    (["--n", "abc"], "--n"),
    (["--suite", "--n", "8"], "--suite"),
])
def test_bad_options(run, args, message):
    r = run("bench", *args)
    assert r.returncode == USAGE, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert r.stderr.startswith("qkv bench: error: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout == ""
