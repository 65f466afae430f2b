"""bfloat16 against PyTorch's own bf16 SDPA (issue 12's error rule): on the
same bf16 inputs, qkv's error against float64 maths is at most twice
PyTorch's, forward and backward (gradients through qkv.torch's autograd
Function), over causal, GQA, decode and odd shapes."""
import pytest
import torch

import qkv.torch as qt

F = torch.nn.functional

CASES = [  # B, Hq, Hkv, N, S, D, Dv, causal
    (2, 4, 4, 256, 256, 64, 64, False),
    (1, 4, 4, 200, 200, 128, 128, True),
    (1, 8, 2, 130, 300, 64, 64, False),
    (2, 8, 2, 1, 1000, 128, 128, False),  # decode, GQA 8/2
    (1, 2, 1, 65, 77, 40, 24, True),
]


def rel_err(got, truth):
    """Largest |error| relative to the truth's largest |value|."""
    return ((got.double() - truth).abs().max() / truth.abs().max()).item()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_H{}-{}_N{}_S{}_D{}-{}_{}".format(
    *c[:7], "causal" if c[7] else "full"))
def test_bf16_error_is_at_most_twice_pytorchs(case):
    B, Hq, Hkv, N, S, D, Dv, causal = case
    g = torch.Generator().manual_seed(hash(case) % 2**31)
    q = torch.randn(B, Hq, N, D, generator=g).to(torch.bfloat16)
    k = torch.randn(B, Hkv, S, D, generator=g).to(torch.bfloat16)
    v = torch.randn(B, Hkv, S, Dv, generator=g).to(torch.bfloat16)
    dout = torch.randn(B, Hq, N, Dv, generator=g).to(torch.bfloat16)
    gqa = dict(enable_gqa=True) if Hq != Hkv else {}
    # PyTorch's is_causal is top-left; so is qkv's is_causal.

    def run(fn, dtype):
        x = [t.detach().to(dtype).clone().requires_grad_() for t in (q, k, v)]  # own leaves
        out = fn(*x, is_causal=causal, **gqa)
        out.backward(dout.to(dtype))
        return [out.detach()] + [t.grad for t in x]

    truth = run(F.scaled_dot_product_attention, torch.float64)
    theirs = run(F.scaled_dot_product_attention, torch.bfloat16)
    ours = run(qt.scaled_dot_product_attention, torch.bfloat16)
    for name, t, a, b in zip(("out", "dq", "dk", "dv"), truth, ours, theirs):
        assert a.dtype == torch.bfloat16 and a.shape == t.shape, name
        e_ours, e_theirs = rel_err(a, t), rel_err(b, t)
        assert e_ours <= 2 * e_theirs + 2**-24, (name, e_ours, e_theirs)
