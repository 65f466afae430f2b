"""Property-based checks of the Python entry points (Hypothesis): random
shapes, dtypes and layouts (negative, zero and Fortran strides, neg-bit torch
tensors), masks and options against a float64 NumPy reference; and random
invalid arguments, which must raise TypeError or ValueError naming the
argument, never crash or be read as something else. The budget is fixed
(about 60 s in all on a busy 2-core machine): max_examples below;
derandomize=True makes every run try the same examples. A longer, random
search: QKV_HYPOTHESIS_SCALE=20 multiplies every max_examples and draws
fresh examples."""
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qkv

SCALE = int(os.environ.get("QKV_HYPOTHESIS_SCALE", "1"))
BUDGET = settings(deadline=None, max_examples=2000 * SCALE, derandomize=SCALE == 1,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def reference(q, k, v, mask=None, causal=None, window=None, key_lengths=None):
    """softmax(q kᵀ / sqrt(D) + mask) v in float64, rows with no visible key 0."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq, hkv = q.shape[-3], k.shape[-3]
    k = np.repeat(k, hq // hkv, axis=-3)
    v = np.repeat(v, hq // hkv, axis=-3)
    n, s = q.shape[-2], k.shape[-2]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    visible = np.ones(scores.shape, dtype=bool)
    i, j = np.arange(n)[:, None], np.arange(s)[None, :]
    diag = i + (s - n if causal == "bottom-right" else 0)
    if causal:
        visible &= j <= diag
    if window:
        left, right = window
        visible &= (j >= diag - left) & (j <= diag + right)
    if key_lengths is not None:
        lengths = np.asarray(key_lengths).reshape(q.shape[:-3] + (1, 1, 1))
        visible &= j < lengths
    if mask is not None:
        if mask.dtype == bool:
            visible &= mask
        else:
            scores = scores + mask
    scores = np.where(visible, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = e.sum(axis=-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return w @ v


def layout(data, x, name):
    """x in one of several memory layouts (a broadcast one repeats x's first row)."""
    kind = data.draw(st.sampled_from(["c", "fortran", "reversed", "broadcast", "padded"]),
                     label=f"{name} layout")
    if kind == "fortran":
        return np.asfortranarray(x)
    if kind == "reversed":  # negative strides, the values unchanged
        flipped = np.ascontiguousarray(x[..., ::-1, :])
        return flipped[..., ::-1, :]
    if kind == "broadcast":  # zero stride over rows (all rows the first one)
        return np.broadcast_to(x[..., :1, :], x.shape)
    if kind == "padded":  # a slice of a wider array: strided rows
        wide = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), dtype=x.dtype)
        wide[..., :x.shape[-1]] = x
        return wide[..., :x.shape[-1]]
    return x


@st.composite
def problems(draw):
    b = draw(st.integers(1, 2))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 2))
    n, s = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    g = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = g.standard_normal((b, hq, n, d)).astype(dtype)
    k = g.standard_normal((b, hkv, s, d)).astype(dtype)
    v = g.standard_normal((b, hkv, s, dv)).astype(dtype)
    kw = {}
    if draw(st.booleans()):
        kw["is_causal"] = True
        kw["causal"] = draw(st.sampled_from(["top-left", "bottom-right"]))
    if draw(st.booleans()):
        kw["window"] = (draw(st.integers(0, 6)), draw(st.integers(0, 6)))
    if draw(st.booleans()):
        kw["key_lengths"] = [draw(st.integers(0, s)) for _ in range(b)]
    mask_kind = draw(st.sampled_from([None, "bool", "float"]))
    if mask_kind == "bool":
        kw["attn_mask"] = g.random((n, s)) < 0.7
    elif mask_kind == "float":
        kw["attn_mask"] = g.standard_normal((1, n, s)).astype(dtype)
    return q, k, v, kw


@BUDGET
@given(problems(), st.data())
def test_matches_the_float64_reference(problem, data):
    q, k, v, kw = problem
    q, k, v = layout(data, q, "q"), layout(data, k, "k"), layout(data, v, "v")
    got = qkv.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
    want = reference(q, k, v, mask=kw.get("attn_mask"),
                     causal=kw.get("causal") if kw.get("is_causal") else None,
                     window=kw.get("window"), key_lengths=kw.get("key_lengths"))
    tol = 1e-4 if q.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@settings(BUDGET, max_examples=300 * SCALE)
@given(problems(), st.sampled_from(["query", "key", "value"]))
def test_neg_bit_tensors_read_as_their_values(problem, which):
    q, k, v, kw = problem
    kw.pop("attn_mask", None)
    t = dict(query=torch.from_numpy(q), key=torch.from_numpy(k), value=torch.from_numpy(v))
    plain = qkv.scaled_dot_product_attention(enable_gqa=True, **t, **kw)
    t[which] = torch._neg_view(-t[which])  # the same values, the neg bit set
    assert t[which].is_neg()
    lazy = qkv.scaled_dot_product_attention(enable_gqa=True, **t, **kw)
    assert torch.equal(lazy, plain)


# Invalid arguments: a value of the wrong kind or out of range, for one
# option at a time; the error must name that option.
BAD = {
    "key_lengths": st.one_of(st.floats(allow_nan=True), st.text(max_size=3),
                             st.lists(st.one_of(st.floats(), st.text(max_size=2)), min_size=1,
                                      max_size=2), st.just([2**64]), st.just([-1])),
    "window": st.one_of(st.integers(), st.text(max_size=3), st.tuples(st.integers(), ),
                        st.tuples(st.floats(), st.integers(0, 3)),
                        st.tuples(st.integers(2**63, 2**70), st.integers(0, 3)),
                        st.tuples(st.integers(-2**70, -2), st.integers(0, 3))),
    "threads": st.one_of(st.integers(-2**70, -1), st.integers(10**5, 2**70), st.floats(),
                         st.text(max_size=3), st.none()),
    "softcap": st.one_of(st.text(max_size=3), st.floats(max_value=-1e-3),
                         st.just(math.inf), st.just(math.nan)),
    "alibi_slopes": st.one_of(st.text(min_size=1, max_size=3), st.lists(st.floats(), min_size=3,
                                                                         max_size=3)),
    "scale": st.one_of(st.text(max_size=3), st.just(math.inf), st.just(math.nan)),
    "kernel": st.one_of(st.integers(), st.text(max_size=5).filter(
        lambda s: s not in ("auto", "fast", "reference"))),
    "causal": st.one_of(st.integers(), st.none(), st.text(max_size=5).filter(
        lambda s: s not in ("top-left", "bottom-right"))),
}


@settings(BUDGET, max_examples=1500 * SCALE)
@given(st.sampled_from(sorted(BAD)), st.data())
def test_invalid_options_name_the_argument(name, data):
    value = data.draw(BAD[name], label=name)
    q, k, v = (np.random.default_rng(i).random((1, 2, 3, 4)) for i in range(3))
    kw = {name: value}
    if name == "causal":
        kw["is_causal"] = True
    with pytest.raises((TypeError, ValueError)) as info:
        qkv.scaled_dot_product_attention(q, k, v, **kw)
    assert name in str(info.value), (name, value, str(info.value))


BAD_ARRAYS = st.one_of(
    st.sampled_from([np.int32, np.int64, np.float16, np.complex64, object, "datetime64[s]",
                     np.longdouble, "U3", ">i4", "V8"]).map(lambda dt: ("dtype", dt)),
    st.sampled_from([(), (4,), (0, 3, 4), (1, 2, 0, 4)]).map(lambda s: ("shape", s)),
    st.sampled_from([[1.0, 2.0], "abc", 3.0, None]).map(lambda x: ("value", x)),
)


@settings(BUDGET, max_examples=600 * SCALE)
@given(st.sampled_from(["query", "key", "value"]), BAD_ARRAYS)
def test_invalid_arrays_name_the_argument(which, bad):
    args = {n: np.random.default_rng(i).random((1, 2, 3, 4)) for i, n in
            enumerate(["query", "key", "value"])}
    kind, x = bad
    if kind == "dtype":
        args[which] = np.zeros((1, 2, 3, 4)).astype(x)
    elif kind == "shape":
        args[which] = np.zeros(x)
    else:
        args[which] = x
    with pytest.raises((TypeError, ValueError)) as info:
        qkv.scaled_dot_product_attention(**args)
    message = str(info.value)
    short = {"query": "q", "key": "k", "value": "v"}[which]
    assert which in message or message.startswith(short) or f"{short}," in message \
        or f", {short}" in message, (which, bad, message)


def test_big_endian_floats_read_as_native():
    q, k, v = (np.random.default_rng(i).random((1, 2, 3, 4)) for i in range(3))
    want = qkv.scaled_dot_product_attention(q, k, v)
    got = qkv.scaled_dot_product_attention(q.astype(">f8"), k.astype(">f8"), v.astype(">f8"))
    np.testing.assert_array_equal(got, want)
