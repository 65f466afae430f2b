"""What commands read: an empty path is a usage error naming the option
(exit 2), whichever command and path option it is; `qkv train --text` reads a
pipe, a FIFO or /dev/stdin to its end, as it reads a file; `qkv import` names
the tensor whose shape is empty, and a --vocab-text that is a directory."""
import os
import subprocess
import threading

import pytest

from test_bad_inputs_table import Inputs, nanogpt_state
from test_trust import TINY, model, qkv_inputs, write_text  # noqa: F401 - fixture

USAGE = 2


def command_lines(tmp_path, model_dir):
    """(command, option) -> a valid command line with that option's value
    replaced by ''."""
    q, k, v = (str(tmp_path / f"{n}.npy") for n in "qkv")
    qkv_inputs(tmp_path)
    text = str(write_text(tmp_path / "t.txt"))
    out = str(tmp_path / "out")
    m = str(model_dir)
    return {
        "attention": ["attention", "--q", q, "--k", k, "--v", v, "--mask", q, "--weights", out,
                      "--lse", out + "2", "-o", out + "3"],
        "explain": ["explain", "--q", q, "--k", k, "--v", v, "--mask", q, "--png", out],
        "explain --model": ["explain", "--model", m, "--prompt", "the", "--html", out,
                            "--weights-npy", out + "2"],
        "export": ["export", "--to", "nanogpt", "--model", m, "-o", out],
        "import": ["import", "--from", "nanogpt", "--weights", q, "--vocab-text", text,
                   "--heads", "2", "-o", out],
        "logits": ["logits", "--model", m, "--prompt", "the", "-o", out],
        "sample": ["sample", "--model", m],
        "train": ["train", "--text", text, "--out", out, *TINY],
    }


PATH_OPTIONS = [
    ("attention", o) for o in ("--q", "--k", "--v", "--mask", "--weights", "--lse", "-o")
] + [("explain", o) for o in ("--q", "--k", "--v", "--mask", "--png")] + [
    ("explain --model", o) for o in ("--model", "--html", "--weights-npy")
] + [("export", "--model"), ("export", "-o"), ("import", "--weights"), ("import", "--vocab-text"),
     ("import", "-o"), ("logits", "--model"), ("logits", "-o"), ("sample", "--model"),
     ("train", "--text"), ("train", "--out")]


@pytest.mark.parametrize("command, option", PATH_OPTIONS)
def test_empty_path_is_a_usage_error_naming_the_option(run, tmp_path, model, command, option):
    args = command_lines(tmp_path, model)[command]
    args[args.index(option) + 1] = ""
    r = run(*args)
    assert r.returncode == USAGE, r.stderr
    name = "--out" if option == "-o" else option
    assert f"{name}: expected a path, found an empty string" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr


def test_empty_path_written_with_equals_sign(run, tmp_path, model):
    r = run("logits", "--model", model, "--prompt", "the", "--out=")
    assert r.returncode == USAGE, r.stderr
    assert "error: --out: " in r.stderr


def trained_ok(r, out):
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").exists()


def test_train_reads_text_from_a_pipe(qkv_bin, tmp_path):
    text = write_text(tmp_path / "t.txt").read_bytes()
    out = tmp_path / "run"
    r = subprocess.run([qkv_bin, "train", "--text", "/dev/stdin", "--out", str(out), *TINY],
                       input=text, capture_output=True, timeout=120)
    trained_ok(r, out)


def test_train_reads_text_from_a_fifo(qkv_bin, tmp_path):
    text = write_text(tmp_path / "t.txt").read_bytes()
    fifo, out = tmp_path / "fifo", tmp_path / "run"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as f:
            f.write(text)

    writer = threading.Thread(target=feed)
    writer.start()
    r = subprocess.run([qkv_bin, "train", "--text", str(fifo), "--out", str(out), *TINY],
                       capture_output=True, timeout=120)
    writer.join()
    trained_ok(r, out)


def test_train_text_from_an_empty_pipe_is_empty(qkv_bin, tmp_path):
    r = subprocess.run([qkv_bin, "train", "--text", "/dev/stdin", "--out", str(tmp_path / "r"),
                        *TINY], input=b"", capture_output=True, text=False, timeout=120)
    assert r.returncode == 1
    assert b"--text: '/dev/stdin' is empty" in r.stderr


@pytest.mark.parametrize("name, shape", [
    ("transformer.wpe.weight", (0, 8)),
    ("transformer.wte.weight", (0, 8)),
    ("transformer.wpe.weight", (8, 0)),
])
def test_import_names_an_empty_tensor(run, tmp_path, name, shape):
    r = run(*nanogpt_state(Inputs(tmp_path, tmp_path), reshape=(name, shape)))
    assert r.returncode == 1, r.stderr
    assert f"tensor '{name}' has shape" in r.stderr or f"{name} [" in r.stderr, r.stderr
    assert "--heads" not in r.stderr


def test_import_vocab_text_directory(run, tmp_path):
    args = nanogpt_state(Inputs(tmp_path, tmp_path))
    (tmp_path / "d").mkdir()
    args[args.index("--vocab-text") + 1] = tmp_path / "d"
    r = run(*args)
    assert r.returncode == 1, r.stderr
    assert "is a directory" in r.stderr and "missing or unreadable" not in r.stderr
