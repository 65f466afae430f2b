"""qkv.Model on GPT-2 folders made by transformers at test time (random
weights, GPT-2's layout and options) against transformers itself: the token
ids against the `tokenizers` library, the logits (1e-4 in float32, 1e-9 with
both sides in float64), greedy generation against generate(), and the
folder errors qkv must name."""
import json

import numpy as np
import pytest

import qkv
from qkv import _qkv

from gpt2_folders import EOT, check_bf16_weights_held, gpt2_folder, gpt2_tokenizer, run_qkv

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed any further, hear me speak.",
           "Héllo, 世界! 👍🏽  spaces   and\ttabs 12345", "the"]

# name -> GPT2Config options (and how the folder is saved)
CONFIGS = {
    "default": {},                                      # gelu_new, n_inner = 4 * n_embd
    "wide-mlp-exact-gelu": dict(n_inner=48, activation_function="gelu"),
    "one-head-big-eps": dict(n_head=1, layer_norm_epsilon=1e-3),
    "three-layers-tanh": dict(n_layer=3, n_head=2, activation_function="gelu_pytorch_tanh"),
    "headless-names": dict(headless=True),              # GPT2Model's names, as the Hub's files
    "float16-file": dict(dtype="float16"),
    "bfloat16-file": dict(dtype="bfloat16"),
}


@pytest.fixture(scope="module")
def tokenizer():
    return gpt2_tokenizer()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "gpt2"
    ref = gpt2_folder(path, tokenizer, **CONFIGS[request.param])
    return qkv.Model.load(path), ref, path


def hf_logits(ref, ids, dtype=torch.float32):
    with torch.no_grad():
        return ref.to(dtype)(torch.tensor([ids])).logits[0].numpy()


def test_ids_match_the_tokenizers_library(pair, tokenizer):
    m, _, _ = pair
    for text in PROMPTS:
        assert m.tokenize(text) == tokenizer.encode(text).ids
        assert m.decode(m.tokenize(text)) == text


def test_logits_match_transformers(pair):
    m, ref, _ = pair
    for text in PROMPTS:
        ids = m.tokenize(text)
        got, want = m.logits(ids), hf_logits(ref, ids)
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 1e-4, text


def test_float64_forward_matches_transformers_in_float64(pair):
    m, ref, _ = pair
    wte = ref.transformer.wte.weight.detach().double().numpy()
    for text in PROMPTS:
        ids = m.tokenize(text)
        got = _qkv._testing.hidden_states_f64(m._m, ids) @ wte.T  # the tied head
        want = hf_logits(ref, ids, torch.float64)
        assert np.abs(got - want).max() < 1e-9, text
    ref.float()


def test_greedy_generation_matches_transformers(pair, tokenizer):
    m, ref, _ = pair
    prompt = "ROMEO:"
    ids = tokenizer.encode(prompt).ids
    with torch.no_grad():
        want = ref.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=32,
                            pad_token_id=tokenizer.token_to_id(EOT))[0, len(ids):].tolist()
    pieces = []
    got = m.generate(prompt, tokens=32, temperature=0.0, on_token=pieces.append)
    assert got == tokenizer.decode(want)
    assert "".join(pieces) == got
    # The same without the KV cache.
    assert m.generate(prompt, tokens=32, temperature=0.0, use_cache=False) == got


def test_attention_maps_have_one_row_per_token(pair):
    m, ref, _ = pair
    ids = m.tokenize("ROMEO: and Juliet")
    maps = m.attention_maps(ids)
    with torch.no_grad():
        want = ref(torch.tensor([ids]), output_attentions=True).attentions
    assert maps.shape == (len(want), want[0].shape[1], len(ids), len(ids))
    for layer, a in enumerate(want):
        assert np.abs(maps[layer] - a[0].numpy()).max() < 1e-5


def test_the_command_line_runs_a_gpt2_folder(pair, tmp_path):
    m, ref, path = pair
    prompt = "ROMEO: and"
    r = run_qkv("logits", "--model", path, "--prompt", prompt, "-o", tmp_path / "l.npy")
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "l.npy"), m.logits(prompt), atol=1e-6)
    r = run_qkv("sample", "--model", path, "--prompt", prompt, "--tokens", "8", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout == prompt + m.generate(prompt, tokens=8, temperature=0.0) + "\n"
    r = run_qkv("tokenize", "--model", path, "--input", "-", input=prompt + "\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(i) for i in m.tokenize(prompt)]


# name -> (how a good folder is broken, what the message must contain)
BROKEN = {
    "untied-head": (lambda f: edit(f, tie_word_embeddings=False), "tie_word_embeddings false is not supported"),
    "cross-attention": (lambda f: edit(f, add_cross_attention=True), "add_cross_attention true"),
    "layer-scaled-attention": (lambda f: edit(f, scale_attn_by_inverse_layer_idx=True),
                               "scale_attn_by_inverse_layer_idx true"),
    "relu": (lambda f: edit(f, activation_function="relu"), "activation_function \"relu\""),
    "wrong-width": (lambda f: edit(f, n_embd=64), "vocab_size and n_embd make"),
    "fewer-layers": (lambda f: edit(f, n_layer=1), "n_layer is 1, but the checkpoint has"),
    "no-tokenizer": (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json"),
}


def edit(folder, **changes):
    j = json.loads((folder / "config.json").read_text())
    j.update(changes)
    (folder / "config.json").write_text(json.dumps(j))


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_folder_is_named(case, tokenizer, tmp_path):
    path = tmp_path / "gpt2"
    gpt2_folder(path, tokenizer)
    BROKEN[case][0](path)
    with pytest.raises(ValueError) as e:
        qkv.Model.load(path)
    assert BROKEN[case][1] in str(e.value), str(e.value)


def test_vocab_json_and_merges_txt_without_tokenizer_json(tokenizer, tmp_path):
    # GPT-2's original pair of files, read as transformers converts them.
    path = tmp_path / "gpt2"
    gpt2_folder(path, tokenizer)
    tokenizer.model.save(str(path))  # vocab.json, merges.txt
    (path / "tokenizer.json").unlink()
    m = qkv.Model.load(path)
    for text in PROMPTS + ["one<|endoftext|>two", "  <|endoftext|>"]:
        assert m.tokenize(text) == tokenizer.encode(text).ids, text
        assert m.decode(m.tokenize(text)) == text
    r = run_qkv("tokenize", "--model", path, "--input", "-", input="ROMEO: hi\n")
    assert r.returncode == 0 and r.stdout.split() == [str(i) for i in tokenizer.encode("ROMEO: hi").ids], r.stderr
    (path / "merges.txt").write_text("#version: 0.2\nno_such_token x\n")
    with pytest.raises(ValueError, match="merges.txt.*model.merges\\[0\\]"):
        qkv.Model.load(path)


def test_tokens_are_spelled_as_the_tokenizer_file_spells_them(pair, tokenizer):
    m, _, _ = pair
    text = "Ġ hello world é"  # byte tokens that decode to no text alone
    assert m.tokens(text) == tokenizer.encode(text).tokens


def test_bf16_folder_keeps_its_weights_in_bf16(tokenizer, tmp_path):
    # Conv1D matrices read [in, out] where the file holds them, the head tied to wte
    path = tmp_path / "gpt2"
    gpt2_folder(path, tokenizer, dtype="bfloat16")
    check_bf16_weights_held(path, tmp_path, PROMPTS, mapped=True)
