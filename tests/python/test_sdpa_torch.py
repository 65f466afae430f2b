"""qkv.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention
in float64 on random problems: batch dims, GQA, bool and float masks broadcast from
smaller shapes, both causal alignments, N != S, Dv != D, scale, N = 1 decoding; half
of the cases pass NumPy arrays, half torch tensors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv

CASES = 320


def make_case(seed):
    r = np.random.default_rng(seed)
    lead = [(), (int(r.integers(1, 4)),), (int(r.integers(1, 3)), int(r.integers(1, 3)))][seed % 3]
    hkv = int(r.integers(1, 4))
    hq = hkv * int(r.integers(1, 4))
    n = 1 if r.random() < 0.2 else int(r.integers(1, 10))
    s = int(r.integers(1, 13))
    d = int(r.integers(1, 17))
    dv = d if r.random() < 0.5 else int(r.integers(1, 17))
    q = r.standard_normal(lead + (hq, n, d))
    k = r.standard_normal(lead + (hkv, s, d))
    v = r.standard_normal(lead + (hkv, s, dv))
    mask_kind = ["none", "bool", "float"][int(r.integers(0, 3))]
    mask = None
    if mask_kind != "none":
        full = lead + (hq, n, s)
        # broadcast: some dims kept at 1, some leading dims dropped
        shape = tuple(1 if r.random() < 0.4 else x for x in full)
        shape = shape[int(r.integers(0, len(lead) + 2)):] if r.random() < 0.5 else shape
        if mask_kind == "bool":
            mask = r.random(shape) < 0.75
        else:
            mask = r.standard_normal(shape)
            mask[r.random(shape) < 0.2] = -np.inf
    causal = ["none", "top-left", "bottom-right"][int(r.integers(0, 3))]
    scale = None if r.random() < 0.5 else float(r.uniform(0.05, 2.0))
    return q, k, v, mask, causal, scale


def torch_reference(q, k, v, mask, causal, scale):
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    gqa = q.shape[-3] != k.shape[-3]
    n, s = q.shape[-2], k.shape[-2]
    if causal == "top-left" and mask is None:
        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=scale,
                                             enable_gqa=gqa)
    else:
        tm = None if mask is None else torch.from_numpy(mask)
        if causal != "none":
            allowed = torch.ones(n, s, dtype=torch.bool).tril(0 if causal == "top-left" else s - n)
            if tm is None:
                tm = allowed
            elif tm.dtype == torch.bool:
                tm = tm & allowed
            else:
                tm = tm.masked_fill(~allowed, float("-inf"))
        out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, scale=scale,
                                             enable_gqa=gqa)
    # A row with no visible key: PyTorch gives NaN, qkv 0 (documented).
    return torch.nan_to_num(out, nan=0.0).numpy()


@pytest.mark.parametrize("seed", range(CASES))
def test_matches_torch_float64(seed):
    q, k, v, mask, causal, scale = make_case(seed)
    expected = torch_reference(q, k, v, mask, causal, scale)
    as_torch = seed % 2 == 1
    args = [torch.from_numpy(x) if as_torch else x for x in (q, k, v)]
    m = None if mask is None else (torch.from_numpy(mask) if as_torch else mask)
    out = qkv.scaled_dot_product_attention(
        *args, attn_mask=m, is_causal=causal != "none",
        causal="top-left" if causal == "none" else causal, scale=scale,
        enable_gqa=q.shape[-3] != k.shape[-3])
    if as_torch:
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
        out = out.numpy()
    else:
        assert isinstance(out, np.ndarray) and out.dtype == np.float64
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_float32_fast_kernel_matches_torch(seed):
    q, k, v, mask, causal, scale = make_case(1000 + seed)
    expected = torch_reference(q, k, v, mask, causal, scale)
    m = None if mask is None else (mask if mask.dtype == bool else mask.astype(np.float32))
    out = qkv.scaled_dot_product_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), attn_mask=m,
        is_causal=causal != "none", causal="top-left" if causal == "none" else causal,
        scale=scale, enable_gqa=True, kernel="fast", threads=2)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("seed", range(10))
def test_weights_and_lse(seed):
    q, k, v, mask, causal, scale = make_case(2000 + seed)
    out, w, lse = qkv.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal != "none",
        causal="top-left" if causal == "none" else causal, scale=scale, enable_gqa=True,
        return_weights=True, return_lse=True)
    g = q.shape[-3] // k.shape[-3]
    kk, vv = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    sc = q @ np.swapaxes(kk, -1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    n, s = q.shape[-2], k.shape[-2]
    if mask is not None:
        sc = np.where(mask, sc, -np.inf) if mask.dtype == bool else sc + mask
    if causal != "none":
        allowed = np.tril(np.ones((n, s), bool), 0 if causal == "top-left" else s - n)
        sc = np.where(allowed, sc, -np.inf)
    expected_lse = torch.logsumexp(torch.from_numpy(sc), dim=-1).numpy()
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-10, atol=1e-12)
    with np.errstate(invalid="ignore"):  # -inf - -inf in fully masked rows
        expected_w = np.nan_to_num(np.exp(sc - expected_lse[..., None]), nan=0.0)
    np.testing.assert_allclose(w, expected_w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out, w @ vv, rtol=1e-10, atol=1e-12)
