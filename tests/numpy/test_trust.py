"""Issue 10: never destroy what the user points at, never crash on an option,
never return a silent zero. Outputs that are devices, FIFOs or symlinks;
several outputs all or none; stdout write errors; one writer per run
directory; a trained run is not overwritten by accident; scores beyond
float32; windows at int64's edge; memory refused from file sizes."""
import fcntl
import json
import os
import sys
import shutil
import signal
import stat
import struct
import subprocess

import numpy as np
import pytest

USAGE, DATA = 2, 1


def tiny(**options):
    """A tiny run's flags; options override its sizes (iters=4 -> --iters 4)."""
    sizes = {"layers": 1, "heads": 2, "embd": 8, "context": 8, "iters": 2, "eval_iters": 1,
             "threads": 1, **options}
    return [x for k, v in sizes.items() for x in ("--" + k.replace("_", "-"), str(v))] + \
        ["--no-progress"]


TINY = tiny()


def qkv_inputs(tmp_path, q=None, k=None, v=None):
    rng = np.random.default_rng(0)
    arrays = {"q": rng.normal(size=(2, 3, 4)) if q is None else q,
              "k": rng.normal(size=(1, 5, 4)) if k is None else k,
              "v": rng.normal(size=(1, 5, 4)) if v is None else v}
    paths = []
    for name, a in arrays.items():
        np.save(tmp_path / f"{name}.npy", np.asarray(a, np.float32))
        paths += [f"--{name}", str(tmp_path / f"{name}.npy")]
    return ["attention", *paths]


def write_text(path, n_words=400):
    words = "the cat sat on a mat while the dog ran far away".split()
    path.write_text(" ".join(words[i % len(words)] for i in range(n_words)))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory, qkv_bin):
    tmp = tmp_path_factory.mktemp("trust")
    out = tmp / "model"
    r = subprocess.run([qkv_bin, "train", "--text", str(write_text(tmp / "t.txt")), "--out",
                        str(out), *TINY], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


# --- 1: what an output path names ------------------------------------------

def write_to_fifo(run, tmp_path, name):
    """Runs attention with -o a new FIFO; returns (result, is it still a FIFO,
    the bytes it carried). The read end is opened first, without blocking, so
    the binary's open for writing succeeds at once; the output (160 bytes)
    fits in the pipe's buffer."""
    fifo = tmp_path / name
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = run(*qkv_inputs(tmp_path), "-o", fifo)
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            data = b""
    finally:
        os.close(fd)
    return r, stat.S_ISFIFO(os.lstat(fifo).st_mode), data


@pytest.fixture
def devices_safe(run, tmp_path):
    """Writing to /dev/null or /dev/full by name is only safe with a binary
    that writes non-regular files in place: one with the old temporary-and-
    rename replaces the device itself when run as root. A FIFO of our own
    proves the binary safe first; without that proof the test fails without
    touching /dev."""
    r, still_fifo, _ = write_to_fifo(run, tmp_path, "probe")
    if r.returncode != 0 or not still_fifo:
        pytest.fail("the binary replaced a FIFO instead of writing into it; not trying /dev")


def test_output_to_dev_full_fails(run, tmp_path, devices_safe):
    r = run(*qkv_inputs(tmp_path), "-o", "/dev/full")
    assert r.returncode == DATA, r.stderr
    assert "--out: cannot write '/dev/full': No space left on device" in r.stderr


def test_output_to_dev_null_keeps_the_device(run, tmp_path, devices_safe):
    r = run(*qkv_inputs(tmp_path), "-o", "/dev/null", "--lse", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_output_to_fifo_writes_into_it(run, tmp_path):
    r, still_fifo, data = write_to_fifo(run, tmp_path, "pipe")
    assert r.returncode == 0, r.stderr
    assert still_fifo  # not replaced by a regular file
    assert data.startswith(b"\x93NUMPY")


def test_output_through_symlink_replaces_its_target(run, tmp_path):
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / "real.npy"
    target.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(os.path.join("sub", "real.npy"))
    r = run(*qkv_inputs(tmp_path), "-o", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == os.path.join("sub", "real.npy")
    assert np.load(target).shape == (2, 3, 4)


def test_output_with_longest_legal_name(run, tmp_path):
    out = tmp_path / ("a" * 250 + ".npy")  # 254 bytes: legal, but not with a suffix added
    r = run(*qkv_inputs(tmp_path), "-o", out)
    assert r.returncode == 0, r.stderr
    assert np.load(out).shape == (2, 3, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "q.npy", "k.npy", "v.npy"])


# --- 8: several outputs, all or none ----------------------------------------

@pytest.mark.parametrize("failing", ["dev-full", "directory"])
def test_attention_outputs_all_or_none(run, tmp_path, failing):
    out, lse = tmp_path / "out.npy", tmp_path / "lse.npy"
    out.write_bytes(b"previous out")
    lse.write_bytes(b"previous lse")
    weights = tmp_path / "w.npy"
    if failing == "dev-full":
        weights.symlink_to("/dev/full")
    else:
        weights.mkdir()
    r = run(*qkv_inputs(tmp_path), "-o", out, "--lse", lse, "--weights", weights)
    assert r.returncode == DATA, r.stderr
    assert "--weights: cannot write" in r.stderr
    assert out.read_bytes() == b"previous out" and lse.read_bytes() == b"previous lse"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".qkv-tmp")]


def test_checkpoint_failure_keeps_previous_set(run, tmp_path):
    text = write_text(tmp_path / "t.txt")
    out = tmp_path / "run"
    r = run("train", "--text", text, "--out", out, *tiny(iters=4, eval_interval=2), "--stop-at", "2")
    assert r.returncode == 0, r.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name.endswith((".json", ".safetensors"))}
    assert set(before) == {"config.json", "vocab.json", "model.safetensors", "train_state.safetensors"}
    # The next checkpoint's weights cannot be written: nothing of it may land.
    (out / "model.safetensors").unlink()
    (out / "model.safetensors").symlink_to("/dev/full")
    r = run("train", "--text", text, "--out", out, "--resume", "--threads", "1", "--no-progress")
    assert r.returncode == DATA, r.stderr
    assert "model.safetensors': No space left on device" in r.stderr
    for name in ("config.json", "vocab.json", "train_state.safetensors"):
        assert (out / name).read_bytes() == before[name], name
    assert not [p.name for p in out.iterdir() if p.name.startswith(".qkv-tmp")]


# --- 5: stdout write errors -------------------------------------------------

@pytest.mark.parametrize("command", ["demo", "explain", "attention", "sample"])
def test_stdout_write_error_is_an_error(qkv_bin, tmp_path, model, command):
    args = {"demo": ["demo"], "explain": ["explain"],
            "attention": [*qkv_inputs(tmp_path), "-o", str(tmp_path / "o.npy")],
            "sample": ["sample", "--model", str(model), "--tokens", "40000"]}[command]
    with open("/dev/full", "w") as full:
        r = subprocess.run([qkv_bin, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    assert r.returncode == DATA, r.stderr
    assert f"qkv {command}: error: cannot write to stdout" in r.stderr


# --- 3: --threads bounded ---------------------------------------------------

@pytest.mark.parametrize("command", ["attention", "train", "sample", "bench"])
@pytest.mark.parametrize("threads", ["100000", "2147483647"])
def test_threads_above_the_maximum(run, tmp_path, model, command, threads):
    args = {"attention": [*qkv_inputs(tmp_path), "-o", tmp_path / "o.npy"],
            "train": ["train", "--text", write_text(tmp_path / "t.txt"), "--out", tmp_path / "r"],
            "sample": ["sample", "--model", model],
            "bench": ["bench", "--n", "8"]}[command]
    r = run(*args, "--threads", threads)
    assert r.returncode == USAGE, r.stderr
    assert "--threads: expected an integer from 0 (all cores) to " in r.stderr
    assert f"found '{threads}'" in r.stderr


# --- 4: scores beyond float32 ------------------------------------------------

@pytest.mark.parametrize("case", ["huge-inputs", "huge-scale"])
def test_overflowing_scores_fast_equals_reference(run, tmp_path, case):
    rng = np.random.default_rng(1)
    v = rng.normal(size=(1, 3, 4))
    if case == "huge-inputs":
        args = qkv_inputs(tmp_path, q=np.full((1, 2, 4), 3e38), k=np.full((1, 3, 4), 3e38), v=v)
    else:
        # scores 1.6e39, 8e38, -8e38: past float32's 3.4e38, but in double
        # the first key takes all the weight
        k = np.array([[[2.0] * 4, [1.0] * 4, [-1.0] * 4]])
        args = [*qkv_inputs(tmp_path, v=v, k=k, q=np.full((1, 2, 4), 2.0)), "--scale", "1e38"]
    outs = {}
    for kernel in ("reference", "fast"):
        o = tmp_path / f"{kernel}.npy"
        r = run(*args, "--kernel", kernel, "-o", o)
        assert r.returncode == 0, r.stderr
        outs[kernel] = np.load(o)
    np.testing.assert_array_equal(outs["fast"], outs["reference"])
    assert np.all(np.isfinite(outs["fast"])) and np.any(outs["fast"] != 0)
    if case == "huge-inputs":  # equal scores: the mean of v
        np.testing.assert_allclose(outs["fast"][0], np.repeat(v.mean(axis=1), 2, axis=0), rtol=1e-6)
    else:
        np.testing.assert_allclose(outs["fast"][0], np.repeat(v[:, :1], 2, axis=1)[0], rtol=1e-6)


# --- 10: window sides at int64's edge ---------------------------------------

@pytest.mark.parametrize("causal", ["top-left", "bottom-right"])
def test_window_at_int64_max_is_unbounded(run, tmp_path, causal):
    args = qkv_inputs(tmp_path)
    outs = {}
    for kernel in ("reference", "fast"):
        for window in ("-1,-1", "-1,9223372036854775807", "9223372036854775807,9223372036854775807"):
            o = tmp_path / "o.npy"
            r = run(*args, "--causal", causal, "--window", window, "--kernel", kernel, "-o", o)
            assert r.returncode == 0, r.stderr
            outs[kernel, window] = np.load(o)
    first = outs["reference", "-1,-1"]
    for key, out in outs.items():
        np.testing.assert_allclose(out, first, rtol=1e-5, atol=1e-6, err_msg=str(key))


# --- 6, 7: the run directory ------------------------------------------------

def test_second_writer_is_refused(run, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".qkv-train.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running qkv train holds it
        r = run("train", "--text", write_text(tmp_path / "t.txt"), "--out", out, *TINY)
    assert r.returncode == DATA, r.stderr
    assert "is in use by another training run" in r.stderr
    assert not (out / "log.jsonl").exists()


def test_trained_run_is_not_overwritten(run, tmp_path, model):
    out = tmp_path / "run"
    shutil.copytree(model, out)
    state = (out / "train_state.safetensors").read_bytes()
    text = write_text(tmp_path / "t.txt")
    r = run("train", "--text", text, "--out", out, *TINY, "--seed", "7")
    assert r.returncode == DATA, r.stderr
    assert "already holds a trained run" in r.stderr and "--force" in r.stderr
    assert (out / "train_state.safetensors").read_bytes() == state
    r = run("train", "--text", text, "--out", out, *TINY, "--seed", "7", "--force")
    assert r.returncode == 0, r.stderr
    assert (out / "train_state.safetensors").read_bytes() != state


def test_model_without_train_state_is_not_overwritten(run, tmp_path, model):
    """A folder whose model.safetensors no qkv train wrote (a Hugging Face
    download, a `qkv import`) has no train_state.safetensors: --out pointing
    at it by mistake must not replace its weights and config."""
    out = tmp_path / "downloaded"
    shutil.copytree(model, out)
    (out / "train_state.safetensors").unlink()
    weights = (out / "model.safetensors").read_bytes()
    config = (out / "config.json").read_bytes()
    r = run("train", "--text", write_text(tmp_path / "t.txt"), "--out", out, *TINY, "--seed", "7")
    assert r.returncode == DATA, r.stderr
    assert "model.safetensors" in r.stderr and "--force" in r.stderr
    assert (out / "model.safetensors").read_bytes() == weights
    assert (out / "config.json").read_bytes() == config


# --- 9: memory refused from the files' sizes --------------------------------

def test_sample_config_larger_than_its_weights(run, tmp_path, model):
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["context"] = 10_000_000
    (copy / "config.json").write_text(json.dumps(cfg))
    r = run("sample", "--model", copy, "--tokens", "1")
    assert r.returncode == DATA, r.stderr
    assert "config.json': describes a model of 80000" in r.stderr
    assert "model.safetensors' has only" in r.stderr


def test_train_text_memory_near_text_size(qkv_bin, tmp_path):
    """Token ids in one byte each for a small vocabulary: a 40 MB text costs
    about 80 MB (text + ids), not the ~9x int32 copies did."""
    size = 40 << 20
    text = tmp_path / "big.txt"
    line = b"the cat sat on a mat while the dog ran far away\n"
    text.write_bytes(line * (size // len(line)))
    # A fresh Python runs qkv and reports its only child's peak RSS: this
    # process's own children's peak would include every earlier test's.
    probe = ("import resource, subprocess, sys; "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
             "print(r.stderr, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", probe, qkv_bin, "train", "--text", str(text),
                        "--out", str(tmp_path / "run"), *tiny(iters=1)],
                       capture_output=True, text=True, timeout=300)
    code, peak_kib = map(int, r.stdout.split())
    assert code == 0, r.stderr
    assert peak_kib * 1024 < 3 * size, f"peak RSS {peak_kib} KiB for a {size >> 20} MiB text"


# --- 11: option values are usage errors naming the option -------------------

@pytest.mark.parametrize("extra, fragment", [
    (["--scale", "nan"], "--scale: expected a finite number, found 'nan'"),
    (["--scale", ""], "--scale: expected a finite number, found ''"),
    (["--scale", "inf"], "--scale: expected a finite number, found 'inf'"),
    (["--softcap", "nan"], "--softcap: expected a number >= 0 (0 = off), found 'nan'"),
])
def test_attention_option_values(run, tmp_path, extra, fragment):
    r = run(*qkv_inputs(tmp_path), "-o", tmp_path / "o.npy", *extra)
    assert r.returncode == USAGE, r.stderr
    assert fragment in r.stderr


@pytest.mark.parametrize("extra, fragment", [
    (["--lr", "inf"], "--lr: must be a finite number > 0, found inf"),
    (["--weight-decay", "nan"], "--weight-decay: must be a finite number >= 0, found nan"),
    (["--grad-clip", "inf"], "--grad-clip: must be a finite number >= 0 (0 = off), found inf"),
    (["--rope"], "--rope: needs an even head dim, found --embd / --heads = 3"),
    (["--seed", "18446744073709551616"], "--seed: expected an integer from 0 to 18446744073709551615, found '18446744073709551616'"),
    (["--seed", "-1"], "--seed: expected an integer from 0 to 18446744073709551615, found '-1'"),
    (["--iters", "99999999999999999999"],
     "--iters: expected a number of steps >= 1, found '99999999999999999999' (the most is 9223372036854775807)"),
    (["--iters", "2.5"], "--iters: expected a number of steps >= 1, found '2.5'"),
])
def test_train_option_values(run, tmp_path, extra, fragment):
    flags = tiny(embd=6) if "--rope" in extra else TINY  # head dim 3
    r = run("train", "--text", write_text(tmp_path / "t.txt"), "--out", tmp_path / "r", *flags, *extra)
    assert r.returncode == USAGE, r.stderr
    assert fragment in r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("extra, fragment", [
    (["--tokens", "99999999999999999999"], "--tokens: expected a number of tokens >= 0, found '99999999999999999999'"),
    (["--top-k", "2.5"], "--top-k: expected 0 (all) or a number of likeliest tokens to choose among, found '2.5'"),
    (["--seed", "99999999999999999999"], "--seed: expected an integer from 0 to"),
    (["--prompt", "ab\udcffcd"], "--prompt: invalid UTF-8 at byte 2"),
])
def test_sample_option_values(run, model, extra, fragment):
    r = run("sample", "--model", model, *extra)
    assert r.returncode == USAGE, r.stderr
    assert fragment in r.stderr


def test_sample_empty_model_names_option(run):
    r = run("sample", "--model", "")
    assert r.returncode == USAGE, r.stderr
    assert "--model: expected a path, found an empty string" in r.stderr


@pytest.mark.parametrize("edit, fragment", [
    ({"arch": "llama"}, "expected 'arch' \"gpt\" (the only architecture qkv builds), found \"llama\""),
    ({"dropout": 0.1}, "unknown key \"dropout\""),
])
def test_config_unknown_arch_or_key(run, tmp_path, model, edit, fragment):
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg.update(edit)
    (copy / "config.json").write_text(json.dumps(cfg))
    r = run("sample", "--model", copy, "--tokens", "1")
    assert r.returncode == DATA, r.stderr
    assert fragment in r.stderr


def test_npy_header_bytes_are_escaped(qkv_bin, tmp_path):
    args = qkv_inputs(tmp_path)
    header = b"{'descr': '<\xff\xfe\x1b[31m', 'fortran_order': False, 'shape': (2, 3, 4), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    (tmp_path / "q.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    r = subprocess.run([qkv_bin, *args, "-o", str(tmp_path / "o.npy")], capture_output=True,
                       timeout=60)
    assert r.returncode == DATA
    err = r.stderr.decode("utf-8")  # valid UTF-8: no raw bytes reach the terminal
    assert "\x1b" not in err and "\\xff\\xfe\\x1b[31m" in err, err


# --- Also: SIGTERM, like Ctrl-C, checkpoints and exits 128 + the signal ------

def test_sigterm_saves_a_checkpoint_and_exits_143(qkv_bin, tmp_path):
    text = write_text(tmp_path / "t.txt", 3000)
    out = tmp_path / "run"
    p = subprocess.Popen([qkv_bin, "train", "--text", str(text), "--out", str(out),
                          *tiny(iters=100000, eval_interval=50000, log_interval=1)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stdout:  # the first step is logged: the loop is running
        if line.startswith("iter 1/"):
            p.send_signal(signal.SIGTERM)
            break
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, (p.returncode, err)
    assert "qkv train: interrupted: checkpoint saved at iteration" in err
    assert (out / "train_state.safetensors").exists()
