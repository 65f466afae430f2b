"""qkv.Model: a model folder loaded once, then tokenized, run, looked into,
generated from or embedded with."""

from __future__ import annotations

import os
import queue
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _qkv
from ._checks import _bool, _callback, _float, _int, _path, _seed, _seq, _text


def _tokens(model: "_qkv.Model", tokens: Union[str, Sequence[int]]) -> List[int]:
    if isinstance(tokens, str):
        return model.encode(_text(tokens, "tokens"))
    return [_int(t, "tokens[%d]" % i, 32) for i, t in enumerate(_seq(tokens, "tokens"))]


class Model:
    """A model folder, loaded with ``Model.load(dir)``: one of qkv's own
    (``qkv train`` or :func:`train`: config.json, vocab.json and
    model.safetensors), or a Hugging Face folder (config.json with a
    model_type, model.safetensors, tokenizer.json or vocab.txt, and
    sentence-transformers' modules.json when present) of a BERT-family
    encoder or a GPT-2, Llama or Mistral decoder, or a GGUF file of a llama
    or gpt2 model. Language models give logits and generate text; encoders
    give hidden states and sentence embeddings."""

    def __init__(self, model: "_qkv.Model"):
        self._m = model

    @classmethod
    def load(cls, dir: Union[str, os.PathLike], dequantize: bool = False,
             quantize: Optional[str] = None) -> "Model":
        """Reads and checks the model directory, or a GGUF file of a llama or
        gpt2 model (its matrices kept as the file stores them, quantized or
        not; `dequantize=True` widens every weight to float32 instead, the
        reference the quantized products are checked against); ValueError
        names any bad file. quantize="q8_0" or "q4_0" quantizes a folder's
        matrices as they are read, as llama.cpp stores those types, and runs
        them so.
        What it reads past (a shard index that names the wrong shard for a
        tensor, as transformers reads it) is a RuntimeWarning."""
        if not isinstance(dequantize, bool):
            raise TypeError(f"dequantize: expected True or False, found {dequantize!r}")
        if quantize not in (None, "q8_0", "q4_0"):
            raise ValueError(f"quantize: expected None, \"q8_0\" or \"q4_0\", found {quantize!r}")
        m = _qkv.Model.load(_path(dir, "dir"), dequantize, quantize or "")
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
        the memory); None (the default): bf16 when the products run in bf16
        or the matrices are quantized (a GGUF file's Q8_0, Q4_K, ...).

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


def quantize(model: Union[str, os.PathLike], out: Union[str, os.PathLike], type: str = "q4_k_m") -> List[Tuple[str, List[int], str]]:
    """Writes the model at `model` (a Hugging Face GPT-2, Llama or Mistral
    folder, or a GGUF file) to `out` as a GGUF file that qkv and llama.cpp
    run, each tensor in the type llama-quantize gives it in the mix `type`:
    "q8_0", "q4_0", "q4_k_m", "q5_k_m" or "q6_k". Returns each tensor's
    (name, dims in ggml's order, type name), e.g. ("output.weight", [64, 800], "Q6_K").
    ValueError names what a GGUF file cannot hold (qkv's own character-level
    models, encoders)."""
    if not isinstance(type, str):
        raise TypeError(f"type: expected a string such as \"q4_k_m\", found {type!r}")
    return [(n, list(ne), t) for n, ne, t in _qkv.quantize(_path(model, "model"), _path(out, "out"), type)]
