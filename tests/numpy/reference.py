"""The float64 NumPy reference for qkv's attention semantics (include/qkv/attention.h),
and the same steps in plain float32, the yardstick for the fast kernel's error."""
import math

import numpy as np


def attention(q, k, v, mask=None, causal="none", scale=None, window=None, key_lengths=None,
              alibi_slopes=None, softcap=0.0, dtype=np.float64):
    """q [..., Hq, N, D], k [..., Hkv, S, D], v [..., Hkv, S, Dv] -> out, weights, lse.

    window (left, right), -1 = unbounded; key_lengths one per batch element
    (leading dims flattened); alibi_slopes one per query head; softcap 0 = off.
    dtype is the precision of every step: float64 is the reference; float32 is
    the plain float32 implementation whose error bounds the fast kernel's
    (FlashAttention's rule: at most twice the plain same-precision error).
    """
    f = np.dtype(dtype).type
    q, k, v = (np.asarray(x).astype(dtype) for x in (q, k, v))
    hq, n, d = q.shape[-3:]
    hkv, s = k.shape[-3], k.shape[-2]
    group = hq // hkv
    k = np.repeat(k, group, axis=-3)  # query head h reads kv head h // group
    v = np.repeat(v, group, axis=-3)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * f(scale)
    if softcap:
        scores = f(softcap) * np.tanh(scores / f(softcap))  # before any bias or mask
    i = np.arange(n)[:, None]
    j = np.arange(s)[None, :]
    diag = i + s - n if causal == "bottom-right" else i  # a(i), query i's aligned key
    if alibi_slopes is not None:
        dist = np.abs(diag - j).astype(dtype)
        scores = scores - np.asarray(alibi_slopes, dtype)[:, None, None] * dist
    visible = np.ones(scores.shape, dtype=bool)
    if mask is not None:
        if mask.dtype == np.bool_:
            visible &= np.broadcast_to(mask, scores.shape)
        else:
            scores = scores + mask.astype(dtype)
    if causal != "none":
        visible &= j <= diag
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= diag - left
        if right >= 0:
            visible &= j <= diag + right
    if key_lengths is not None:
        lengths = np.asarray(key_lengths).reshape(q.shape[:-3] + (1, 1, 1))
        visible &= j < lengths
    scores = np.where(visible, scores, f(-np.inf))
    m = scores.max(axis=-1, keepdims=True)
    empty = np.isneginf(m)
    e = np.where(empty, f(0), np.exp(scores - np.where(empty, f(0), m)))
    total = e.sum(axis=-1, keepdims=True)
    weights = np.where(empty, f(0), e / np.where(empty, f(1), total))
    with np.errstate(divide="ignore"):
        lse = np.where(empty, f(-np.inf), m + np.log(np.where(empty, f(1), total)))[..., 0]
    return weights @ v, weights, lse


def alibi_paper_slopes(heads):
    """The ALiBi paper's slopes, as its reference code (ofirpress/attention_with_linear_biases)
    computes them: geometric for a power of two, interleaved from 2p heads otherwise."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(heads).is_integer():
        return power_of_2(heads)
    p = 2 ** math.floor(math.log2(heads))
    return power_of_2(p) + alibi_paper_slopes(2 * p)[0::2][:heads - p]
