"""Options are never silently replaced or ignored: in `qkv size`, --context 0
is not "the preset's", a huge value is not clipped, --kv-heads 0 is not
"--heads", and --arch with a preset is not ignored; `qkv train --resume
--force` (continue and start over) is refused."""
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


def test_train_resume_and_force_together_are_a_usage_error(run, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 40)
    r = run("train", "--text", text, "--out", tmp_path / "m", "--resume", "--force")
    assert r.returncode == 2, r.stderr
    assert "--force excludes --resume" in r.stderr or "--resume excludes --force" in r.stderr, r.stderr


def test_train_resume_reports_the_checkpoints_settings(run, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 40)
    small = ["--layers", "1", "--heads", "2", "--embd", "16", "--context", "16", "--batch", "4",
             "--eval-iters", "1", "--eval-interval", "2", "--threads", "1", "--no-progress"]
    r = run("train", "--text", text, "--out", tmp_path / "m", "--iters", "4", "--stop-at", "2",
            *small)
    assert r.returncode == 0, r.stderr
    r = run("train", "--text", text, "--out", tmp_path / "m", "--resume", "--no-progress",
            "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "1 layers, 2 heads / 2 kv, embd 16, context 16" in r.stdout, r.stdout
    assert "4 steps, resuming at 2" in r.stdout, r.stdout
