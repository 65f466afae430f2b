"""qkv.torch.scaled_dot_product_attention under torch.autograd.gradcheck (float64):
every mask kind, both causal alignments, GQA, and qkv's own options; and
qkv.attention_backward against PyTorch's autograd of its own SDPA."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
import qkv.torch as qt


def inputs(hq=4, hkv=2, n=3, s=5, d=4, dv=3, lead=(2,), seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    return mk(*lead, hq, n, d), mk(*lead, hkv, s, d), mk(*lead, hkv, s, dv)


def masks(n, s):
    g = torch.Generator().manual_seed(5)
    bool_mask = torch.rand(n, s, generator=g) < 0.7
    bool_mask[:, 0] = True  # every row sees something
    float_mask = torch.randn(1, n, s, generator=g, dtype=torch.float64)
    float_mask[..., 1] = float("-inf")
    return {"none": None, "bool": bool_mask, "float": float_mask}


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize("causal", [None, "top-left", "bottom-right"])
@pytest.mark.parametrize("hkv", [4, 2, 1])
def test_gradcheck(mask_kind, causal, hkv):
    q, k, v = inputs(hkv=hkv, n=3, s=5)
    mask = masks(3, 5)[mask_kind]
    kw = dict(is_causal=causal is not None, causal=causal or "top-left", enable_gqa=hkv != 4)
    f = lambda q, k, v: qt.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("extra", [dict(window=(1, 0)), dict(softcap=2.0),
                                   dict(alibi_slopes=[0.5, 0.25, 0.125, 0.0625]),
                                   dict(key_lengths=[4, 2]), dict(scale=0.3)])
def test_gradcheck_qkv_options(extra):
    q, k, v = inputs(hkv=2, n=4, s=4)
    f = lambda q, k, v: qt.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                        enable_gqa=True, **extra)
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_backward_matches_torch_autograd():
    q, k, v = inputs(hq=4, hkv=2, n=6, s=9, d=8, dv=5)
    dout = torch.randn(2, 4, 6, 5, dtype=torch.float64)
    out = qt.scaled_dot_product_attention(q, k, v, is_causal=True, causal="bottom-right",
                                          enable_gqa=True)
    (out * dout).sum().backward()
    ours = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    allowed = torch.ones(6, 9, dtype=torch.bool).tril(9 - 6)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    (ref * dout).sum().backward()
    for a, x in zip(ours, (q, k, v)):
        torch.testing.assert_close(a, x.grad, rtol=1e-10, atol=1e-12)


def test_attention_backward_on_numpy():
    r = np.random.default_rng(2)
    q, k, v = r.standard_normal((3, 4, 5)), r.standard_normal((3, 6, 5)), r.standard_normal((3, 6, 2))
    dout = r.standard_normal((3, 4, 2))
    out, lse = qkv.scaled_dot_product_attention(q, k, v, is_causal=True, return_lse=True)
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, dout, is_causal=True)
    assert all(isinstance(x, np.ndarray) for x in (dq, dk, dv))
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ref.backward(torch.from_numpy(dout))
    for a, t in zip((dq, dk, dv), (tq, tk, tv)):
        np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_float32_training_step():
    q, k, v = (x.detach().float().requires_grad_() for x in inputs(n=16, s=16, d=16, dv=16))
    out = qt.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                          kernel="fast")
    out.square().mean().backward()
    tq, tk, tv = (x.detach().clone().requires_grad_() for x in (q, k, v))
    F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True).square().mean().backward()
    for a, b in zip((q, k, v), (tq, tk, tv)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
