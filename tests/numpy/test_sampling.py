"""`qkv logits` against the checkpoint run in NumPy, and `qkv sample`'s
choice: --temperature 0 is the argmax of those logits at every step, a tiny
--top-p keeps only the likeliest token, the unknown id is never chosen."""
import numpy as np
import pytest

import tiny_models
from gpt_reference import Checkpoint


@pytest.fixture
def run(qkv_bin):
    return tiny_models.runner(qkv_bin)


@pytest.fixture(scope="module", params=sorted(tiny_models.VARIANTS))
def model(request, tmp_path_factory, qkv_bin):
    return tiny_models.trained(tmp_path_factory, qkv_bin, request.param)


def logits(run, model, prompt, tmp_path):
    out = tmp_path / "logits.npy"
    r = run("logits", "--model", model, "--prompt", prompt, "-o", out)
    assert r.returncode == 0, r.stderr
    assert f"to {out}" in r.stdout
    return np.load(out)


def test_logits_equal_numpy_forward_of_the_checkpoint(model, run, tmp_path):
    ck = Checkpoint(model)
    prompt = "a dog sat on the cat while"
    got = logits(run, model, prompt, tmp_path)
    assert got.shape == (len(prompt), len(ck.chars) + 1) and got.dtype == np.float32
    _, truth = ck.run(ck.encode(prompt))
    np.testing.assert_allclose(got, truth, atol=2e-5 * np.abs(truth).max(), rtol=0)


def sample(run, model, prompt, *options):
    r = run("sample", "--model", model, "--prompt", prompt, *options)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(prompt) and r.stdout.endswith("\n")
    return r.stdout[len(prompt):-1]


def assert_greedy(run, model, prompt, generated, tmp_path):
    """Each generated character is the argmax of the logits after the text before it.

    `qkv logits` runs the whole text in one pass (row t follows characters
    0..t), the sampler one token at a time against its KV cache; their float
    rounding differs, so a step whose two best logits are within 1e-5 may
    go either way. The unknown id (the last) is never a candidate."""
    ck = Checkpoint(model)
    assert "\ufffd" not in generated
    rows = logits(run, model, prompt + generated[:-1], tmp_path)[len(prompt) - 1:, :-1]
    chosen = ck.encode(generated)
    assert len(rows) == len(chosen)
    for step, (row, c) in enumerate(zip(rows, chosen)):
        best = int(np.argmax(row))
        assert c == best or row[best] - row[c] < 1e-5, (step, ck.chars[c], ck.chars[best])


def test_temperature_zero_is_the_argmax_at_each_step(model, run, tmp_path):
    prompt = "the dog "
    n = 32 - len(prompt)  # the whole text fits the context: one logits pass checks every step
    greedy = sample(run, model, prompt, "--temperature", "0", "--tokens", n)
    assert len(greedy) == n
    assert_greedy(run, model, prompt, greedy, tmp_path)
    # Deterministic: the seed draws nothing; recomputing the context agrees.
    assert sample(run, model, prompt, "--temperature", "0", "--tokens", n, "--seed", "99") == greedy
    assert sample(run, model, prompt, "--temperature", "0", "--tokens", n, "--no-cache") == greedy


def test_tiny_top_p_keeps_only_the_likeliest(model, run):
    prompt = "a cat "
    greedy = sample(run, model, prompt, "--temperature", "0", "--tokens", 20)
    for seed in ("1", "2"):
        nucleus = sample(run, model, prompt, "--top-p", "1e-9", "--tokens", 20, "--seed", seed)
        assert nucleus == greedy


def test_top_p_narrows_the_choice(model, run):
    """Over many draws, a smaller nucleus gives fewer distinct characters."""
    prompt = "the "
    wide = sample(run, model, prompt, "--temperature", "2", "--tokens", 300, "--seed", "3",
                  "--sliding-window")
    narrow = sample(run, model, prompt, "--temperature", "2", "--top-p", "0.5", "--tokens", 300,
                    "--seed", "3", "--sliding-window")
    assert len(set(narrow)) < len(set(wide)), (set(narrow), set(wide))
    assert "\ufffd" not in wide + narrow  # the unknown id is never drawn, even flattened


def test_a_config_without_gelu_runs_the_tanh_form(run, tmp_path_factory, qkv_bin, tmp_path):
    """Checkpoints written before "gelu" existed were trained with the tanh
    GELU and must load as tanh: the same weights, config.json without the key,
    give the NumPy forward's tanh logits, not its exact ones."""
    import json
    import shutil
    model = tmp_path / "old"
    shutil.copytree(tiny_models.trained(tmp_path_factory, qkv_bin, "learned"), model)
    cfg = json.loads((model / "config.json").read_text())
    assert cfg.pop("gelu") == "exact"  # new models: nanoGPT's GELU
    (model / "config.json").write_text(json.dumps(cfg))
    # The weights record their config too (metadata "qkv_config"); an old
    # checkpoint's record has no "gelu" either.
    raw = (model / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    recorded = json.loads(header["__metadata__"]["qkv_config"])
    del recorded["gelu"]
    header["__metadata__"]["qkv_config"] = json.dumps(recorded)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (model / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    ck = Checkpoint(model)
    prompt = "a dog sat on the cat"
    got = logits(run, model, prompt, tmp_path)
    _, tanh_truth = ck.run(ck.encode(prompt))
    np.testing.assert_allclose(got, tanh_truth, atol=2e-5 * np.abs(tanh_truth).max(), rtol=0)
    ck.cfg["gelu"] = "exact"
    _, exact_truth = ck.run(ck.encode(prompt))
    assert np.abs(got - exact_truth).max() > 1e-4 * np.abs(exact_truth).max()


@pytest.mark.parametrize("command", ["sample", "logits", "embed", "explain"])
def test_model_commands_default_to_the_physical_cores(run, command):
    """Running a model uses the machine's cores unless told (it used to be one
    thread for `qkv sample`); --help says so, with this machine's count."""
    import os
    r = run(command, "--help")
    assert r.returncode == 0
    help_text = " ".join(r.stdout.split())
    assert "--threads" in help_text and "default: the machine's physical cores" in help_text
    if "OMP_NUM_THREADS" not in os.environ:
        n = int(help_text.split("default: the machine's physical cores, ")[1].split()[0])
        assert 1 <= n <= os.cpu_count()


def test_sample_stops_at_the_context_and_says_so(model, run):
    """Context 32: after a 4-character prompt, 29 characters fit; then it stops,
    on stderr, unless --sliding-window asks to go on as nanoGPT does."""
    r = run("sample", "--model", model, "--prompt", "the ", "--tokens", "100", "--seed", "1")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout) == 4 + 29 + 1
    assert r.stderr == ("qkv sample: stopped after 29 of 100 characters: the model's context of 32 characters "
                        "is full (--sliding-window goes on, reading only the last 32)\n")
    slid = run("sample", "--model", model, "--prompt", "the ", "--tokens", "100", "--seed", "1", "--sliding-window")
    assert slid.returncode == 0 and slid.stderr == ""
    assert len(slid.stdout) == 4 + 100 + 1 and slid.stdout.startswith(r.stdout[:-1])
