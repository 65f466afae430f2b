"""The float64 NumPy reference for qkv's attention semantics (include/qkv/attention.h)."""
import numpy as np


def attention(q, k, v, mask=None, causal="none", scale=None):
    """q [..., Hq, N, D], k [..., Hkv, S, D], v [..., Hkv, S, Dv] -> out, weights, lse."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq, n, d = q.shape[-3:]
    hkv, s = k.shape[-3], k.shape[-2]
    group = hq // hkv
    k = np.repeat(k, group, axis=-3)  # query head h reads kv head h // group
    v = np.repeat(v, group, axis=-3)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    visible = np.ones(scores.shape, dtype=bool)
    if mask is not None:
        if mask.dtype == np.bool_:
            visible &= np.broadcast_to(mask, scores.shape)
        else:
            scores = scores + mask.astype(np.float64)
    i = np.arange(n)[:, None]
    j = np.arange(s)[None, :]
    if causal == "top-left":
        visible &= j <= i
    elif causal == "bottom-right":
        visible &= j <= i + s - n
    scores = np.where(visible, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    empty = np.isneginf(m)
    e = np.where(empty, 0.0, np.exp(scores - np.where(empty, 0.0, m)))
    total = e.sum(axis=-1, keepdims=True)
    weights = np.where(empty, 0.0, e / np.where(empty, 1.0, total))
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, total)))[..., 0]
    return weights @ v, weights, lse
