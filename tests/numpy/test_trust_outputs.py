"""No command destroys what it reads: an output that is (or resolves to) an
input, or lies in an input directory, is a usage error; two outputs of one
command naming one file are too; and `qkv import` leaves no stale training
state behind for a later --resume to bring back."""
import hashlib
import os

import numpy as np
import pytest

import tiny_models


@pytest.fixture
def run(qkv_bin):
    return tiny_models.runner(qkv_bin)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, qkv_bin):
    return tiny_models.trained(tmp_path_factory, qkv_bin, "learned")


def digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())
            if p.is_file()}


def spellings(d, tmp_path, name):
    """Ways to name d/name: plain, through "." and "..", through a link to d."""
    link = tmp_path / "link"
    if not link.exists():
        link.symlink_to(d, target_is_directory=True)
    return [d / name, f"{d}/./{name}", f"{d}/../{d.name}/{name}", link / name]


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "vocab.json"])
def test_export_refuses_to_overwrite_its_model(run, model_dir, tmp_path, name):
    before = digest(model_dir)
    for out in spellings(model_dir, tmp_path, name):
        r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", out)
        assert r.returncode == 2, (out, r.stderr)
        assert "--out: " in r.stderr and "would overwrite what --model" in r.stderr, r.stderr
    assert digest(model_dir) == before


def test_logits_refuses_to_overwrite_its_model(run, model_dir, tmp_path):
    before = digest(model_dir)
    for out in spellings(model_dir, tmp_path, "model.safetensors"):
        r = run("logits", "--model", model_dir, "--prompt", "the cat", "-o", out)
        assert r.returncode == 2, (out, r.stderr)
        assert "would overwrite what --model" in r.stderr, r.stderr
    assert digest(model_dir) == before


def test_explain_refuses_two_outputs_in_one_file(run, model_dir, tmp_path):
    out = tmp_path / "x"
    r = run("explain", "--model", model_dir, "--prompt", "the cat", "--html", out, "--png", out)
    assert r.returncode == 2, r.stderr
    assert "both name" in r.stderr, r.stderr
    assert not out.exists()


def test_explain_refuses_a_png_over_its_input(run, tmp_path):
    rng = np.random.default_rng(0)
    for name in ("q", "k", "v"):
        np.save(tmp_path / f"{name}.npy", rng.random((3, 4)))
    before = (tmp_path / "k.npy").read_bytes()
    r = run("explain", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
            tmp_path / "v.npy", "--png", tmp_path / "k.npy")
    assert r.returncode == 2, r.stderr
    assert "--png: " in r.stderr and "would overwrite what --k" in r.stderr, r.stderr
    assert (tmp_path / "k.npy").read_bytes() == before


def test_import_over_a_training_run_removes_its_state(run, qkv_bin, model_dir, tmp_path):
    # A nanoGPT state_dict of the tiny model, imported over another training run.
    weights = tmp_path / "ckpt.safetensors"
    r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", weights)
    assert r.returncode == 0, r.stderr
    # qkv's vocabulary has one more id (the unknown token) than the text has characters.
    text = tmp_path / "vocab.txt"
    text.write_text((model_dir.parent / "text.txt").read_text() + "~")
    other = tiny_models.train(qkv_bin, tmp_path, "learned")
    assert (other / "train_state.safetensors").exists()
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text", text,
            "--heads", "2", "-o", other, "--force")
    assert r.returncode == 0, r.stderr
    assert not (other / "train_state.safetensors").exists()
    imported = digest(other)["model.safetensors"]
    r = run("train", "--text", tmp_path / "text.txt", "--out", other, "--resume", "--no-progress")
    assert r.returncode != 0 and "no checkpoint" in r.stderr, r.stderr
    assert digest(other)["model.safetensors"] == imported


def test_import_refuses_weights_it_would_overwrite(run, model_dir, tmp_path):
    weights = tmp_path / "model.safetensors"
    r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", weights)
    assert r.returncode == 0, r.stderr
    before = weights.read_bytes()
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text",
            model_dir / "vocab.json", "--heads", "2", "-o", tmp_path, "--force")
    assert r.returncode == 2, r.stderr
    assert "would overwrite what --weights" in r.stderr, r.stderr
    assert weights.read_bytes() == before


def test_dev_stdout_on_a_pipe_is_written_in_place(qkv_bin, model_dir):
    import subprocess
    r = subprocess.run([qkv_bin, "logits", "--model", str(model_dir), "--prompt", "the cat",
                        "-o", "/dev/stdout"], capture_output=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(b"\x93NUMPY"), r.stdout[:80]


def test_html_page_escapes_markup_in_its_data(run, model_dir, tmp_path):
    import json
    import re
    import shutil
    hostile = tmp_path / "m<!--<script>"
    shutil.copytree(model_dir, hostile)
    page = tmp_path / "page.html"
    r = run("explain", "--model", hostile, "--prompt", "the cat", "--html", page, "--no-color")
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert data, html[:500]
    assert "<" not in data.group(1) and ">" not in data.group(1)
    assert "m<!--<script>" in json.loads(data.group(1))["title"]
    assert html.count("<script") == 2  # the data and the viewer, nothing opened by the title


SHORT = [a if a != "200" else "2" for a in tiny_models.SIZES]  # 2 iterations


@pytest.mark.parametrize("name", ["log.jsonl", "model.safetensors", "config.json"])
def test_train_refuses_a_text_the_run_would_overwrite(run, tmp_path, name):
    out = tmp_path / "run"
    out.mkdir()
    text = tiny_models.write_text(out / name)
    before = text.read_bytes()
    for spelled in spellings(out, tmp_path, name):
        r = run("train", "--text", spelled, "--out", out, *SHORT, "--force")
        assert r.returncode == 1, (spelled, r.stderr)
        assert f"--text: '{spelled}' is the run's own {name} in --out" in r.stderr, r.stderr
    assert text.read_bytes() == before


def test_train_takes_a_text_elsewhere_in_its_run_directory(run, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    text = tiny_models.write_text(out / "input.txt")
    r = run("train", "--text", text, "--out", out, *SHORT)
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").exists()
