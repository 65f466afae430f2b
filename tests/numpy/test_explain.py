"""`qkv explain`: every stage printed, weights consistent with NumPy, a PNG
with one panel per head."""
import re
import struct

import numpy as np

from reference import attention


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_explain_tokens_prints_every_stage(run, tmp_path):
    png = tmp_path / "attn.png"
    r = run("explain", "--tokens", "the cat sat on the mat", "--heads", "2", "--causal",
            "top-left", "--png", png, "--no-color")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for stage in ("token embeddings X", "projections: Q = X W_q", "-- head 0 --", "-- head 1 --",
                  "scores = q kᵀ · scale", "weights = softmax", "head output", "heads concatenated",
                  "output = concat · W_o", "MultiHeadAttention::forward gives the same output"):
        assert stage in out, stage
    for word in ("the", "cat", "sat", "on", "mat"):
        assert word in out
    assert "\x1b[" not in out  # --no-color
    diff = float(re.search(r"max \|diff\| = ([0-9.e+-]+)", out).group(1))
    assert diff < 1e-12
    width, height = png_size(png)
    assert width > 100 and height > 50
    assert "wrote 2 heatmap panels" in out


def test_explain_is_deterministic_and_seeded(run):
    a = run("explain", "--seed", "3", "--no-color").stdout
    b = run("explain", "--seed", "3", "--no-color").stdout
    c = run("explain", "--seed", "4", "--no-color").stdout
    assert a == b and a != c


def test_explain_npy_inputs_gqa(run, tmp_path):
    rng = np.random.default_rng(5)
    q = rng.normal(size=(4, 3, 8)).astype(np.float32)
    k = rng.normal(size=(2, 6, 8)).astype(np.float32)
    v = rng.normal(size=(2, 6, 8)).astype(np.float32)
    for name, a in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", a)
    png = tmp_path / "w.png"
    r = run("explain", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
            tmp_path / "v.npy", "--causal", "bottom-right", "--png", png, "--no-color")
    assert r.returncode == 0, r.stderr
    assert "-- head 3 (reads key/value head 1) --" in r.stdout
    assert "wrote 4 heatmap panels" in r.stdout
    # The printed weights of head 3 agree with NumPy (4 decimals).
    _, w, _ = attention(q, k, v, causal="bottom-right")
    block = r.stdout.split("-- head 3")[1].split("weights = softmax")[1].split("\n", 1)[1]
    rows = re.findall(r"\[\[?([^\]]+)\]", block)[:3]
    got = np.array([[float(x) for x in row.split()] for row in rows])
    np.testing.assert_allclose(got, w[3], atol=6e-5)
    png_size(png)


def test_explain_png_unwritable(run, tmp_path):
    r = run("explain", "--png", tmp_path / "missing" / "x.png", "--no-color")
    assert r.returncode == 1
    assert "cannot write" in r.stderr
