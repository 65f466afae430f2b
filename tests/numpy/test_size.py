"""`qkv size`: the presets' costs in JSON and the table, and its bad options."""
import json

import pytest


@pytest.fixture
def size(run):
    return lambda *args: run("size", *args)


def test_json_has_every_preset_with_published_counts(size):
    r = size("--json")
    assert r.returncode == 0, r.stderr
    rows = {row["model"]: row for row in json.loads(r.stdout)}
    assert rows["gpt2"]["params"] == 124439808
    assert rows["llama3-70b"]["params"] == 70553706496
    # Llama 3 8B: 32 layers x 8 key/value heads x 128 x (K and V) x 4 bytes.
    assert rows["llama3-8b"]["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 4
    assert rows["llama3-8b"]["kv_bytes_mha"] == 4 * rows["llama3-8b"]["kv_bytes"]


def test_context_batch_and_dtype_scale_the_cache_only(size):
    base = json.loads(size("gpt2", "--json").stdout)[0]
    more = json.loads(size("gpt2", "--context", "2048", "--batch", "3", "--dtype", "bf16", "--json").stdout)[0]
    assert more["params"] == base["params"]
    assert more["kv_bytes"] == base["kv_bytes_per_token"] / 2 * 2048 * 3


def test_custom_shape_and_table(size):
    r = size("--layers", "4", "--embd", "128", "--heads", "4", "--kv-heads", "2", "--vocab", "65",
             "--context", "64")
    assert r.returncode == 0, r.stderr
    assert "custom" in r.stdout and "4/2" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["gpt-5"], "unknown preset 'gpt-5'"),
    (["--layers", "2", "--embd", "100", "--heads", "3", "--vocab", "5"], "heads must divide embd"),
    (["--layers", "2", "--embd", "64"], "--heads: required"),
    (["gpt2", "--layers", "2"], "not both"),
    (["gpt2", "--no-bias"], "not both"),
    (["--dtype", "f16"], "--dtype: expected f32 or bf16"),
    (["--batch", "0"], "--batch: expected a count >= 1"),
    (["--arch", "rnn", "--layers", "1", "--embd", "8", "--heads", "2", "--vocab", "3"], "--arch: expected"),
])
def test_bad_options_are_usage_errors(size, args, message):
    r = size(*args)
    assert r.returncode == 2
    assert message in r.stderr
    assert r.stdout == ""
