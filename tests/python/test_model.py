"""qkv.train and qkv.GPT end to end on a tiny model: progress reaches the
callback, the directory loads, logits, attention maps and streamed generation
behave; and qkv.lesson's streams equal NumPy's bit for bit."""

import numpy as np
import pytest

import qkv
import qkv.lesson

TEXT = ("the cat sat down on the mat. the dog sat down on the log. "
        "a cat and a dog sat on a mat and a log. ") * 60
TINY = dict(layers=2, heads=2, kv_heads=1, embd=32, context=32, batch=8, eval_iters=2,
            eval_interval=20, log_interval=5, threads=2, warmup=5, lr=3e-3, seed=7)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    (d / "text.txt").write_text(TEXT)
    seen = []
    result = qkv.train(d / "text.txt", d / "model", iters=40, progress=seen.append, **TINY)
    return d / "model", result, seen


def test_train_reports_progress_and_finishes(trained):
    out, result, seen = trained
    assert result["iters_run"] > 0 and not result["interrupted"]
    assert result["final_val_loss"] < 3.0
    iters = [e["iter"] for e in seen]
    assert iters == sorted(iters) and iters[-1] == 40
    assert any("val_loss" in e for e in seen)
    for name in ("model.safetensors", "config.json", "vocab.json", "log.jsonl"):
        assert (out / name).exists()


def test_train_rejects_unknown_options(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    with pytest.raises(TypeError, match="unexpected keyword argument 'layer'"):
        qkv.train(tmp_path / "t.txt", tmp_path / "m", layer=2)
    with pytest.raises(ValueError):
        qkv.train(tmp_path / "missing.txt", tmp_path / "m", iters=1)


def test_train_in_bf16_follows_float32(trained, tmp_path):
    """dtype="bf16": mixed precision, the same options as the fixture's run."""
    (tmp_path / "t.txt").write_text(TEXT)
    result = qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=40, dtype="bf16", **TINY)
    assert abs(result["final_val_loss"] - trained[1]["final_val_loss"]) < 0.05, (result, trained[1])
    with pytest.raises(ValueError, match="dtype"):
        qkv.train(tmp_path / "t.txt", tmp_path / "m2", iters=1, dtype="float16")


def test_load_logits_and_maps(trained):
    m = qkv.GPT.load(trained[0])
    cfg = m.config
    assert (cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["context"]) == (2, 2, 1, 32)
    ids = m.encode("the cat sat")
    assert m.decode(ids) == "the cat sat"
    logits = m.logits("the cat sat")
    assert logits.shape == (len(ids), cfg["vocab"]) and logits.dtype == np.float32
    # causal: a prefix's logits are the longer text's first rows
    np.testing.assert_allclose(m.logits(ids[:4]), logits[:4], rtol=1e-5, atol=1e-5)
    maps = m.attention_maps("the cat")
    assert maps.shape == (2, 2, 7, 7)
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(maps, 1) == 0)
    with pytest.raises(ValueError):
        m.logits([cfg["vocab"] + 5])


def test_generate_streams(trained):
    m = qkv.GPT.load(trained[0])
    pieces = []
    text = m.generate("the ", tokens=28, temperature=0.8, top_k=5, seed=3, on_token=pieces.append)
    assert len(pieces) == 28 and "".join(pieces) == text  # 4 + 28 characters: within the context of 32
    assert list(m.stream("the ", tokens=28, temperature=0.8, top_k=5, seed=3)) == pieces
    assert m.generate("the ", tokens=28, temperature=0.8, top_k=5, seed=3, use_cache=False) == text


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        qkv.GPT.load(tmp_path)


def test_default_rng_stream_is_numpys():
    ours, theirs = qkv.lesson.default_rng(42), np.random.default_rng(42)
    for size in [(4, 3), (4, 3), (4, 3), (1000, 4), None, 7]:
        assert np.array_equal(ours.normal(size=size), theirs.normal(size=size))
    assert np.array_equal(ours.normal(0.5, 2.0, (3, 3)), theirs.normal(0.5, 2.0, (3, 3)))
    assert np.array_equal(ours.random((5,)), theirs.random((5,)))
    assert ours.random_raw() == theirs.bit_generator.random_raw()


def test_seed_stream_is_numpys():
    ours = qkv.lesson.RandomState(0)
    np.random.seed(0)
    assert np.array_equal(ours.randn(4, 8), np.random.randn(4, 8))
    assert np.array_equal(ours.randn(3), np.random.randn(3))  # the spare gauss carries over
    assert np.array_equal(ours.random_sample((2, 5)), np.random.random_sample((2, 5)))
    assert ours.randn() == np.random.randn()


def test_stop_request_checkpoints_and_resume_finishes(tmp_path):
    # What Ctrl-C does inside qkv.train: ask the trainer to stop after its step.
    (tmp_path / "t.txt").write_text(TEXT)
    first = qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=200,
                      progress=lambda e: qkv._qkv.request_stop(), **TINY)
    assert first["interrupted"] and 0 < first["next_iter"] < 200
    rest = qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=200, resume=True, **TINY)
    assert not rest["interrupted"] and rest["next_iter"] == 200


def test_wrong_types_name_the_argument_not_the_binding(trained):
    """A wrong-typed argument is the package's TypeError naming it, never
    nanobind's list of C++ signatures."""
    m = qkv.GPT.load(str(trained[0]).encode())  # a bytes path loads as a str one does
    for call, message in [
            (lambda: m.generate(tokens=2, on_token=5), "on_token: expected a function (or None), found int 5"),
            (lambda: qkv.Model.load(123), "dir: expected a path (str or os.PathLike), found int 123"),
            (lambda: qkv.train(trained[0] / "x.txt", trained[0], progress="log"),
             "progress: expected a function (or None), found str 'log'")]:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == message

