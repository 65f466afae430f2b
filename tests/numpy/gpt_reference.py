"""A trained qkv checkpoint run in NumPy (float64), written from the file
formats and nanoGPT's architecture, not from qkv's code: the independent truth
for `qkv explain --model` (attention weights) and `qkv logits`.

    x = wte[ids] (+ wpe[:T] unless RoPE)
    per block: h = ln_1(x); q, k, v = split(h @ c_attn.T (+ b)) into H, Hkv, Hkv heads;
               RoPE on q, k (half-split pairs, base 10000) when on;
               w = softmax(q kᵀ / √hs, causal); x += merge(w v) @ c_proj.T;
               x += gelu(ln_2(x) @ c_fc.T) @ mlp.c_proj.T
    logits = ln_f(x) @ wte.T (the head is tied to the embedding)
"""
import json
import math
import struct
from pathlib import Path

import numpy as np

LN_EPS = 1e-5


def read_safetensors(path):
    """{name: float64 array} from a safetensors file of F32 tensors."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], "<f4").reshape(info["shape"]).astype(np.float64)
    return out


class Checkpoint:
    def __init__(self, model_dir):
        model_dir = Path(model_dir)
        self.cfg = json.loads((model_dir / "config.json").read_text())
        self.chars = json.loads((model_dir / "vocab.json").read_text())["chars"]
        self.w = read_safetensors(model_dir / "model.safetensors")
        self.unknown_id = len(self.chars)  # the fallback id is the last

    def encode(self, text):
        ids = {c: i for i, c in enumerate(self.chars)}
        return np.array([ids.get(c, self.unknown_id) for c in text])

    def decode(self, ids):
        return "".join(self.chars[i] if i < len(self.chars) else "\ufffd" for i in ids)

    def _ln(self, x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        y = (x - mean) / np.sqrt(var + LN_EPS) * self.w[name + ".weight"]
        return y + self.w[name + ".bias"] if self.cfg["bias"] else y

    def _linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if self.cfg["bias"] else y

    def _gelu(self, x):
        # New checkpoints may say which GELU they were trained with; older
        # ones (no "gelu" key) used the tanh form.
        if self.cfg.get("gelu", "tanh") == "exact":
            return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    @staticmethod
    def _rope(x):
        """x [heads, T, hs]: pairs (i, i + hs/2) rotated by t · 10000^(-2i/hs)."""
        T, hs = x.shape[-2:]
        half = hs // 2
        theta = np.arange(T)[:, None] * 10000.0 ** (-2.0 * np.arange(half)[None, :] / hs)
        c, s = np.cos(theta), np.sin(theta)
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)

    def run(self, ids):
        """-> (attention weights [layers, heads, T, T], logits [T, vocab])."""
        cfg, w = self.cfg, self.w
        T, C, H, Hkv = len(ids), cfg["embd"], cfg["heads"], cfg["kv_heads"]
        hs = C // H
        x = w["transformer.wte.weight"][ids]
        if not cfg["rope"]:
            x = x + w["transformer.wpe.weight"][:T]
        causal = np.tril(np.ones((T, T), bool))
        maps = []
        for layer in range(cfg["layers"]):
            p = f"transformer.h.{layer}."
            qkv = self._linear(self._ln(x, p + "ln_1"), p + "attn.c_attn")  # [T, (H + 2 Hkv) hs]
            q = qkv[:, :H * hs].reshape(T, H, hs).transpose(1, 0, 2)         # [H, T, hs]
            k = qkv[:, H * hs:(H + Hkv) * hs].reshape(T, Hkv, hs).transpose(1, 0, 2)
            v = qkv[:, (H + Hkv) * hs:].reshape(T, Hkv, hs).transpose(1, 0, 2)
            if cfg["rope"]:
                q, k = self._rope(q), self._rope(k)
            k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)  # GQA groups
            scores = np.where(causal, q @ k.transpose(0, 2, 1) / math.sqrt(hs), -np.inf)
            e = np.exp(scores - scores.max(-1, keepdims=True))
            att = e / e.sum(-1, keepdims=True)                                # [H, T, T]
            maps.append(att)
            y = (att @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + self._linear(y, p + "attn.c_proj")
            h = self._gelu(self._linear(self._ln(x, p + "ln_2"), p + "mlp.c_fc"))
            x = x + self._linear(h, p + "mlp.c_proj")
        logits = self._ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T
        return np.stack(maps), logits
