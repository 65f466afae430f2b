"""`qkv attention` against a float64 NumPy reference on random problems:
0-2 batch dims, GQA ratios, N != S, D and Dv from 1 to 130 (odd sizes too),
N = 1, bool / float / broadcast masks, both causal alignments, scale
overrides, float32 and float64; then as many again that also draw a sliding
window, key lengths, ALiBi (explicit or the paper's slopes), softcap and a
thread count. Every case runs with --kernel reference and --kernel fast."""
import numpy as np
import pytest

from reference import alibi_paper_slopes, attention

N_CASES = 120  # of each kind: plain, and with the mask options


def make_case(seed):
    rng = np.random.default_rng(seed)
    batch = tuple(int(x) for x in rng.integers(1, 4, size=rng.integers(0, 3)))
    hkv = int(rng.integers(1, 4))
    hq = hkv * int(rng.choice([1, 2, 4]))
    n = 1 if seed % 7 == 0 else int(rng.integers(1, 40))
    s = int(rng.integers(1, 40))
    d = int(rng.choice([1, 2, 3, 7, 16, 31, 64, 65, 127, 130]))
    dv = d if rng.random() < 0.5 else int(rng.integers(1, 131))
    dtype = np.float32 if seed % 2 == 0 else np.float64
    q = rng.normal(size=batch + (hq, n, d)).astype(dtype)
    k = rng.normal(size=batch + (hkv, s, d)).astype(dtype)
    v = rng.normal(size=batch + (hkv, s, dv)).astype(dtype)
    full = batch + (hq, n, s)
    kind = ["none", "bool", "float", "bool-broadcast", "float-broadcast"][seed % 5]
    mask = None
    if kind != "none":
        # Broadcast masks drop leading dims and set some of the rest to 1.
        shape = full if "broadcast" not in kind else tuple(
            1 if rng.random() < 0.5 else x for x in full[int(rng.integers(0, len(full))):])
        if kind.startswith("bool"):
            mask = rng.random(size=shape) < 0.8
        else:
            mask = np.where(rng.random(size=shape) < 0.15, -np.inf,
                            rng.normal(size=shape)).astype(np.float32)
    causal = ["none", "top-left", "bottom-right"][(seed // 5) % 3]
    scale = None if seed % 3 else float(rng.choice([1.0, 0.05, 2.5]))
    return dict(q=q, k=k, v=v, mask=mask, causal=causal, scale=scale)


def make_case_with_options(seed):
    """make_case(seed), plus window, key lengths, ALiBi, softcap and threads,
    each present in about half the cases ("alibi" = the paper's slopes)."""
    case = make_case(seed)
    rng = np.random.default_rng([seed, 1])
    hq, s = case["q"].shape[-3], case["k"].shape[-2]
    b = int(np.prod(case["q"].shape[:-3]))
    if rng.random() < 0.5:
        case["window"] = tuple(int(x) for x in rng.choice([-1, 0, 1, 3, 8], size=2))
    if rng.random() < 0.4:
        # Often 0 (a fully padded element) or S (no padding), else anything between.
        case["key_lengths"] = [int(rng.choice([0, s, rng.integers(0, s + 1)])) for _ in range(b)]
    if rng.random() < 0.4:
        case["alibi"] = "paper" if rng.random() < 0.5 else [float(x) for x in rng.uniform(0, 1, hq)]
    if rng.random() < 0.4:
        case["softcap"] = float(rng.choice([1.0, 5.0, 30.0]))
    case["threads"] = int(rng.choice([0, 1, 3]))
    return case


def case_for(seed):
    return make_case(seed) if seed < N_CASES else make_case_with_options(seed)


def run_case(c, kernel, run, tmp_path):
    """Runs `qkv attention` on case c; returns the process and its out, weights, lse."""
    for name in ("q", "k", "v"):
        np.save(tmp_path / f"{name}.npy", c[name])
    args = ["attention", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy",
            "--v", tmp_path / "v.npy", "--causal", c["causal"], "--kernel", kernel,
            "-o", tmp_path / "out.npy", "--weights", tmp_path / "w.npy",
            "--lse", tmp_path / "lse.npy"]
    if c["mask"] is not None:
        np.save(tmp_path / "mask.npy", c["mask"])
        args += ["--mask", tmp_path / "mask.npy"]
    if c["scale"] is not None:
        args += ["--scale", repr(c["scale"])]
    if "window" in c:
        args += [f"--window={c['window'][0]},{c['window'][1]}"]  # "=": the value may start with -
    if "key_lengths" in c:
        args += ["--key-lengths", ",".join(map(str, c["key_lengths"]))]
    if c.get("alibi") == "paper":
        args += ["--alibi"]
    elif "alibi" in c:
        args += ["--alibi-slopes", ",".join(map(repr, c["alibi"]))]
    if "softcap" in c:
        args += ["--softcap", repr(c["softcap"])]
    if "threads" in c:
        args += ["--threads", str(c["threads"])]
    r = run(*args)
    if r.returncode != 0:
        return r, None, None, None
    return r, *(np.load(tmp_path / f) for f in ("out.npy", "w.npy", "lse.npy"))


def numpy_attention(c, dtype=np.float64):
    alibi = c.get("alibi")
    slopes = alibi_paper_slopes(c["q"].shape[-3]) if alibi == "paper" else alibi
    return attention(c["q"], c["k"], c["v"], c["mask"], c["causal"], c["scale"],
                     window=c.get("window"), key_lengths=c.get("key_lengths"),
                     alibi_slopes=slopes, softcap=c.get("softcap", 0.0), dtype=dtype)


def max_err(got, want):
    """max |got - want| over the finite entries of want; -inf must match exactly."""
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    return float(np.abs(got[finite] - want[finite]).max(initial=0.0))


@pytest.mark.parametrize("kernel", ["reference", "fast"])
@pytest.mark.parametrize("seed", range(2 * N_CASES))
def test_matches_numpy(seed, kernel, run, tmp_path):
    c = case_for(seed)
    r, out, w, lse = run_case(c, kernel, run, tmp_path)
    if kernel == "fast" and c["q"].dtype == np.float64:
        # The fast kernel is float32 only; asking for it on float64 is bad data.
        assert r.returncode == 1 and "float32" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr

    want = numpy_attention(c)
    for got, exp in zip((out, w, lse), want):
        assert got.dtype == c["q"].dtype and got.shape == exp.shape
    assert not np.isnan(out).any() and not np.isnan(w).any() and not np.isnan(lse).any()
    empty = np.isneginf(want[2])
    assert (out[empty] == 0).all() and (w[empty] == 0).all()
    if kernel == "fast":
        # FlashAttention's rule: the fast kernel may be at most twice as far
        # from the float64 truth as plain float32 (every step in float32) is,
        # plus an absolute floor for cases where plain float32 is exact.
        plain = numpy_attention(c, np.float32)
        for name, got, exp, p32 in zip(("out", "weights", "lse"), (out, w, lse), want, plain):
            err, bound = max_err(got, exp), 2 * max_err(p32, exp) + 1e-5
            assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g}"
        return
    # The reference sums in double, so float32 inputs (exact float32 numbers)
    # carry only the final rounding: 2e-5 relative (issue #2), scaled by the
    # row's size.
    rtol = 2e-5 if c["q"].dtype == np.float32 else 1e-12
    atol = rtol * max(1.0, float(np.abs(want[0]).max()))
    np.testing.assert_allclose(out, want[0], rtol=rtol, atol=atol)
    np.testing.assert_allclose(w, want[1], rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    np.testing.assert_allclose(lse[~empty], want[2][~empty], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("hq", [1, 2, 3, 5, 6, 8, 12])
def test_alibi_flag_uses_the_paper_slopes(hq, run, tmp_path):
    rng = np.random.default_rng(hq)
    c = dict(q=rng.normal(size=(hq, 4, 8)), k=rng.normal(size=(1, 9, 8)),
             v=rng.normal(size=(1, 9, 3)), mask=None, causal="bottom-right", scale=None,
             alibi="paper")
    r, out, _, _ = run_case(c, "reference", run, tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(out, numpy_attention(c)[0], rtol=1e-12, atol=1e-12)
    plain = attention(c["q"], c["k"], c["v"], causal="bottom-right")[0]
    assert np.abs(out - plain).max() > 1e-3  # the slopes really bite


def test_cases_cover_the_space():
    """The random cases really include what the issues list."""
    cases = [case_for(s) for s in range(2 * N_CASES)]
    q = [c["q"] for c in cases]
    assert {x.ndim - 3 for x in q} == {0, 1, 2}
    assert any(c["q"].shape[-3] != c["k"].shape[-3] for c in cases)    # GQA
    assert any(x.shape[-2] == 1 for x in q)                             # N = 1
    assert any(c["q"].shape[-2] > c["k"].shape[-2] for c in cases)      # N > S
    assert any(c["q"].shape[-1] != c["v"].shape[-1] for c in cases)     # Dv != D
    assert {x.shape[-1] for x in q} >= {1, 65, 130}
    assert {c["causal"] for c in cases} == {"none", "top-left", "bottom-right"}
    assert any(c["scale"] == 1.0 for c in cases)
    assert any(c["mask"] is not None and c["mask"].ndim < c["q"].ndim for c in cases)
    assert {x.dtype for x in q} == {np.dtype(np.float32), np.dtype(np.float64)}
    extra = cases[N_CASES:]
    assert {w[0] for c in extra if (w := c.get("window"))} >= {-1, 0, 8}
    assert {w[1] for c in extra if (w := c.get("window"))} >= {-1, 0, 8}
    assert any(0 in c.get("key_lengths", []) for c in extra)
    assert any(c.get("alibi") == "paper" for c in extra)
    assert any(isinstance(c.get("alibi"), list) for c in extra)
    assert {c.get("softcap") for c in extra} >= {1.0, 30.0}
    assert {c["threads"] for c in extra} == {0, 1, 3}
    # Options together, and rows that nothing may see.
    assert any(len({"window", "key_lengths", "alibi", "softcap"} & c.keys()) >= 3 for c in extra)
    assert sum(np.isneginf(numpy_attention(c)[2]).any() for c in extra) >= 10


@pytest.mark.parametrize("layout", ["fortran", "big-endian", "fortran big-endian"])
def test_fortran_and_big_endian_inputs_match_c_order(layout, run, tmp_path):
    """np.asfortranarray and '>f4' files give the very bytes C-ordered '<f4' ones do."""
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((2, 5, 8), (2, 7, 8), (2, 7, 6)))
    outs = []
    for variant in ("c", layout):
        args = ["attention", "--causal", "bottom-right", "-o", tmp_path / f"out_{variant}.npy"]
        for name, x in (("q", q), ("k", k), ("v", v)):
            if "fortran" in variant:
                x = np.asfortranarray(x)
            if "big-endian" in variant:
                x = x.astype(">f4")
            np.save(tmp_path / f"{name}_{variant}.npy", x)
            args += [f"--{name}", tmp_path / f"{name}_{variant}.npy"]
        r = run(*args)
        assert r.returncode == 0, r.stderr
        outs.append(np.load(tmp_path / f"out_{variant}.npy"))
    assert outs[0].dtype == np.float32 and outs[0].flags.c_contiguous
    assert outs[0].tobytes() == outs[1].tobytes()
