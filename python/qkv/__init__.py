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

import json
import os
import queue
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _qkv

__all__ = [
    "scaled_dot_product_attention",
    "attention_backward",
    "Model",
    "GPT",
    "train",
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


def _int(x: Any, what: str, bits: int = 64) -> int:
    """An integer argument: Python or NumPy integers (not bool, not float, not
    str), within a signed `bits`-bit integer (the C++ side's type)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{what}: expected an integer, found {type(x).__name__} {x!r}")
    if not -2**(bits - 1) <= int(x) < 2**(bits - 1):
        raise ValueError(f"{what}: expected an integer in [-2**{bits - 1}, 2**{bits - 1}), "
                         f"found {int(x)}")
    return int(x)


def _seed(x: Any, what: str = "seed") -> int:
    """A random seed: an integer in [0, 2**64), the C++ side's uint64."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{what}: expected an integer, found {type(x).__name__} {x!r}")
    if not 0 <= int(x) < 2**64:
        raise ValueError(f"{what}: expected an integer in [0, 2**64), found {int(x)}")
    return int(x)


def _bool(x: Any, what: str) -> bool:
    """A flag: True or False (Python or NumPy), as torch's own flags take;
    never any truthy object (is_causal='no' must not mean causal)."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{what}: expected True or False, found {type(x).__name__} {x!r}")
    return bool(x)


def _float(x: Any, what: str) -> float:
    """A real-number argument: int or float (Python or NumPy), not bool or str."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what}: expected a number, found {type(x).__name__} {x!r}")
    return float(x)


def _seq(x: Any, what: str) -> list:
    """A sequence argument as a list: a list, tuple or 1-D array; a str is refused
    (it would read as its characters)."""
    if isinstance(x, (str, bytes)) or not (hasattr(x, "tolist") or isinstance(x, (list, tuple))):
        raise TypeError(f"{what}: expected a sequence, found {type(x).__name__} {x!r}")
    items = x.tolist() if hasattr(x, "tolist") else list(x)
    if not isinstance(items, list):
        raise TypeError(f"{what}: expected a sequence, found a scalar {items!r}")
    return items


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


def _tokens(model: "_qkv.Model", tokens: Union[str, Sequence[int]]) -> List[int]:
    if isinstance(tokens, str):
        return model.encode(_text(tokens, "tokens"))
    return [_int(t, "tokens[%d]" % i, 32) for i, t in enumerate(_seq(tokens, "tokens"))]


def _text(s: Any, what: str) -> str:
    """A str argument that is valid Unicode (a lone surrogate cannot be UTF-8)."""
    if not isinstance(s, str):
        raise TypeError(f"{what}: expected a str, found {type(s).__name__} {s!r}")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: not valid Unicode text ({e.reason} at index {e.start})") from None
    return s


def _path(p: Any, what: str) -> str:
    """A path argument (str, bytes or os.PathLike) as the str the extension takes."""
    try:
        path = os.fsdecode(os.fspath(p))
    except TypeError:
        raise TypeError(f"{what}: expected a path (str or os.PathLike), found {type(p).__name__} "
                        f"{p!r}") from None
    return _text(path, what)


def _callback(f: Any, what: str) -> Any:
    """A callback argument: None or something to call (checked here, not at its first call)."""
    if f is not None and not callable(f):
        raise TypeError(f"{what}: expected a function (or None), found {type(f).__name__} {f!r}")
    return f


def _strs(x: Any, what: str, each: str) -> List[str]:
    """A sequence of str (labels, titles), one per `each`; one str is refused
    (it would read as its characters)."""
    if isinstance(x, str):
        raise TypeError(f"{what}: expected a sequence of str (one per {each}), found one str")
    return [_text(s, f"{what}[{i}]") for i, s in enumerate(_seq(x, what))]


class Model:
    """A model folder, loaded with ``Model.load(dir)``: one of qkv's own
    (``qkv train`` or :func:`train`: config.json, vocab.json and
    model.safetensors), or a Hugging Face folder (config.json with a
    model_type, model.safetensors, tokenizer.json or vocab.txt, and
    sentence-transformers' modules.json when present) of a BERT-family
    encoder. Language models give logits and generate text; encoders give
    hidden states and sentence embeddings."""

    def __init__(self, model: "_qkv.Model"):
        self._m = model

    @classmethod
    def load(cls, dir: Union[str, os.PathLike]) -> "Model":
        """Reads and checks the model directory; ValueError names any bad file.
        What it reads past (a shard index that names the wrong shard for a
        tensor, as transformers reads it) is a RuntimeWarning."""
        m = _qkv.Model.load(_path(dir, "dir"))
        for w in m.load_warnings():
            warnings.warn(w, RuntimeWarning, stacklevel=2)
        return cls(m)

    @property
    def config(self) -> Dict[str, Any]:
        """vocab, context, layers, heads, kv_heads, embd, ffn, rope, bias,
        post_norm, causal and architecture ("gpt", or the folder's model_type)."""
        return self._m.config()

    @property
    def is_encoder(self) -> bool:
        """True for an encoder (hidden states and embeddings, no logits)."""
        return self._m.is_encoder()

    @property
    def weights_dtype(self) -> str:
        """"bf16" for a folder whose Linear weights are all BF16 (held as they
        are: half the memory of float32), else "float32"; :meth:`generate`
        computes in it unless given another dtype."""
        return self._m.weights_dtype()

    @property
    def max_length(self) -> int:
        """The most tokens one text may have (longer texts are cut)."""
        return self._m.max_length()

    def encode(self, text: str) -> List[int]:
        """Token ids of `text` as the model reads it (see :meth:`tokenize`)."""
        return self._m.encode(_text(text, "text"))

    def tokenize(self, text: str) -> List[int]:
        """Token ids of `text`: one per character for qkv's models; WordPiece
        with [CLS] and [SEP] for an encoder, cut to :attr:`max_length`."""
        return self._m.encode(_text(text, "text"))

    def tokens(self, text: str) -> List[str]:
        """The token strings of :meth:`tokenize` (``"[CLS]"``, ``"##ing"``)."""
        return [self._m.token_text(i).decode("utf-8", errors="replace")
                for i in self.tokenize(text)]

    def token_labels(self, text: str) -> List[str]:
        """The tokens of :meth:`tokenize` as ``qkv explain --model`` labels
        them: the text each stands for, every character visible. A space is
        ``"␣"`` (GPT-2's ``"Ġthe"`` and Llama 2's ``"▁the"`` are both
        ``"␣the"``; a WordPiece ``"##ing"`` stays), a newline ``"\\n"``, an
        invisible character its code point (``"U+200B"``), a byte of a
        character split over tokens ``"\\xe2"``."""
        return [self._m.token_label(i) for i in self.tokenize(text)]

    def hidden_states(self, tokens: Union[str, Sequence[int]]) -> np.ndarray:
        """The last hidden states of one text or id sequence: float32 ``[T, embd]``."""
        return self._m.hidden_states(_tokens(self._m, tokens))

    def embed(self, texts: Sequence[str], batch: int = 32, max_length: int = 0,
              dtype: str = "float32") -> np.ndarray:
        """One vector per text, pooled (and normalised) as the folder's
        sentence-transformers modules say: float32 ``[n, embd]``. Texts run
        in batches of `batch`, each cut to `max_length` tokens (0: the
        model's :attr:`max_length`; more, up to the model's positions, as
        sentence-transformers' max_seq_length allows; beyond is a ValueError),
        with a RuntimeWarning counting the texts that were cut;
        dtype "bf16" (or "bfloat16") computes the layers' products in bf16."""
        if isinstance(texts, str):
            raise TypeError("texts: expected a sequence of str, found one str (wrap it in a list)")
        items = [_text(t, "texts[%d]" % i) for i, t in enumerate(_seq(texts, "texts"))]
        limit = _int(max_length, "max_length")
        out, cut = self._m.embed(items, _int(batch, "batch"), limit, _text(dtype, "dtype"))
        if cut:
            warnings.warn(f"embed: {cut} of {len(items)} texts were cut to {limit or self.max_length} tokens "
                          "(max_length; their embeddings are of the start only)", RuntimeWarning, stacklevel=2)
        return out

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of token ids (qkv's characters, or a language model's BPE
        tokens, its special tokens left out with `skip_special_tokens`, as in
        transformers); an encoder's WordPiece ids have their tokens through
        :meth:`tokens`."""
        if self._m.is_encoder():
            raise ValueError("decode: this model reads WordPiece tokens, not qkv's characters; "
                             "tokens(text) gives each token's text")
        return self._m.decode([_int(t, "ids[%d]" % i, 32) for i, t in enumerate(_seq(ids, "ids"))],
                              _bool(skip_special_tokens, "skip_special_tokens"))

    def set_threads(self, threads: int = 0, kernel: str = "auto") -> None:
        """Threads for everything the model runs (0 = all cores) and its attention kernel."""
        if not isinstance(kernel, str):
            raise TypeError(f"kernel: expected a str, found {type(kernel).__name__} {kernel!r}")
        self._m.set_threads(_int(threads, "threads", 32), kernel)

    def logits(self, tokens: Union[str, Sequence[int]]) -> np.ndarray:
        """Next-token logits after each prefix of `tokens` (text or ids):
        float32 ``[T, vocab]``, 1 <= T <= context."""
        return self._m.logits(_tokens(self._m, tokens))

    def attention_maps(self, prompt: Union[str, Sequence[int]]) -> np.ndarray:
        """Every layer's and head's attention weights over `prompt`:
        float32 ``[layers, heads, T, T]`` (rows are queries; causal for a
        language model, every key for an encoder)."""
        return self._m.attention_maps(_tokens(self._m, prompt))

    def generate(self, prompt: str = "\n", tokens: int = 100, temperature: float = 1.0,
                 top_k: int = 0, seed: int = 1337, *, use_cache: bool = True,
                 dtype: Optional[str] = None, kv_dtype: Optional[str] = None,
                 sliding_window: bool = False, special_tokens: bool = False,
                 on_token: Optional[Callable[[str], None]] = None) -> str:
        """Generates up to `tokens` tokens after `prompt` and returns their text.

        It stops early at the model's end-of-text token, whose text is left
        out unless special_tokens=True (as transformers' decode with
        skip_special_tokens), or when the text fills the model's context:
        then a RuntimeWarning says so. sliding_window=True goes on instead,
        reading only the last context tokens (positions starting again at
        0, as nanoGPT does); without it, a prompt longer than the context is
        a ValueError.

        dtype "float32", or "bf16" (or "bfloat16") for the layers' products
        in bf16 with float32 sums; None (the default): :attr:`weights_dtype`,
        bf16 for a folder of BF16 weights, which are then read as they are.
        kv_dtype the KV cache's keys and values: "float32", or "bf16" (half
        the memory); None (the default): bf16 when the products run in bf16.

        on_token, if given, is called with each piece of text as it is produced
        (streaming): pieces of whole characters that together are exactly the
        returned text; :meth:`stream` gives the same pieces as an iterator. The
        same seed gives the same text, with or without the KV cache."""

        def piece(b: bytes) -> None:
            if on_token is not None:
                on_token(b.decode("utf-8"))

        seed = _seed(seed)
        _callback(on_token, "on_token")
        n = _int(tokens, "tokens")
        g = self._m.generate(_text(prompt, "prompt"), n,
                             _float(temperature, "temperature"), _int(top_k, "top_k"), seed,
                             _bool(use_cache, "use_cache"), None if dtype is None else _text(dtype, "dtype"),
                             None if kv_dtype is None else _text(kv_dtype, "kv_dtype"),
                             _bool(sliding_window, "sliding_window"),
                             _bool(special_tokens, "special_tokens"), piece)
        if g["stop"] == "context":
            context = self.config["context"]
            warnings.warn(f"generate: stopped after {len(g['ids'])} of {n} tokens: the model's context "
                          f"of {context} tokens is full (sliding_window=True goes on, reading only "
                          f"the last {context})", RuntimeWarning, stacklevel=2)
        return g["text"].decode("utf-8")

    def stream(self, prompt: str = "\n", tokens: int = 100, temperature: float = 1.0,
               top_k: int = 0, seed: int = 1337, *, use_cache: bool = True,
               dtype: Optional[str] = None, kv_dtype: Optional[str] = None,
               sliding_window: bool = False, special_tokens: bool = False) -> Iterator[str]:
        """generate() as an iterator of text pieces, produced on a worker thread
        while the caller consumes them."""
        q: "queue.Queue[Any]" = queue.Queue()
        done = object()
        failure: List[BaseException] = []
        stop = threading.Event()

        class _Stopped(Exception):
            pass

        def put(piece: str) -> None:
            # Raised inside generate's callback, this ends the C++ loop at its next token.
            if stop.is_set():
                raise _Stopped()
            q.put(piece)

        def run() -> None:
            try:
                self.generate(prompt, tokens, temperature, top_k, seed, use_cache=use_cache,
                              dtype=dtype, kv_dtype=kv_dtype, sliding_window=sliding_window,
                              special_tokens=special_tokens, on_token=put)
            except _Stopped:
                pass
            except BaseException as e:  # handed to the consumer
                failure.append(e)
            finally:
                q.put(done)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        # Leaving the loop early (break, an exception, the generator collected)
        # closes this generator: the worker is told to stop and is joined, so
        # no generation outlives its iterator.
        try:
            while True:
                item = q.get()
                if item is done:
                    break
                yield item
        finally:
            stop.set()
            t.join()
        if failure:
            raise failure[0]


# The name of the class before encoders loaded too.
GPT = Model

_TRAIN_INTS = ("context", "layers", "heads", "kv_heads", "embd", "batch", "iters", "warmup",
               "eval_interval", "eval_iters", "log_interval", "threads", "stop_at")
_TRAIN_FLOATS = ("lr", "min_lr", "beta1", "beta2", "weight_decay", "grad_clip")
_TRAIN_BOOLS = ("rope", "bias", "resume", "force")


def _train_option(name: str, value: Any) -> Any:
    """One train() option in the Python type the extension takes; the library
    checks the values (ranges, combinations)."""
    if name in _TRAIN_INTS:
        value = _int(value, name, 32 if name == "threads" else 64)
        if name == "stop_at" and value < 0:  # the library would read it as no stop at all
            raise ValueError(f"stop_at: expected an iteration >= 0 (a multiple of eval_interval), "
                             f"found {value}")
        return value
    if name in _TRAIN_FLOATS:
        return _float(value, name)
    if name in _TRAIN_BOOLS:
        return _bool(value, name)
    if name == "seed":
        return _seed(value)
    if name in ("kernel", "dtype"):
        if not isinstance(value, str):
            raise TypeError(f"{name}: expected a str, found {type(value).__name__} {value!r}")
        return value
    raise TypeError(f"train() got an unexpected keyword argument '{name}'")


def train(text_path: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
          progress: Optional[Callable[[Dict[str, Any]], None]] = None,
          **options: Any) -> Dict[str, Any]:
    """Trains a GPT on a text file, as ``qkv train`` does, into `out_dir`
    (model.safetensors, config.json, vocab.json, train_state.safetensors,
    log.jsonl); :meth:`GPT.load` reads the result.

    options (the command's, with underscores): context, layers, heads, kv_heads,
    embd, rope, bias, batch, iters, warmup, eval_interval, eval_iters,
    log_interval, lr, min_lr, beta1, beta2, weight_decay, grad_clip, seed,
    threads, kernel, dtype ("float32", or "bf16": mixed precision, as
    ``qkv train --dtype bf16``), resume, force (start over where `out_dir`
    holds a trained run, or write into a directory qkv did not make), stop_at.
    kv_heads defaults to heads. `out_dir` must not exist yet, be empty, or be
    one qkv made (it holds .qkv-train.lock, or qkv's config.json); any other
    raises ValueError unless force=True, so a user's own files are never
    replaced by accident.

    progress, if given, is called on this thread with each line the trainer logs
    (a dict: iter, loss, lr, ... and val_loss at evaluations) while training runs
    on a worker thread. Ctrl-C (KeyboardInterrupt) asks the trainer to write a
    checkpoint and stop; ``resume=True`` continues from it. Returns iters_run,
    final_train_loss, final_val_loss, interrupted and next_iter.
    """
    text_path, out_dir = _path(text_path, "text_path"), _path(out_dir, "out_dir")
    _callback(progress, "progress")
    options = {k: _train_option(k, v) for k, v in options.items()}
    if "heads" in options and "kv_heads" not in options:
        options["kv_heads"] = options["heads"]  # as `qkv train`: no GQA unless asked
    result: Dict[str, Any] = {}
    failure: List[BaseException] = []

    # The worker says when it is done through an Event: a Ctrl-C that lands
    # in Thread.join() can leave the thread marked finished while it runs
    # (CPython before 3.13), so join() is never what is waited on.
    done = threading.Event()

    def run() -> None:
        try:
            result.update(_qkv.train(text_path, out_dir, options))
        except BaseException as e:
            failure.append(e)
        finally:
            done.set()

    # The trainer reports through log.jsonl (flushed line by line); reading it
    # here keeps the callback on the caller's thread and the trainer unchanged.
    log_path = os.path.join(out_dir, "log.jsonl")
    worker = threading.Thread(target=run, daemon=True)
    seen = 0

    def poll() -> None:
        nonlocal seen
        if progress is None or not os.path.exists(log_path):
            return
        with open(log_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        complete = lines[:-1]  # the last piece is "" or a line still being written
        for line in complete[seen:]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            progress(entry)
        seen = max(seen, len(complete))

    # Ctrl-C or an exception from the progress callback: the trainer writes
    # a checkpoint and stops, and the run's lock is released before it is
    # raised here, so no training goes on behind the caller's back.
    # The request is cleared before the worker starts, so a Ctrl-C at any
    # moment from here on (even before the trainer reads it) stops the run.
    _qkv.request_stop(False)
    try:
        worker.start()
        while not done.wait(0.05):
            poll()
        poll()
    except BaseException:
        _qkv.request_stop()
        while not done.is_set():  # a second Ctrl-C does not leave it running
            try:
                done.wait()
            except KeyboardInterrupt:
                continue
        raise
    if failure:
        raise failure[0]
    return result


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
