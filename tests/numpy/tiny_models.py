"""Tiny models trained by `qkv train` in about a second, for the tests of
what is done with a trained model (explain --model, logits, sample). The text
is made here, so these tests need no data files."""
import os
import random
import subprocess

WORDS = "the cat sat on a mat while the dog ran far away and a bird sang to them".split()

# Small enough to train in a second or two on 2 busy cores, trained long
# enough (high learning rate, short warm-up) that attention is far from uniform.
SIZES = ["--layers", "2", "--embd", "16", "--context", "32", "--batch", "8", "--iters", "200",
         "--eval-interval", "200", "--eval-iters", "2", "--lr", "1e-2", "--warmup", "10",
         "--threads", "1", "--no-progress"]  # one thread: on shared busy cores, 10x faster than 2
# Learned positions and plain heads; RoPE with GQA (2 query heads share each
# key/value head) and biases: the two position schemes and head layouts.
VARIANTS = {
    "learned": ["--heads", "2"],
    "rope-gqa": ["--heads", "4", "--kv-heads", "2", "--rope", "--bias"],
}


def write_text(path, n_words=3000):
    rng = random.Random(0)
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(n_words)))
    return path


_trained = {}


def trained(tmp_path_factory, qkv_bin, variant):
    """The model directory of VARIANTS[variant], trained once per test session."""
    if variant not in _trained:
        _trained[variant] = train(qkv_bin, tmp_path_factory.mktemp(variant), variant)
    return _trained[variant]


def train(qkv_bin, tmp_dir, variant):
    """Trains VARIANTS[variant] under tmp_dir; returns the model directory."""
    text = write_text(tmp_dir / "text.txt")
    out = tmp_dir / variant
    r = subprocess.run([qkv_bin, "train", "--text", str(text), "--out", str(out), *SIZES,
                        *VARIANTS[variant]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def runner(qkv_bin):
    """conftest's `run`, with OpenMP held to one thread: a model 16 wide
    gives threads nothing to share, and on a busy machine their spinning made
    `qkv sample` 300x slower (5 s instead of 15 ms). Results do not depend on
    the thread count."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def _run(*args, timeout=120):
        return subprocess.run([qkv_bin, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    return _run
