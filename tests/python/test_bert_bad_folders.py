"""A broken Hugging Face folder is a ValueError from qkv.Model.load whose
message names the file, the field or the tensor at fault, never a crash or
a hang; the command line (`qkv embed --model`, through the load path every
model command shares) exits non-zero with the same message, and `qkv
tokenize --model` names a folder with no tokenizer."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import qkv

from bert_folders import ROOT, minilm_dir, random_bert, write_folder

pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

QKV_BIN = Path(os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"))


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    ref = random_bert(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=48, max_position_embeddings=64)
    folder = write_folder(ref, tmp_path_factory.mktemp("good") / "bert", minilm_dir())
    # A sentence-transformers folder: mean pooling, normalised.
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}]))
    return folder


def edit_json(path, **changes):
    j = json.loads(path.read_text())
    j.update(changes)
    path.write_text(json.dumps(j))


def edit_tensors(path, change):
    tensors = safetensors_torch.load_file(path)
    change(tensors)
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def set_nan(tensors):
    tensors["encoder.layer.1.intermediate.dense.weight"][3, 5] = float("nan")


def remove_sep(folder):
    tok = json.loads((folder / "tokenizer.json").read_text())
    del tok["model"]["vocab"]["[SEP]"]
    (folder / "tokenizer.json").write_text(json.dumps(tok))


def add_module(folder):
    mods = json.loads((folder / "modules.json").read_text())
    mods.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(mods))


# name -> (how the good folder is broken, what the message must contain)
CASES = {
    "no_config": (lambda f: (f / "config.json").unlink(), "config.json"),
    "no_weights": (lambda f: (f / "model.safetensors").unlink(), "model.safetensors"),
    "truncated_weights": (lambda f: truncate(f / "model.safetensors"), "model.safetensors"),
    "wrong_hidden_size": (lambda f: edit_json(f / "config.json", hidden_size=64),
                          "hidden_size make embeddings.word_embeddings.weight [30522, 64], "
                          "the checkpoint's is [30522, 32]"),
    # Checked before the model is allocated: no out-of-memory for absurd sizes.
    "huge_positions": (lambda f: edit_json(f / "config.json", max_position_embeddings=10**12),
                       "max_position_embeddings and hidden_size make"),
    "huge_layer_count": (lambda f: edit_json(f / "config.json", num_hidden_layers=10**9),
                         "encoder.layer.999999999.intermediate.dense.weight [48, 32], "
                         "the checkpoint has no such tensor"),
    "huge_token_types": (lambda f: edit_json(f / "config.json", type_vocab_size=10**12),
                         "type_vocab_size and hidden_size make"),
    "fewer_layers": (lambda f: edit_json(f / "config.json", num_hidden_layers=1),
                     "num_hidden_layers is 1, but the checkpoint has encoder.layer.1."),
    "ffn_mismatch": (lambda f: edit_json(f / "config.json", intermediate_size=64),
                     "intermediate_size and hidden_size make"),
    "missing_tensor": (lambda f: edit_tensors(
        f / "model.safetensors", lambda t: t.pop("encoder.layer.1.output.dense.bias")),
        "encoder.layer.1.output.dense.bias"),
    "relative_key": (lambda f: edit_json(f / "config.json", position_embedding_type="relative_key"),
                     "position_embedding_type \"relative_key\""),
    "eps_zero": (lambda f: edit_json(f / "config.json", layer_norm_eps=0), "layer_norm_eps must be > 0"),
    "heads_not_dividing": (lambda f: edit_json(f / "config.json", num_attention_heads=5),
                           "num_attention_heads 5 does not divide hidden_size 32"),
    "is_decoder": (lambda f: edit_json(f / "config.json", is_decoder=True), "is_decoder"),
    "config_not_json": (lambda f: (f / "config.json").write_text("{"), "config.json': not valid JSON"),
    "integer_tensor": (lambda f: edit_tensors(f / "model.safetensors", lambda t: t.update(
        {"embeddings.LayerNorm.bias": t["embeddings.LayerNorm.bias"].long()})),
        "tensor embeddings.LayerNorm.bias is I64"),
    "unknown_act": (lambda f: edit_json(f / "config.json", hidden_act="swish"), "hidden_act \"swish\""),
    "unknown_model_type": (lambda f: edit_json(f / "config.json", model_type="mamba"),
                           "model_type \"mamba\""),
    "unsupported_module": (add_module, "sentence_transformers.models.Dense"),
    # Token type 0 is always added: a table of no rows would silently drop it.
    "no_token_types": (lambda f: edit_json(f / "config.json", type_vocab_size=0), "type_vocab_size"),
    # A token deleted from the vocabulary leaves a gap: the gap is named.
    "sep_removed": (remove_sep, "no token has id 102"),
    "two_pooling_modes": (lambda f: edit_json(f / "1_Pooling" / "config.json",
                                              pooling_mode_cls_token=True), "1_Pooling/config.json"),
    "nan_weight": (lambda f: edit_tensors(f / "model.safetensors", set_nan),
                   "tensor encoder.layer.1.intermediate.dense.weight holds a non-finite value "
                   "at element 101"),
}


@pytest.fixture
def broken(good, tmp_path, request):
    folder = tmp_path / "bert"
    shutil.copytree(good, folder)
    break_it, needle = CASES[request.param]
    break_it(folder)
    return folder, needle


def test_the_good_folder_loads(good):
    m = qkv.Model.load(good)
    assert m.embed(["a b"]).shape == (1, 32)


@pytest.mark.parametrize("broken", sorted(CASES), indirect=True)
def test_load_names_what_is_wrong(broken):
    folder, needle = broken
    with pytest.raises(ValueError) as e:
        qkv.Model.load(folder)
    assert needle in str(e.value), str(e.value)
    # The folder's names only, never qkv's internal ones for its tensors.
    assert "transformer." not in str(e.value) and "gpt:" not in str(e.value), str(e.value)


def run_qkv(*args):
    if not QKV_BIN.exists():
        pytest.skip(f"no qkv binary at {QKV_BIN} (build it, or set QKV_BIN)")
    return subprocess.run([str(QKV_BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("broken", sorted(CASES), indirect=True)
def test_command_line_names_what_is_wrong(broken, tmp_path):
    folder, needle = broken
    (tmp_path / "in.txt").write_text("hello world\n")
    r = run_qkv("embed", "--model", folder, "--input", tmp_path / "in.txt", "-o", tmp_path / "e.npy")
    assert r.returncode not in (0, None) and r.returncode > 0, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr


def test_tokenize_names_a_folder_without_a_tokenizer(good, tmp_path):
    folder = tmp_path / "bert"
    shutil.copytree(good, folder)
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.txt").unlink()
    (tmp_path / "in.txt").write_text("hello world\n")
    r = run_qkv("tokenize", "--model", folder, "--input", tmp_path / "in.txt")
    assert r.returncode > 0 and "vocab.txt" in r.stderr, r.stderr
    with pytest.raises(ValueError, match="vocab.txt"):
        qkv.Model.load(folder)


def test_language_model_commands_refuse_an_encoder(good, tmp_path):
    # An encoder has no next-token head: logits and sample say so, by name.
    r = run_qkv("logits", "--model", good, "--prompt", "hi", "--out", tmp_path / "l.npy")
    assert r.returncode == 2 and "language-model head" in r.stderr and "--model" in r.stderr, r.stderr
    assert not (tmp_path / "l.npy").exists()


def test_embed_command_matches_the_library(good, tmp_path):
    import numpy as np
    import qkv
    lines = ["The animal didn't cross the street because it was too tired.", "", "Héllo, 世界!"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = run_qkv("embed", "--model", good, "--input", tmp_path / "in.txt", "-o", tmp_path / "e.npy",
                "--batch", "2")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "e.npy")
    want = qkv.Model.load(good).embed(lines)
    assert got.shape == want.shape == (3, want.shape[1])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # bf16, by either spelling, is the library's bfloat16.
    want = qkv.Model.load(good).embed(lines, dtype="bfloat16")
    for spelling in ("bf16", "bfloat16"):
        r = run_qkv("embed", "--model", good, "--input", tmp_path / "in.txt", "-o", tmp_path / "b.npy",
                    "--dtype", spelling)
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(np.load(tmp_path / "b.npy"), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("args, needle", [
    (["--batch", "0"], "--batch"),
    (["--max-length", "1"], "--max-length"),
    (["--dtype", "float16"], "--dtype"),
    (["--threads", "-1"], "--threads"),
])
def test_embed_bad_options_are_usage_errors(good, tmp_path, args, needle):
    (tmp_path / "in.txt").write_text("hello\n")
    r = run_qkv("embed", "--model", good, "--input", tmp_path / "in.txt", "-o", tmp_path / "e.npy", *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not (tmp_path / "e.npy").exists()


def test_embed_refuses_an_output_inside_the_model(good, tmp_path):
    folder = tmp_path / "bert"
    shutil.copytree(good, folder)
    (tmp_path / "in.txt").write_text("hello\n")
    before = (folder / "model.safetensors").read_bytes()
    r = run_qkv("embed", "--model", folder, "--input", tmp_path / "in.txt", "-o", folder / "model.safetensors")
    assert r.returncode == 2, r.stderr
    assert (folder / "model.safetensors").read_bytes() == before


def test_embed_refuses_an_empty_input(good, tmp_path):
    (tmp_path / "in.txt").write_text("")
    r = run_qkv("embed", "--model", good, "--input", tmp_path / "in.txt", "-o", tmp_path / "e.npy")
    assert r.returncode == 1 and "no lines" in r.stderr, r.stderr


def test_an_encoder_says_what_it_cannot_do(good):
    m = qkv.Model.load(good)
    with pytest.raises(ValueError, match="^generate: a bert model is an encoder, with no language-model head"):
        m.generate("hi", tokens=3)
    with pytest.raises(ValueError, match="^generate: a bert model is an encoder"):
        next(m.stream("hi", tokens=3))
    with pytest.raises(ValueError, match=r"^decode: this model reads WordPiece tokens.*tokens\(text\)"):
        m.decode([101, 102])
    with pytest.raises(ValueError, match="^model: this model has no language-model head"):
        m.logits("hi")
    with pytest.raises(ValueError, match=r"^model: sequence 0 has 65 tokens; the model takes 1 to 64"):
        m.hidden_states([101] * 65)
    with pytest.raises(ValueError, match=r"^model: token id 40000 outside the vocabulary \[0, 30522\)"):
        m.hidden_states([101, 40000])


def test_embed_max_length_is_bounded_by_the_positions(good, tmp_path):
    m = qkv.Model.load(good)
    assert m.embed(["a b"], max_length=64).shape == (1, 32)
    with pytest.raises(ValueError, match="max_length 65 is more than the model's 64 positions"):
        m.embed(["a b"], max_length=65)
    (tmp_path / "in.txt").write_text("hello\n")
    r = run_qkv("embed", "--model", good, "--input", tmp_path / "in.txt", "-o", tmp_path / "e.npy",
                "--max-length", "100000")
    assert r.returncode == 2 and "--max-length: 100000 is more than the model's 64 positions" in r.stderr, r.stderr


def test_embed_names_the_line_of_invalid_utf8(good, tmp_path):
    (tmp_path / "in.txt").write_bytes(b"fine\nbad \xff byte\n")
    r = run_qkv("embed", "--model", good, "--input", tmp_path / "in.txt", "-o", tmp_path / "e.npy")
    assert r.returncode == 1 and "--input line 2: invalid UTF-8 at byte 4 of the line:" in r.stderr, r.stderr
    assert not (tmp_path / "e.npy").exists()


def test_embed_input_that_is_a_directory(good, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_qkv("embed", "--model", good, "--input", tmp_path, "-o", "e.npy")
    assert r.returncode == 1 and "is a directory, not a file" in r.stderr, r.stderr


def test_size_refuses_a_context_beyond_learned_positions(good):
    r = run_qkv("size", "--model", good, "--context", "65")
    assert r.returncode == 2 and "--context: 65 tokens is more than the model's 64 learned positions" in r.stderr, r.stderr
    assert run_qkv("size", "--model", good, "--context", "64").returncode == 0


def test_import_names_a_hugging_face_checkpoint(good, tmp_path):
    (tmp_path / "t.txt").write_text("abc")
    r = run_qkv("import", "--from", "nanogpt", "--weights", good / "model.safetensors",
                "--vocab-text", tmp_path / "t.txt", "--heads", "4", "--out", tmp_path / "m")
    assert r.returncode == 1 and "is not a nanoGPT checkpoint: it has no transformer.wte.weight" in r.stderr, r.stderr


def shard_with_a_wrong_entry(good, folder):
    """good's weights in two shards, and an index that maps one tensor of
    the second shard to the first (transformers loads such a folder)."""
    shutil.copytree(good, folder)
    tensors = safetensors_torch.load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    moved = "encoder.layer.1.output.dense.weight"
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    safetensors_torch.save_file({k: t for k, t in tensors.items() if k != moved}, folder / names[0])
    safetensors_torch.save_file({moved: tensors[moved]}, folder / names[1])
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: names[0] for k in tensors}}))
    return moved, names


def test_shard_index_naming_the_wrong_shard_warns_and_loads(good, tmp_path):
    moved, names = shard_with_a_wrong_entry(good, tmp_path / "sharded")
    want = qkv.Model.load(good).embed(["a cat", "the dog"])
    with pytest.warns(RuntimeWarning) as warned:
        m = qkv.Model.load(tmp_path / "sharded")
    assert [str(w.message) for w in warned] == [
        f"'{tmp_path / 'sharded'}/model.safetensors.index.json' maps '{moved}' to '{names[0]}', "
        f"which has no such tensor; read it from '{names[1]}'"]
    np.testing.assert_array_equal(m.embed(["a cat", "the dog"]), want)


def test_max_seq_length_without_room_for_the_special_tokens(good, tmp_path):
    folder = tmp_path / "short"
    shutil.copytree(good, folder)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 1}))
    with pytest.raises(ValueError, match=r"sentence_bert_config.json': max_seq_length 1 leaves no room for "
                                         r"\[CLS\] and \[SEP\], which the tokenizer adds to every text: "
                                         r"it must be at least 2"):
        qkv.Model.load(folder)

