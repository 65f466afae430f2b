"""`qkv size` never silently replaces what it was given: --context 0 is not
"the preset's", a huge value is not clipped, --kv-heads 0 is not "--heads",
and --arch with a preset is not ignored."""
import pytest


@pytest.mark.parametrize("args,what", [
    (["gpt2", "--context", "0"], "--context: expected a count >= 1, found 0"),
    (["gpt2", "--context", "99999999999999999999"], "--context"),
    (["--layers", "2", "--embd", "64", "--heads", "4", "--vocab", "10", "--kv-heads", "0"],
     "--kv-heads: required for a custom shape, a count >= 1"),
    (["--layers", "99999999999999999999", "--embd", "64", "--heads", "4", "--vocab", "10"],
     "--layers"),
    (["gpt2", "--arch", "llama"], "--arch: sets the block layout of a custom shape"),
])
def test_size_refuses_what_it_would_replace(run, args, what):
    r = run("size", *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert what in r.stderr, r.stderr


def test_size_defaults_still_apply_when_not_given(run):
    r = run("size", "gpt2", "--json")
    assert r.returncode == 0, r.stderr
    assert '"context": 1024' in r.stdout.replace(" ", "").replace('"context":1024', '"context": 1024')
