"""qkv.Model on Hugging Face folders of random-weight BertModels that
transformers writes here, one per configuration qkv's BERT loader reads:
1, 4 and 12 heads, intermediate sizes that are no multiple of the width,
one or two token types, LayerNorm eps 1e-5 and 1e-12, GELU exact and tanh,
a short max_position_embeddings (the text is cut to it, as the Hugging Face
tokenizer cuts it), a sharded checkpoint, and F16 and BF16 weights. Each
agrees with transformers' BertModel (float32, eager attention; the F16/BF16
model widened) on the hidden states (1e-4) and attention maps (1e-5); with
no modules.json, embed() is the mean of the hidden states, not normalised."""
import json
import os

import numpy as np
import pytest

import qkv

from bert_folders import (auto_tokenizer, hf_ids, max_abs, minilm_dir, random_bert, reference,
                          write_folder)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXTS = ["", "Hi", "A man is eating food.",
         "Before we proceed any further, hear me speak. " * 3,
         "You are all resolved rather to die than to famish? Resolved. resolved. " * 8]

BASE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=128)
CONFIGS = {
    "1_head_types_2_gelu": dict(BASE, num_attention_heads=1, intermediate_size=64,
                                type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12),
    "4_heads_types_1_gelu_new_eps_1e-5": dict(BASE, intermediate_size=50, type_vocab_size=1,
                                              hidden_act="gelu_new", layer_norm_eps=1e-5),
    "12_heads_3_layers": dict(BASE, hidden_size=48, num_attention_heads=12, num_hidden_layers=3,
                              intermediate_size=100, layer_norm_eps=1e-5, seed=3),
    "short_positions_64": dict(BASE, max_position_embeddings=64, seed=4),
}


def packs_float32():
    """Whether qkv's SIMD path here packs float32 matrices at load (AVX-512 and up)."""
    if os.environ.get("QKV_ISA", "") in ("scalar", "avx2"):
        return False
    with open("/proc/cpuinfo") as f:
        flags = set(f.read().split())
    return {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags


def check_against(model, folder, ref, max_length):
    """qkv's ids, hidden states, attention maps and embeddings of TEXTS
    against the tokenizer's and `ref`'s."""
    tok = auto_tokenizer(folder)
    hidden = []
    for text in TEXTS:
        ids = model.tokenize(text)
        assert ids == hf_ids(tok, text, max_length), text
        want_h, want_a = reference(ref, ids, attentions=True)
        got = model.hidden_states(ids)
        assert max_abs(got, want_h) < 1e-4, text
        assert max_abs(model.attention_maps(ids), want_a) < 1e-5, text
        hidden.append(got)
    # No modules.json: mean pooling over every token, no normalisation.
    emb = model.embed(TEXTS, batch=2)
    means = np.stack([h.mean(axis=0) for h in hidden])
    np.testing.assert_allclose(emb, means, rtol=0, atol=1e-5)
    assert np.abs(np.linalg.norm(emb, axis=1) - 1).max() > 1e-2  # not unit vectors


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_bert_matches_transformers(tmp_path, name):
    config = dict(CONFIGS[name])
    ref = random_bert(**config)
    folder = write_folder(ref, tmp_path / name, minilm_dir())
    model = qkv.Model.load(folder)
    cfg = model.config
    assert (cfg["layers"], cfg["heads"], cfg["embd"], cfg["ffn"]) == (
        config["num_hidden_layers"], config["num_attention_heads"], config["hidden_size"],
        config["intermediate_size"])
    assert model.max_length == config["max_position_embeddings"]
    check_against(model, folder, ref, config["max_position_embeddings"])


def test_text_longer_than_the_positions_is_cut_to_them(tmp_path):
    ref = random_bert(**CONFIGS["short_positions_64"])
    folder = write_folder(ref, tmp_path / "short", minilm_dir())
    model = qkv.Model.load(folder)
    ids = model.tokenize(TEXTS[-1])
    assert len(ids) == 64 and ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
    assert model.embed([TEXTS[-1]]).shape == (1, 32)


def test_sharded_checkpoint(tmp_path):
    ref = random_bert(**CONFIGS["4_heads_types_1_gelu_new_eps_1e-5"])
    folder = write_folder(ref, tmp_path / "sharded", minilm_dir(), max_shard_size="300KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and not (folder / "model.safetensors").exists()
    check_against(qkv.Model.load(folder), folder, ref, 128)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights_are_widened(tmp_path, dtype):
    ref = random_bert(**CONFIGS["1_head_types_2_gelu"]).to(getattr(torch, dtype))
    folder = write_folder(ref, tmp_path / dtype, minilm_dir())
    header_len = int.from_bytes((folder / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((folder / "model.safetensors").read_bytes()[8:8 + header_len])
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {
        {"float16": "F16", "bfloat16": "BF16"}[dtype]}
    check_against(qkv.Model.load(folder), folder, ref.float(), 128)


def test_bf16_weights_are_read_where_the_file_holds_them(tmp_path):
    # A BF16 or F32 folder's matrices and word embeddings are used where the
    # mapped file holds them (an F16 folder's are widened into the model's
    # own memory): the same bf16 embeddings, bit for bit, from the BF16 file
    # and from the same values stored in float32 (rounded from the mapping).
    from qkv import _qkv
    ref = random_bert(**CONFIGS["1_head_types_2_gelu"]).to(torch.bfloat16)
    bf16_dir = write_folder(ref, tmp_path / "bf16", minilm_dir())
    f32_dir = write_folder(ref.float(), tmp_path / "f32", minilm_dir())
    f16_dir = write_folder(ref.to(torch.float16), tmp_path / "f16", minilm_dir())
    m16, m32 = qkv.Model.load(bf16_dir), qkv.Model.load(f32_dir)
    words = ref.embeddings.word_embeddings.weight.numel() * 2
    assert _qkv._testing.mapped_weight_bytes(m16._m) > words
    # Float32 matrices are packed at load for their products where the CPU
    # runs AVX-512, else read where the file holds them like the rest.
    mapped16 = _qkv._testing.mapped_weight_bytes(m16._m)
    packed = _qkv._testing.packed_weight_bytes(m32._m)
    assert packed == (2 * (mapped16 - words) if packs_float32() else 0)
    assert _qkv._testing.mapped_weight_bytes(m32._m) + packed == 2 * mapped16
    assert _qkv._testing.mapped_weight_bytes(qkv.Model.load(f16_dir)._m) == 0
    assert np.array_equal(m16.embed(TEXTS, batch=3, dtype="bf16"), m32.embed(TEXTS, batch=3, dtype="bf16"))
