"""nanoGPT both ways: a qkv model loads into nanoGPT's GPT (load_state_dict
strict=True) after `qkv export --to nanogpt`, and a nanoGPT model, its
state_dict saved as safetensors, runs in qkv after `qkv import --from
nanogpt`; both ways the logits agree to float32 rounding.

The GPT below is nanoGPT's model.py written again from its architecture (our
code, not a copy): learned wte and wpe, blocks x += attn(ln_1(x)),
x += mlp(ln_2(x)) with F.scaled_dot_product_attention(is_causal=True) and
nn.GELU() (exact), LayerNorm with an optional bias, ln_f, an lm_head tied to
wte. Dropout is left out: it holds no weights and is off in eval().

Needs PyTorch (the venv at /root/.cache/qkv/venv has it): skipped with a
message where it is missing, a failure in CI (CI=true)."""
import json
import math
import os
import random
import struct

import numpy as np
import pytest

import tiny_models
from gpt_reference import Checkpoint

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the environment
    torch = None
    if os.environ.get("CI") == "true":
        raise  # CI must run the round trip, not skip it
    pytest.skip("PyTorch is not installed in this Python (use /root/.cache/qkv/venv/bin/python): "
                "the nanoGPT round trip is not tested", allow_module_level=True)


# --- nanoGPT's GPT ------------------------------------------------------------

class LayerNorm(nn.Module):
    def __init__(self, C, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.bias = nn.Parameter(torch.zeros(C)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, C, n_head, bias):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(C, C, bias=bias)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))  # (B, T, C)


class MLP(nn.Module):
    def __init__(self, C, bias):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=bias)
        self.gelu = nn.GELU()  # exact (erf)
        self.c_proj = nn.Linear(4 * C, C, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, n_head, bias):
        super().__init__()
        self.ln_1 = LayerNorm(C, bias)
        self.attn = CausalSelfAttention(C, n_head, bias)
        self.ln_2 = LayerNorm(C, bias)
        self.mlp = MLP(C, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):  # idx (B, T) -> logits (B, T, V) at every position
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# --- safetensors, F32 only (the safetensors package is not needed) -----------

def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = np.ascontiguousarray(t.detach().cpu().numpy(), dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_safetensors(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info)
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[8 + n + a:8 + n + b], "<f4").copy()
                                     .reshape(info["shape"]))
    return out


# --- helpers --------------------------------------------------------------------

@pytest.fixture
def run(qkv_bin):
    return tiny_models.runner(qkv_bin)


def write_lines(path, n_lines=300):
    """tiny_models' words, in lines: the vocabulary holds "\\n", sample's default start."""
    rng = random.Random(1)
    path.write_text("\n".join(" ".join(rng.choice(tiny_models.WORDS) for _ in range(8))
                              for _ in range(n_lines)) + "\n")
    return path


def qkv_logits(run, model_dir, prompt, tmp_path):
    out = tmp_path / "logits.npy"
    r = run("logits", "--model", model_dir, "--prompt", prompt, "-o", out)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def float32_close(got, want):
    """Agreement to float32 rounding: two float32 computations of the same
    model in different orders (GEMM blocking, fused attention) differ by a
    few ulp of the largest logit per layer; 1e-5 of it is ~100 ulp."""
    err = np.abs(got - want).max()
    assert err <= 1e-5 * np.abs(want).max(), (err, np.abs(want).max())
    return err


PROMPT = "the cat sat on a mat\nwhile a"  # within the context of 32
MEASURED = {}


# --- qkv -> nanoGPT ----------------------------------------------------------------

@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_qkv_model_loads_into_nanogpt_strict(run, qkv_bin, tmp_path, bias):
    text = write_lines(tmp_path / "text.txt")
    model_dir = tmp_path / "model"
    r = run("train", "--text", text, "--out", model_dir, *tiny_models.SIZES, "--heads", "2",
            *(["--bias"] if bias else []), timeout=300)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["gelu"] == "exact"  # new models: nanoGPT's GELU

    exported = tmp_path / "nanogpt.safetensors"
    r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", exported)
    assert r.returncode == 0, r.stderr
    state = load_safetensors(exported)
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])

    torch.manual_seed(0)
    gpt = GPT(cfg["vocab"], cfg["context"], cfg["layers"], cfg["heads"], cfg["embd"], cfg["bias"])
    gpt.load_state_dict(state, strict=True)  # raises on any missing or unexpected key
    gpt.eval()
    ids = Checkpoint(model_dir).encode(PROMPT)
    with torch.no_grad():
        want = gpt(torch.tensor(ids)[None])[0].numpy()
    got = qkv_logits(run, model_dir, PROMPT, tmp_path)
    assert got.shape == want.shape == (len(PROMPT), cfg["vocab"])
    MEASURED[f"qkv->nanogpt {'bias' if bias else 'no-bias'}"] = float32_close(got, want)
    print(f"qkv -> nanoGPT ({'bias' if bias else 'no bias'}): max |logit diff| "
          f"{np.abs(got - want).max():.3g}, max |logit| {np.abs(want).max():.3g}")


def test_export_refuses_what_nanogpt_cannot_hold(run, qkv_bin, tmp_path_factory, tmp_path):
    rope_gqa = tiny_models.trained(tmp_path_factory, qkv_bin, "rope-gqa")
    r = run("export", "--to", "nanogpt", "--model", rope_gqa, "-o", tmp_path / "x.safetensors")
    assert r.returncode == 1, r.stderr
    assert "the model uses RoPE; nanoGPT's GPT has learned positions (wpe) only" in r.stderr
    assert not (tmp_path / "x.safetensors").exists()


# --- nanoGPT -> qkv ----------------------------------------------------------------

def nanogpt_trained(text, bias, seed, steps=40):
    """A nanoGPT model from its own seed, trained a few AdamW steps on `text`
    so that its logits are far from uniform."""
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text])
    torch.manual_seed(seed)
    gpt = GPT(len(chars), 32, 2, 2, 16, bias)
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-2)
    for _ in range(steps):
        ix = torch.randint(len(data) - 33, (8,))
        x = torch.stack([data[i:i + 32] for i in ix])
        y = torch.stack([data[i + 1:i + 33] for i in ix])
        loss = F.cross_entropy(gpt(x).view(-1, len(chars)), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    gpt.eval()
    return gpt, chars, stoi


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_nanogpt_model_imports_into_qkv(run, tmp_path, bias):
    text_path = write_lines(tmp_path / "text.txt")
    text = text_path.read_text()
    gpt, chars, stoi = nanogpt_trained(text, bias, seed=1337 + bias)
    state = gpt.state_dict()
    assert "lm_head.weight" in state and "transformer.wte.weight" in state
    weights = tmp_path / "ckpt.safetensors"
    save_safetensors(weights, state)

    model_dir = tmp_path / "imported"
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text", text_path,
            "--heads", "2", "-o", model_dir)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg == {"vocab": len(chars), "context": 32, "layers": 2, "heads": 2, "kv_heads": 2,
                   "embd": 16, "rope": False, "bias": bias, "gelu": "exact", "arch": "gpt"}
    vocab = json.loads((model_dir / "vocab.json").read_text())
    assert vocab["chars"] == chars and vocab["unknown"] is None  # no fallback id

    ids = [stoi[c] for c in PROMPT]
    with torch.no_grad():
        want = gpt(torch.tensor(ids)[None])[0].numpy()
    got = qkv_logits(run, model_dir, PROMPT, tmp_path)
    assert got.shape == want.shape == (len(PROMPT), len(chars))  # no extra id
    MEASURED[f"nanogpt->qkv {'bias' if bias else 'no-bias'}"] = float32_close(got, want)
    print(f"nanoGPT -> qkv ({'bias' if bias else 'no bias'}): max |logit diff| "
          f"{np.abs(got - want).max():.3g}, max |logit| {np.abs(want).max():.3g}")

    # Sampling: the default start ("\n") and a prompt; only the text's characters come out.
    for extra in ([], ["--prompt", "the dog", "--temperature", "0"]):
        r = run("sample", "--model", model_dir, "--tokens", "40", "--seed", "3", *extra)
        assert r.returncode == 0, r.stderr
        assert set(r.stdout) <= set(chars), r.stdout
    # Greedy: the first drawn character is the argmax of PyTorch's last row.
    r = run("sample", "--model", model_dir, "--prompt", PROMPT, "--tokens", "1", "--temperature", "0")
    top2 = np.sort(want[-1])[-2:]
    if top2[1] - top2[0] > 1e-4:
        assert r.stdout == PROMPT + chars[int(np.argmax(want[-1]))] + "\n"
    # A character outside the text has no id to be read as.
    r = run("sample", "--model", model_dir, "--prompt", "the zebra", "--tokens", "1")
    assert r.returncode == 2, r.stderr
    assert "not in the vocabulary, which has no unknown token" in r.stderr


def test_import_refuses_an_untied_head(run, tmp_path):
    text_path = write_lines(tmp_path / "text.txt")
    gpt, _, _ = nanogpt_trained(text_path.read_text(), False, seed=7, steps=1)
    state = dict(gpt.state_dict())
    state["lm_head.weight"] = state["lm_head.weight"] + 1.0
    weights = tmp_path / "ckpt.safetensors"
    save_safetensors(weights, state)
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text", text_path,
            "--heads", "2", "-o", tmp_path / "m")
    assert r.returncode == 1, r.stderr
    assert "lm_head.weight differs from transformer.wte.weight" in r.stderr
    assert not (tmp_path / "m" / "model.safetensors").exists()


@pytest.mark.parametrize("dropped", ["lm_head.weight", "transformer.wte.weight"])
def test_import_accepts_one_name_of_the_tied_pair(run, tmp_path, dropped):
    """safetensors.torch.save_model writes a shared tensor under one name only."""
    text_path = write_lines(tmp_path / "text.txt")
    gpt, chars, stoi = nanogpt_trained(text_path.read_text(), False, seed=5, steps=5)
    state = dict(gpt.state_dict())
    del state[dropped]
    weights = tmp_path / "ckpt.safetensors"
    save_safetensors(weights, state)
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text", text_path,
            "--heads", "2", "-o", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    with torch.no_grad():
        want = gpt(torch.tensor([stoi[c] for c in PROMPT])[None])[0].numpy()
    float32_close(qkv_logits(run, tmp_path / "m", PROMPT, tmp_path), want)
