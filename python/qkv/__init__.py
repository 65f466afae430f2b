"""qkv: exact self-attention on the CPU, from Python.

The C++ library (include/qkv/) behind PyTorch's call:

    import numpy as np, qkv
    q = np.random.rand(2, 8, 16, 64)           # [B, Hq, N, D]
    k = v = np.random.rand(2, 2, 32, 64)       # [B, Hkv, S, D]
    out = qkv.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # [B, Hq, N, D]

NumPy arrays and DLPack tensors (PyTorch CPU tensors) are read in place when
their last dim is contiguous; the result is the same kind of array as the
query. Also here: :func:`attention_backward`, :class:`GPT` (load a model
directory written by ``qkv train``), :func:`train`, :mod:`qkv.lesson` (the
lessons' NumPy random streams) and :mod:`qkv.torch` (an autograd Function).
PyTorch is never needed by ``import qkv``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _qkv
from ._checks import _bool, _float, _int, _seq, _strs
from .model import GPT, Model, quantize
from .training import train

__all__ = [
    "scaled_dot_product_attention",
    "attention_backward",
    "Model",
    "GPT",
    "train",
    "quantize",
    "heatmap_png",
    "__version__",
]
__version__ = "0.1.0"

def _is_torch(x: Any) -> bool:
    # No import of torch: a tensor's class lives in the torch module.
    return type(x).__module__.startswith("torch")


def _arg(x: Any, what: str, torch_in: bool) -> Any:
    """The object handed to the extension: NumPy arrays as they are, torch
    tensors detached (a view, no copy) after a device check, anything else
    with __dlpack__ as it is; other values are a TypeError.

    A torch tensor whose negative or conjugate bit is set stores values that
    are not its values (``z.conj().imag`` holds -imag), and DLPack hands over
    the storage: such a tensor is materialised first, so it reads as what it
    means."""
    if isinstance(x, np.ndarray):
        return _numpy_arg(x, what)
    if _is_torch(x):
        if x.device.type != "cpu":
            raise TypeError(
                f"{what}: tensor is on device '{x.device}'; qkv runs on the CPU, "
                f"move it there first ({what}.cpu())")
        if _is_vmapped(x):
            raise TypeError(f"{what}: a batched tensor of torch.func.vmap; qkv's attention is "
                            "not a vmap-able torch op (give the batch as a leading dim instead)")
        if x.is_sparse or x.layout != _torch_strided():
            raise TypeError(f"{what}: expected a dense (strided) tensor, found layout {x.layout}")
        x = x.detach() if x.requires_grad else x
        if x.is_neg():
            x = x.resolve_neg()
        if x.is_conj():
            x = x.resolve_conj()
        return x
    if hasattr(x, "__dlpack__"):
        return x
    raise TypeError(f"{what}: expected a NumPy array or a DLPack tensor, got {type(x).__name__}")


def _refuse_grad(x: Any, what: str) -> None:
    """A tensor that requires grad, read by the forward while autograd
    records, would silently lose its gradient (no graph is built here)."""
    if _is_torch(x) and x.requires_grad and _grad_enabled():
        raise ValueError(
            f"{what}: requires grad, and qkv.scaled_dot_product_attention records no "
            "gradient; use qkv.torch.scaled_dot_product_attention (differentiable in "
            "query, key and value), or pass a detached tensor")


def _numpy_arg(x: np.ndarray, what: str) -> np.ndarray:
    """A NumPy array as the extension takes it. Big-endian floats are
    converted to native order (the command line reads them too); dtypes no
    array protocol can hand over (object, structured, datetime, strings,
    longdouble) are a TypeError naming the argument."""
    if x.dtype.kind not in "biufc" or x.dtype.itemsize > (16 if x.dtype.kind == "c" else 8):
        raise TypeError(f"{what}: dtype {x.dtype} is not supported (expected float32 or float64"
                        f"{', or bool' if what == 'attn_mask' else ''})")
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    return x


def _is_vmapped(x: Any) -> bool:
    try:
        import torch._C._functorch as functorch
        return bool(functorch.is_batchedtensor(x)) or bool(functorch.is_functorch_wrapped_tensor(x))
    except (ImportError, AttributeError):
        return False


def _check_ranks(q: Any, k: Any, v: Any) -> None:
    """[N, D] inputs are one head, as in PyTorch, only when all three are 2-D."""
    ranks = tuple(getattr(x, "ndim", None) for x in (q, k, v))
    if 2 in ranks and ranks != (2, 2, 2):
        raise ValueError(
            "query, key, value: expected all three 2-D ([N, D], one head) or all at least 3-D "
            f"([..., H, N, D]), found {q.ndim}-D, {k.ndim}-D and {v.ndim}-D")


def _torch_strided() -> Any:
    import torch  # only reached with a torch tensor in hand
    return torch.strided


def _grad_enabled() -> bool:
    import torch
    return torch.is_grad_enabled()


def _options(attn_mask, is_causal, causal, window, key_lengths, alibi_slopes, softcap, kernel,
             threads, torch_in):
    if not isinstance(causal, str):
        raise TypeError(f"causal: expected a str, found {type(causal).__name__} {causal!r}")
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a str, found {type(kernel).__name__} {kernel!r}")
    mask = None if attn_mask is None else _arg(attn_mask, "attn_mask", torch_in)
    if _is_torch(mask) and str(mask.dtype) == "torch.bfloat16":
        mask = mask.float()  # exact: the library adds float32 or float64 masks
    if window is not None:
        if not isinstance(window, (tuple, list)):
            raise TypeError(f"window: expected (left, right), found {type(window).__name__} "
                            f"{window!r}")
        if len(window) != 2:
            raise ValueError(f"window: expected (left, right), found {len(window)} values "
                             f"{tuple(window)!r}")
        window = tuple(-1 if w is None else _int(w, f"window[{i}]") for i, w in enumerate(window))
    return dict(
        attn_mask=mask,
        causal=causal,
        is_causal=_bool(is_causal, "is_causal"),
        window=window,
        key_lengths=[] if key_lengths is None else
        [_int(x, "key_lengths[%d]" % i) for i, x in enumerate(_seq(key_lengths, "key_lengths"))],
        alibi_slopes=[] if alibi_slopes is None else
        [_float(x, "alibi_slopes[%d]" % i) for i, x in enumerate(_seq(alibi_slopes, "alibi_slopes"))],
        softcap=0.0 if softcap is None else _float(softcap, "softcap"),
        kernel=kernel,
        threads=_int(threads, "threads", 32),
    )


def _unsqueeze(x: Any) -> Any:
    # [N, D] -> [1, N, D]: a view (NumPy and torch alike), no copy.
    return x[None]


def _squeeze(x: Any) -> Any:
    return None if x is None else x[0]


def _check_gqa(query, key, enable_gqa: bool) -> None:
    enable_gqa = _bool(enable_gqa, "enable_gqa")
    if query.ndim >= 3 and key.ndim >= 3 and query.shape[-3] != key.shape[-3] and not enable_gqa:
        raise ValueError(
            f"query has {query.shape[-3]} heads and key {key.shape[-3]}: pass enable_gqa=True "
            "for grouped-query attention (as in PyTorch)")


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, is_causal: bool = False, scale: Optional[float] = None,
    enable_gqa: bool = False, *, causal: str = "top-left",
    window: Optional[Tuple[Optional[int], Optional[int]]] = None,
    key_lengths: Optional[Sequence[int]] = None, alibi_slopes: Optional[Sequence[float]] = None,
    softcap: Optional[float] = None, return_weights: bool = False, return_lse: bool = False,
    kernel: str = "auto", threads: int = 0):
    """softmax(query · keyᵀ · scale + mask) · value, exactly, on the CPU.

    The arguments shared with ``torch.nn.functional.scaled_dot_product_attention``
    mean the same:

    - query ``[..., Hq, N, D]``, key ``[..., Hkv, S, D]``, value ``[..., Hkv, S, Dv]``
      (or ``[N, D]``, ``[S, D]``, ``[S, Dv]``: one head, no batch): float32 or float64 NumPy arrays or CPU torch tensors, all of one dtype, with
      identical leading dims. Read in place when the last dim is contiguous (any other
      strides: slices, transposed heads); a strided last dim is copied once.
    - attn_mask: broadcastable to ``[..., Hq, N, S]``; bool (True = may attend) or
      float (added to the scaled scores, -inf blocks).
    - is_causal: query i sees keys j <= i (``causal="top-left"``, PyTorch's), or
      j <= i + S - N with ``causal="bottom-right"`` (KV-cache decoding). It combines
      with attn_mask by AND (PyTorch refuses both together).
    - scale: defaults to 1/sqrt(D).
    - enable_gqa: required when Hq != Hkv (Hq % Hkv == 0); query head h reads
      key/value head h // (Hq // Hkv).

    qkv's own options (keywords only): window=(left, right) sliding window around the
    diagonal (None or -1: unbounded), key_lengths (one per flattened batch element:
    later keys are padding), alibi_slopes (one per query head), softcap (c·tanh(s/c)),
    return_weights / return_lse (also return the weights ``[..., Hq, N, S]`` and the
    log-sum-exp ``[..., Hq, N]``), kernel ("auto", "fast" float32 only, "reference")
    and threads (0 = all cores).

    A row with no visible key gives 0 (PyTorch gives NaN). Returns the output, or a
    tuple (out, weights?, lse?) when asked for more, as the query's kind of array.
    Raises TypeError for a wrong dtype, kind or device, and ValueError (with the
    library's message) for shapes, options and NaN/Inf in the inputs.
    The GIL is released while the kernel runs; Ctrl-C (KeyboardInterrupt) still stops it.
    """
    torch_in = _is_torch(query)
    for x, what in ((query, "query"), (key, "key"), (value, "value"), (attn_mask, "attn_mask")):
        _refuse_grad(x, what)
    q = _arg(query, "query", torch_in)
    k = _arg(key, "key", torch_in)
    v = _arg(value, "value", torch_in)
    _check_ranks(q, k, v)
    _check_gqa(q, k, enable_gqa)
    opts = _options(attn_mask, is_causal, causal, window, key_lengths, alibi_slopes, softcap,
                    kernel, threads, torch_in)
    flat = q.ndim == 2 and k.ndim == 2 and v.ndim == 2  # [N, D]: one head, as PyTorch allows
    if flat:
        q, k, v = _unsqueeze(q), _unsqueeze(k), _unsqueeze(v)
    out, weights, lse = _qkv.attention(
        q, k, v, scale=None if scale is None else _float(scale, "scale"),
        return_weights=_bool(return_weights, "return_weights"),
        return_lse=_bool(return_lse, "return_lse"), torch_out=torch_in,
        **opts)
    if flat:
        out, weights, lse = _squeeze(out), _squeeze(weights), _squeeze(lse)
    if not (return_weights or return_lse):
        return out
    return (out,) + ((weights,) if return_weights else ()) + ((lse,) if return_lse else ())


def attention_backward(query, key, value, out, lse, grad_out, attn_mask=None,
                       is_causal: bool = False, scale: Optional[float] = None,
                       enable_gqa: bool = False, *, causal: str = "top-left",
                       window=None, key_lengths=None, alibi_slopes=None, softcap=None,
                       kernel: str = "auto", threads: int = 0):
    """Gradients (dq, dk, dv) of ``out = scaled_dot_product_attention(...)``.

    Give the forward's inputs and options, its ``out`` and ``lse`` (run it with
    ``return_lse=True``) and ``grad_out`` = dLoss/dout ``[..., Hq, N, Dv]``. dk and dv
    have key's and value's shapes: a GQA group's query heads are summed into their
    shared head. Masks and biases get no gradient; fully masked rows give zeros.
    Returns the query's kind of array. bfloat16 inputs (torch.bfloat16) take a
    float32 ``lse`` (as the forward returns it) and give bfloat16 gradients,
    computed in float32.
    """
    torch_in = _is_torch(query)
    q = _arg(query, "query", torch_in)
    k = _arg(key, "key", torch_in)
    v = _arg(value, "value", torch_in)
    _check_ranks(q, k, v)
    _check_gqa(q, k, enable_gqa)
    opts = _options(attn_mask, is_causal, causal, window, key_lengths, alibi_slopes, softcap,
                    kernel, threads, torch_in)
    out, lse = _arg(out, "out", torch_in), _arg(lse, "lse", torch_in)
    grad_out = _arg(grad_out, "grad_out", torch_in)
    flat = q.ndim == 2 and k.ndim == 2 and v.ndim == 2
    if flat:
        q, k, v, out, lse, grad_out = (_unsqueeze(x) for x in (q, k, v, out, lse, grad_out))
    grads = _qkv.attention_backward(
        q, k, v, out, lse, grad_out, scale=None if scale is None else _float(scale, "scale"),
        torch_out=torch_in, **opts)
    return tuple(_squeeze(g) for g in grads) if flat else grads


def heatmap_png(weights, row_labels: Sequence[str] = (), col_labels: Sequence[str] = (),
                titles: Sequence[str] = (), per_row: int = 4) -> bytes:
    """Attention weights as a PNG image (bytes), qkv's viridis-like heat map.

    weights: ``[rows, cols]`` or a stack ``[panels, rows, cols]`` of values in [0, 1]
    (rows are queries). In a notebook: ``IPython.display.Image(qkv.heatmap_png(w))``.
    """
    per_row = _int(per_row, "per_row", 32)
    if per_row < 1:
        raise ValueError(f"per_row: expected panels per row >= 1, found {per_row}")
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"weights: expected an array of numbers, found {type(weights).__name__} "
                        f"{weights!r:.60}") from None
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights: expected [rows, cols] or [panels, rows, cols], got shape {w.shape}")
    panels = [np.ascontiguousarray(p) for p in w]
    titles = _strs(titles, "titles", "panel")
    if titles and len(titles) != len(panels):
        raise ValueError(f"titles: expected {len(panels)} (one per panel), found {len(titles)}")
    row_labels, col_labels = _strs(row_labels, "row_labels", "row"), _strs(col_labels, "col_labels", "column")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "heatmap.png")
        _qkv.heatmap_png(path, titles, panels, row_labels, col_labels, per_row)
        with open(path, "rb") as f:
            return f.read()
