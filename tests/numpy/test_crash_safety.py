"""Crash safety of `qkv train`: SIGKILL at random moments (many of them
inside checkpoint writes) never leaves an unreadable checkpoint, and resuming
after every kill ends with exactly the losses of an uninterrupted run; Ctrl-C
(SIGINT) saves a checkpoint mid-interval and exits with 130."""
import json
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

# Tiny, and a checkpoint at every step, so most of the run is spent writing
# checkpoints and a random kill often lands inside one.
TINY = ["--layers", "1", "--heads", "2", "--embd", "16", "--context", "16", "--batch", "4",
        "--eval-iters", "2", "--log-interval", "1", "--threads", "1", "--no-progress"]
KILLS = 20


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    rng = random.Random(0)
    words = "the cat sat on a mat while the dog ran far away from home".split()
    path = tmp_path_factory.mktemp("data") / "text.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(3000)))
    return path


def losses(out):
    """log.jsonl without the timings, which differ from run to run."""
    lines = (Path(out) / "log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(l).items() if k not in ("elapsed_s", "tokens_per_s")}
            for l in lines]


def train(qkv_bin, text, out, *args):
    return [qkv_bin, "train", "--text", str(text), "--out", str(out), *args]


def test_sigkill_at_random_moments_then_resume(qkv_bin, text, tmp_path, run):
    options = [*TINY, "--iters", "60", "--eval-interval", "1"]
    ref = tmp_path / "reference"
    r = run(*train(qkv_bin, text, ref, *options)[1:])
    assert r.returncode == 0, r.stderr
    expected = losses(ref)

    out = tmp_path / "killed"
    rng = random.Random(1234)
    kills = finished = 0
    deadline = time.monotonic() + 50
    while kills < KILLS:
        assert time.monotonic() < deadline, f"only {kills} kills in the time allowed"
        resume = (out / "train_state.safetensors").exists()
        args = ["--resume", "--threads", "1", "--no-progress"] if resume else options
        p = subprocess.Popen(train(qkv_bin, text, out, *args), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=rng.uniform(0.0, 0.15))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
        _, err = p.communicate()
        if p.returncode == 0:  # it finished before the kill: a whole run, so compare, start over
            assert losses(out) == expected
            finished += 1
            for f in out.iterdir():
                f.unlink()
            continue
        assert p.returncode == -signal.SIGKILL, (p.returncode, err)
        kills += 1
        if (out / "train_state.safetensors").exists():  # a checkpoint was committed: it loads
            s = run("sample", "--model", out, "--tokens", "1")
            assert s.returncode == 0, (kills, s.stderr)
    # The last kill may have hit a fresh run (after one that finished) before
    # its first checkpoint: then there is nothing to resume, and it starts over.
    final = (["--resume", "--threads", "1", "--no-progress"]
             if (out / "train_state.safetensors").exists() else options)
    r = run(*train(qkv_bin, text, out, *final)[1:])
    assert r.returncode == 0, r.stderr
    assert losses(out) == expected
    # no temporaries left over (".qkv-tmp.<pid>.<n>", see src/io/atomic_file.h)
    assert not [f.name for f in out.iterdir() if f.name.startswith(".qkv-tmp")]
    print(f"{kills} kills, {finished} runs finished before their kill")


def test_sigint_saves_a_checkpoint_and_resume_is_exact(qkv_bin, text, tmp_path, run):
    options = ["--layers", "2", "--heads", "2", "--embd", "32", "--context", "16", "--batch", "8",
               "--eval-iters", "2", "--threads", "1", "--no-progress", "--iters", "300",
               "--eval-interval", "50", "--log-interval", "1"]
    ref = tmp_path / "reference"
    r = run(*train(qkv_bin, text, ref, *options)[1:])
    assert r.returncode == 0, r.stderr

    out = tmp_path / "interrupted"
    p = subprocess.Popen(train(qkv_bin, text, out, *options), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stdout:  # interrupt once step 20 is logged, between two evaluations
        m = re.match(r"iter (\d+)/300 ", line)
        if m and int(m.group(1)) >= 20:
            p.send_signal(signal.SIGINT)
            break
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qkv train: interrupted: checkpoint saved at "
                                                   "iteration "), err
    assert lines[0].endswith("; continue with --resume"), err
    next_iter = int(lines[0].split("iteration ")[1].split(";")[0])
    assert 20 < next_iter < 300 and next_iter % 50 != 0, next_iter  # mid-interval
    assert max(l["iter"] for l in losses(out)) == next_iter - 1
    assert run("sample", "--model", out, "--tokens", "1").returncode == 0

    r = run(*train(qkv_bin, text, out, "--resume", "--threads", "1", "--no-progress")[1:])
    assert r.returncode == 0, r.stderr
    assert losses(out) == losses(ref)
