"""GPT-2 folders made at test time: transformers' GPT2LMHeadModel with random
weights (saved as a Hugging Face folder: config.json + model.safetensors),
and a byte-level BPE tokenizer.json in GPT-2's format trained by the
`tokenizers` library on tiny Shakespeare (or made-up lines where that file
is absent). transformers and tokenizers are test-only dependencies."""
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from bert_folders import SHAKESPEARE

QKV_BIN = Path(os.environ.get("QKV_BIN", Path(__file__).resolve().parents[2] / "build" / "release" / "qkv"))


def run_qkv(*args, input=None):
    """The qkv command on `args`, its output captured."""
    if not QKV_BIN.exists():
        pytest.skip(f"no qkv binary at {QKV_BIN} (build it, or set QKV_BIN)")
    return subprocess.run([str(QKV_BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=60, input=input, stdin=None if input is not None else subprocess.DEVNULL)

EOT = "<|endoftext|>"


def training_lines():
    if SHAKESPEARE is not None:
        return SHAKESPEARE.read_text(encoding="utf-8").splitlines()[:8000]
    rng = random.Random(1)
    words = ["the", "king", "shall", "not", "we", "thou", "art", "my", "lord", "good", "Romeo"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(4000)]


def gpt2_tokenizer(vocab_size=800):
    """GPT-2's tokenizer layout: ByteLevel pre-tokenizer and decoder, <|endoftext|>."""
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_lines(), trainer)
    return tok


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def qwen2_tokenizer(tok):
    """`tok`'s vocabulary and merges in Qwen2's tokenizer.json layout: an NFC
    normalizer, Llama 3's split with one digit a piece, then ByteLevel."""
    tk = pytest.importorskip("tokenizers")
    spec = json.loads(tok.to_str())
    spec["normalizer"] = {"type": "NFC"}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    return tk.Tokenizer.from_str(json.dumps(spec))


def smollm_tokenizer(tok):
    """`tok`'s vocabulary and merges in SmolLM's tokenizer.json layout: a
    Digits step (each digit a piece) before GPT-2's ByteLevel split."""
    tk = pytest.importorskip("tokenizers")
    spec = json.loads(tok.to_str())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    return tk.Tokenizer.from_str(json.dumps(spec))


def gpt2_folder(path, tokenizer, dtype="float32", headless=False, seed=0, **config):
    """A GPT2LMHeadModel of `config` (small defaults) with random weights,
    saved at `path` with the tokenizer; headless saves GPT2Model's names (no
    "transformer." prefix, as the Hub's gpt2 files are). Returns the model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    eot = tokenizer.token_to_id(EOT)
    kw = dict(vocab_size=tokenizer.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=4,
              bos_token_id=eot, eos_token_id=eot, attn_implementation="eager")
    kw.update(config)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw)).eval()
    with torch.no_grad():  # biases and norms away from their 0 / 1 starts
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    saved = model.transformer if headless else model
    saved.to(getattr(torch, dtype)).save_pretrained(path, safe_serialization=True)
    model.float()
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": EOT, "eos_token": EOT}))
    return model


def check_bf16_weights_held(bf16_dir, tmp_path, prompts, mapped):
    """A folder of BF16 weights is held in bf16 and computes in it by
    default (its matrices are not widened to float32 by generation); the
    same values in a float32 file (converted exactly) give the same bf16
    text, and the same float32 logits once the bf16 model widens its
    matrices: so every matrix landed where it belongs, both ways. With
    `mapped`, every 2-D tensor of either file but GPT-2's learned positions
    (the matrices, GPT-2's [in, out] ones too, the head, the embedding table)
    is read where the mapped file holds it; without, none is."""
    import shutil

    import numpy as np
    import safetensors.numpy as stn
    import qkv
    from qkv import _qkv
    f32_dir = tmp_path / "float32-copy"
    shutil.copytree(bf16_dir, f32_dir)
    st = pytest.importorskip("safetensors.torch")
    tensors = st.load_file(bf16_dir / "model.safetensors")
    stn.save_file({k: v.float().numpy() for k, v in tensors.items()}, f32_dir / "model.safetensors",
                  metadata={"format": "pt"})
    m16, m32 = qkv.Model.load(bf16_dir), qkv.Model.load(f32_dir)
    assert (m16.weights_dtype, m32.weights_dtype) == ("bf16", "float32")
    texts = [m16.generate(p, tokens=32, temperature=0.0) for p in prompts]
    assert texts == [m32.generate(p, tokens=32, temperature=0.0, dtype="bf16") for p in prompts]
    assert _qkv._testing.matrices_dtype(m16._m) == "bf16"  # bf16 compute: nothing widened
    in_file = sum(t.numel() * 2 for k, t in tensors.items() if t.dim() == 2 and not k.endswith("wpe.weight"))
    assert _qkv._testing.mapped_weight_bytes(m16._m) == (in_file if mapped else 0)
    assert _qkv._testing.mapped_weight_bytes(m32._m) == (2 * in_file if mapped else 0)  # float32: 4 bytes
    r = run_qkv("sample", "--model", bf16_dir, "--prompt", prompts[0], "--tokens", 32, "--temperature", 0)
    assert r.returncode == 0, r.stderr
    assert r.stdout == prompts[0] + texts[0] + "\n"
    for p in prompts:  # float32 compute widens the bf16 matrices: exactly the float32 file's values
        ids = m16.tokenize(p)
        # The float32 file's [in, out] matrices (GPT-2's) are read as they
        # lie, their products summed in another order than the widened copy's.
        np.testing.assert_allclose(m16.logits(ids), m32.logits(ids), rtol=0, atol=1e-5, err_msg=p)
    assert _qkv._testing.matrices_dtype(m16._m) == "float32"
    ids = m16.tokenize(prompts[0])  # both widened (m32 from its mapped file): the same weights everywhere
    assert np.array_equal(_qkv._testing.hidden_states_f64(m16._m, ids), _qkv._testing.hidden_states_f64(m32._m, ids))
    assert texts == [m16.generate(p, tokens=32, temperature=0.0) for p in prompts]  # still bf16
