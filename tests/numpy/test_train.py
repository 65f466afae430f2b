"""`qkv train` and `qkv sample` end to end on a slice of tiny Shakespeare:
the loss falls, checkpoints round-trip and resume exactly, the KV cache
gives the same tokens as recomputing the context, bad input fails cleanly."""
import json
import os
import struct
from pathlib import Path

import pytest

from conftest import ROOT

SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
TINY = ["--layers", "2", "--heads", "2", "--embd", "32", "--context", "32", "--batch", "8",
        "--eval-iters", "4", "--threads", "2", "--no-progress"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    if not SHAKESPEARE.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{SHAKESPEARE} is absent, and CI must run the training tests")
        pytest.skip(f"{SHAKESPEARE} is absent (it lives in the shared data folder)")
    path = tmp_path_factory.mktemp("data") / "slice.txt"
    path.write_text(SHAKESPEARE.read_text()[:40000])
    return path


@pytest.fixture(scope="module")
def trained(text, tmp_path_factory, qkv_bin):
    """A tiny model trained for 300 steps, shared by the tests below."""
    import subprocess
    out = tmp_path_factory.mktemp("model")
    r = subprocess.run([qkv_bin, "train", "--text", str(text), "--out", str(out), *TINY,
                        "--iters", "300", "--eval-interval", "100", "--lr", "3e-3",
                        "--warmup", "20"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def log_lines(out):
    return [json.loads(line) for line in (Path(out) / "log.jsonl").read_text().splitlines()]


def test_loss_falls(trained):
    out, stdout = trained
    logs = log_lines(out)
    vals = [l["val_loss"] for l in logs if "val_loss" in l]
    assert vals[0] > 3.8  # ln(vocab) at initialisation
    assert vals[-1] < 2.75, vals  # well below the slice's unigram entropy (3.28): it uses context
    for key in ("iter", "train_loss", "tokens_per_s", "elapsed_s"):
        assert key in logs[1], logs[1]
    assert "done: train loss" in stdout


def test_outputs_exist(trained):
    out, _ = trained
    for name in ("model.safetensors", "config.json", "vocab.json", "train_state.safetensors",
                 "log.jsonl", "loss.png"):
        assert (Path(out) / name).exists(), name
    png = (Path(out) / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    cfg = json.loads((Path(out) / "config.json").read_text())
    assert cfg["layers"] == 2 and cfg["embd"] == 32 and cfg["vocab"] > 30


def test_safetensors_layout_names_like_nanogpt(trained):
    out, _ = trained
    data = (Path(out) / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    assert header["transformer.wte.weight"]["dtype"] == "F32"
    assert "transformer.h.1.attn.c_attn.weight" in header
    assert header["__metadata__"]["format"] == "pt"


def test_sample_streams_text_and_cache_matches_recompute(trained, run):
    out, _ = trained
    args = ["sample", "--model", out, "--tokens", "200", "--seed", "7", "--top-k", "10",
            "--prompt", "ROMEO:", "--sliding-window"]
    cached = run(*args)
    full = run(*args, "--no-cache")
    assert cached.returncode == 0 and full.returncode == 0, cached.stderr + full.stderr
    assert cached.stdout.startswith("ROMEO:")
    assert len(cached.stdout) > 150
    assert cached.stdout == full.stdout  # past the 32-token context too


def test_resume_reproduces_the_uninterrupted_run(text, tmp_path, run):
    common = [*TINY, "--iters", "60", "--eval-interval", "20", "--log-interval", "1"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert run("train", "--text", text, "--out", full, *common).returncode == 0
    r = run("train", "--text", text, "--out", part, *common, "--stop-at", "40")
    assert r.returncode == 0, r.stderr
    r = run("train", "--text", text, "--out", part, "--resume", "--threads", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    a, b = log_lines(full), log_lines(part)
    assert [l["iter"] for l in a] == [l["iter"] for l in b]
    for x, y in zip(a, b):
        for key in ("train_loss", "val_loss"):
            assert x.get(key) == y.get(key), (x, y)
    assert (full / "model.safetensors").read_bytes() == (part / "model.safetensors").read_bytes()


def test_bf16_training_follows_float32(trained, text, tmp_path, run):
    """Mixed precision (--dtype bf16) trains the same model to the same loss:
    the fixture's float32 run and this one share every option and seed."""
    out = tmp_path / "bf16"
    r = run("train", "--text", text, "--out", out, *TINY, "--iters", "300", "--eval-interval",
            "100", "--lr", "3e-3", "--warmup", "20", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    f32 = [l for l in log_lines(trained[0]) if "val_loss_full" in l][-1]
    b16 = [l for l in log_lines(out) if "val_loss_full" in l][-1]
    assert abs(b16["val_loss_full"] - f32["val_loss_full"]) < 0.02, (b16, f32)
    # Not the float32 run under another name: the rounding shows in the losses.
    assert [l.get("train_loss") for l in log_lines(out)] != [l.get("train_loss") for l in log_lines(trained[0])]
    # The checkpoint holds float32 weights, as every other.
    data = (out / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    assert json.loads(data[8:8 + n])["transformer.wte.weight"]["dtype"] == "F32"


def test_bf16_resume_keeps_the_dtype(text, tmp_path, run):
    """--resume continues in bf16 without being told: the dtype is saved."""
    common = [*TINY, "--iters", "40", "--eval-interval", "20", "--log-interval", "1", "--dtype", "bf16"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert run("train", "--text", text, "--out", full, *common).returncode == 0
    assert run("train", "--text", text, "--out", part, *common, "--stop-at", "20").returncode == 0
    r = run("train", "--text", text, "--out", part, "--resume", "--threads", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert [l.get("train_loss") for l in log_lines(full)] == [l.get("train_loss") for l in log_lines(part)]
    assert (full / "model.safetensors").read_bytes() == (part / "model.safetensors").read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip-header", "bad-config", "missing-vocab"])
def test_damaged_checkpoint_is_a_clear_error(trained, tmp_path, run, damage):
    import shutil
    out, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "flip-header":
        weights.write_bytes(data[:8] + b"#" + data[9:])
    elif damage == "bad-config":
        (copy / "config.json").write_text('{"vocab": "many"}')
    else:
        (copy / "vocab.json").unlink()
    r = run("sample", "--model", copy, "--tokens", "5")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith("qkv sample: error: ") and len(r.stderr.splitlines()) == 1, r.stderr


def test_train_bad_text(tmp_path, run):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = run("train", "--text", empty, "--out", tmp_path / "o", "--iters", "1")
    assert r.returncode == 1 and "is empty" in r.stderr
    r = run("train", "--text", tmp_path / "nope.txt", "--out", tmp_path / "o", "--iters", "1")
    assert r.returncode == 1 and "cannot open" in r.stderr and "No such file" in r.stderr
    r = run("train", "--text", tmp_path, "--out", tmp_path / "o", "--iters", "1")
    assert r.returncode == 1 and "is a directory" in r.stderr
    short = tmp_path / "short.txt"
    short.write_text("to be or not to be")
    r = run("train", "--text", short, "--out", tmp_path / "o", "--iters", "1")
    assert r.returncode == 1 and "needs at least" in r.stderr
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"hello \xff world" * 100)
    r = run("train", "--text", bad, "--out", tmp_path / "o", "--iters", "1")
    assert r.returncode == 1 and "UTF-8" in r.stderr


@pytest.mark.parametrize("args, message", [
    # The library's checks, worded with the flags (its messages name fields).
    (["--heads", "5"], "--heads: must divide --embd 128, found 5"),
    (["--kv-heads", "3"], "--kv-heads: must divide --heads 4, found 3"),
    (["--iters", "0"], "--iters: must be at least 1, found 0"),
    (["--lr", "-1"], "--lr: must be a finite number > 0, found -1"),
    (["--min-lr", "1"], "--min-lr: must be in [0, --lr 0.001], found 1"),
    (["--stop-at", "7"], "--stop-at: must be a multiple of --eval-interval 250"),
    (["--kernel", "gpu"], "--kernel: expected reference, fast or auto, found 'gpu'"),
    (["--frobnicate"], "--frobnicate"),
])
def test_train_bad_options(args, message, run, tmp_path):
    r = run("train", "--text", "x.txt", "--out", tmp_path, *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_sample_bad_options(trained, run):
    out, _ = trained
    assert run("sample", "--model", out, "--temperature=-0.5").returncode == 2  # 0 is greedy
    assert run("sample", "--model", out, "--top-p", "0").returncode == 2
    assert run("sample", "--model", out, "--top-k", "-1").returncode == 2
    r = run("sample", "--model", out / "nowhere")
    assert r.returncode == 1 and "cannot read" in r.stderr
