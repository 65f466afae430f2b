"""qkv's attention as a ``torch.autograd.Function``: ``loss.backward()`` through qkv.

    import torch, qkv.torch
    out = qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()        # q.grad, k.grad, v.grad from qkv.attention_backward

The forward keeps the log-sum-exp of each row (not the N x S weights); the
backward recomputes the weights from it, like FlashAttention. Masks, ALiBi and
the other options get no gradient. Importing this module imports PyTorch;
``import qkv`` alone never does.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

import qkv as _qkv

__all__ = ["scaled_dot_product_attention", "Attention"]


class Attention(torch.autograd.Function):
    """forward(query, key, value, attn_mask, options) -> out; options is the dict of
    keyword arguments shared by qkv.scaled_dot_product_attention and
    qkv.attention_backward."""

    @staticmethod
    def forward(ctx: Any, query, key, value, attn_mask, options):  # type: ignore[override]
        out, lse = _qkv.scaled_dot_product_attention(query, key, value, attn_mask,
                                                     return_lse=True, **options)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.attn_mask = attn_mask
        ctx.options = options
        return out

    # The backward is qkv's kernel, not torch operations: a second derivative
    # (create_graph=True, e.g. a gradient penalty) cannot flow through it, so
    # it is refused rather than silently wrong. The engine runs a backward
    # with grad mode on exactly when create_graph=True; refusing then names
    # the cause (torch's once_differentiable only refuses later, and only
    # when grad_out itself needs a gradient).
    @staticmethod
    def backward(ctx: Any, grad_out):  # type: ignore[override]
        if torch.is_grad_enabled():
            raise RuntimeError(
                "qkv.torch: create_graph=True (a second derivative, e.g. a gradient penalty) "
                "is not supported: qkv's backward is a kernel with no derivative of its own; "
                "use torch.nn.functional.scaled_dot_product_attention for that")
        query, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv = _qkv.attention_backward(query, key, value, out, lse, grad_out,
                                             ctx.attn_mask, **ctx.options)
        return dq, dk, dv, None, None


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, **options: Any) -> torch.Tensor:
    """qkv.scaled_dot_product_attention on torch tensors, differentiable in query,
    key and value. The keyword options (causal, window, key_lengths, alibi_slopes,
    softcap, kernel, threads) are qkv's; return_weights and return_lse are not
    available here."""
    for x, what in ((query, "query"), (key, "key"), (value, "value"), (attn_mask, "attn_mask")):
        if not isinstance(x, torch.Tensor) and not (x is None and what == "attn_mask"):
            raise TypeError(f"{what}: expected a torch.Tensor, found {type(x).__name__} (NumPy arrays: "
                            "qkv.scaled_dot_product_attention, which records no gradient)")
    for bad in ("return_weights", "return_lse"):
        if options.get(bad):
            raise TypeError(f"qkv.torch.scaled_dot_product_attention: {bad} is not supported "
                            "(use qkv.scaled_dot_product_attention)")
        options.pop(bad, None)
    if (attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled()):
        raise ValueError("attn_mask: requires grad, but masks get no gradient here (only query, "
                         "key and value do); pass attn_mask.detach()")
    opts = dict(options, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    return Attention.apply(query, key, value, attn_mask, opts)
