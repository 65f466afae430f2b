"""2-D q, k, v, the lessons' (N, D) arrays, are one head in `qkv attention`
and `qkv explain`; the results come back 2-D as well."""
import re

import numpy as np
import pytest

from reference import attention


def save(tmp_path, **arrays):
    paths = {}
    for name, a in arrays.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], a)
    return paths


@pytest.mark.parametrize("dtype, kernel", [(np.float64, "reference"), (np.float32, "fast"),
                                           (np.float32, "reference")])
@pytest.mark.parametrize("causal", ["none", "top-left", "bottom-right"])
def test_attention_2d_is_one_head(run, tmp_path, dtype, kernel, causal):
    rng = np.random.default_rng(7)
    q = rng.normal(size=(5, 8)).astype(dtype)
    k = rng.normal(size=(7, 8)).astype(dtype)
    v = rng.normal(size=(7, 3)).astype(dtype)
    mask = rng.random(size=(5, 7)) < 0.8
    p = save(tmp_path, q=q, k=k, v=v, mask=mask)
    r = run("attention", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--mask", p["mask"],
            "--causal", causal, "--kernel", kernel, "--weights", tmp_path / "w.npy",
            "--lse", tmp_path / "l.npy", "-o", tmp_path / "o.npy")
    assert r.returncode == 0, r.stderr
    assert f"out [5, 3] {np.dtype(dtype).name}" in r.stdout
    out, w, lse = (np.load(tmp_path / f"{n}.npy") for n in ("o", "w", "l"))
    assert out.shape == (5, 3) and w.shape == (5, 7) and lse.shape == (5,)
    want_out, want_w, want_lse = attention(q[None], k[None], v[None], mask=mask, causal=causal)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(out, want_out[0], atol=tol)
    np.testing.assert_allclose(w, want_w[0], atol=tol)
    np.testing.assert_allclose(lse, want_lse[0], atol=tol)

    # Exactly what the same data gives as one head [1, N, D].
    p3 = save(tmp_path, q3=q[None], k3=k[None], v3=v[None])
    r = run("attention", "--q", p3["q3"], "--k", p3["k3"], "--v", p3["v3"], "--mask", p["mask"],
            "--causal", causal, "--kernel", kernel, "-o", tmp_path / "o3.npy")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o3.npy")[0], out)


def test_attention_2d_lesson_arrays(run, tmp_path):
    """The lesson's own Q, K, V (2.2: its X, default_rng(42), d_k 3) straight
    from NumPy into qkv attention give the lesson's out."""
    X = np.array([[0.1, 0.0, 0.2, 0.0], [0.9, 0.8, 0.1, 0.3],
                  [0.2, 0.9, 0.7, 0.1], [0.1, 0.3, 0.9, 0.4]])
    rng = np.random.default_rng(42)
    Wq, Wk, Wv = (rng.normal(size=(4, 3)) for _ in range(3))
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    p = save(tmp_path, q=Q, k=K, v=V)
    r = run("attention", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--weights",
            tmp_path / "w.npy", "-o", tmp_path / "o.npy")
    assert r.returncode == 0, r.stderr
    s = Q @ K.T / np.sqrt(3)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    weights = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.load(tmp_path / "w.npy"), weights, atol=1e-14)
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), weights @ V, atol=1e-14)
    with np.printoptions(precision=2, suppress=True):
        assert str(np.load(tmp_path / "w.npy")).splitlines()[1] == " [0.49 0.04 0.22 0.25]"


def test_explain_2d(run, tmp_path):
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(4, 6)), rng.normal(size=(5, 6)), rng.normal(size=(5, 2))
    p = save(tmp_path, q=q, k=k, v=v)
    r = run("explain", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--no-color")
    assert r.returncode == 0, r.stderr
    assert "q, k, v are 2-D (N, D): one head" in r.stdout
    assert "-- head 0 --" in r.stdout and "-- head 1" not in r.stdout
    assert "head output = weights · v [4, 2]" in r.stdout
    _, w, _ = attention(q[None], k[None], v[None])
    block = r.stdout.split("weights = softmax")[1].split("\n", 1)[1]
    rows = re.findall(r"\[\[?([^\]]+)\]", block)[:4]
    got = np.array([[float(x) for x in row.split()] for row in rows])
    np.testing.assert_allclose(got, w[0], atol=6e-5)


def test_2d_mixed_with_3d_is_refused(run, tmp_path):
    p = save(tmp_path, q=np.zeros((4, 3)), k=np.zeros((1, 4, 3)), v=np.zeros((4, 3)))
    for cmd in (["attention", "-o", tmp_path / "o.npy"], ["explain"]):
        r = run(*cmd, "--q", p["q"], "--k", p["k"], "--v", p["v"])
        assert r.returncode == 1
        assert "q, k, v: expected all three 2-D (N, D) for one head" in r.stderr
