"""qkv train's reporting: the summary before it starts, --resume refusing
options that differ from the checkpoint's, elapsed time continuing across a
resume, the warm-up default, and the same iteration numbers in the log lines
and log.jsonl."""
import json

ARGS = ["--iters", "12", "--eval-interval", "4", "--batch", "4", "--layers", "1", "--embd", "16",
        "--heads", "2", "--context", "8", "--threads", "1", "--no-progress", "--log-interval", "2"]


def text(tmp_path):
    words = "the cat sat on a mat while the dog ran far away".split()
    p = tmp_path / "t.txt"
    p.write_text(" ".join(words[i % len(words)] for i in range(300)))
    return p


def log(run_dir):
    return [json.loads(l) for l in (run_dir / "log.jsonl").read_text().splitlines()]


def test_summary_and_iteration_numbers(run, tmp_path):
    r = run("train", "--text", text(tmp_path), "--out", tmp_path / "r", *ARGS)
    assert r.returncode == 0, r.stderr
    assert "parameters" in r.stdout and "vocabulary" in r.stdout and "ms each" in r.stdout
    printed = [int(l.split()[1].split("/")[0]) for l in r.stdout.splitlines() if l.startswith("iter ") and "/" in l.split()[1]]
    logged = [row["iter"] for row in log(tmp_path / "r") if "train_loss" in row]
    assert printed == logged
    assert "whole validation split" in r.stdout
    assert "val_loss_full" in log(tmp_path / "r")[-1]


def test_resume_refuses_conflicting_options_naming_them(run, tmp_path):
    t, out = text(tmp_path), tmp_path / "r"
    assert run("train", "--text", t, "--out", out, *ARGS, "--stop-at", "4").returncode == 0
    changed = [a if a != "4" or ARGS[i - 1] != "--batch" else "8" for i, a in enumerate(ARGS)]
    r = run("train", "--text", t, "--out", out, *changed, "--resume", "--lr", "0.01")
    assert r.returncode == 2
    assert "--lr 0.010000 (checkpoint: 0.001000)" in r.stderr and "--batch 8 (checkpoint: 4)" in r.stderr
    r = run("train", "--text", t, "--out", out, *ARGS, "--resume", "--dtype", "bf16")
    assert r.returncode == 2 and "--dtype bf16 (checkpoint: float32)" in r.stderr, r.stderr
    # The same values as the checkpoint's are fine.
    r = run("train", "--text", t, "--out", out, *ARGS, "--resume", "--dtype", "float32")
    assert r.returncode == 0, r.stderr


def test_dtype_takes_float32_or_bf16(run, tmp_path):
    r = run("train", "--text", text(tmp_path), "--out", tmp_path / "r", *ARGS, "--dtype", "f16")
    assert r.returncode == 2 and "--dtype" in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_elapsed_time_continues_across_resume(run, tmp_path):
    t, out = text(tmp_path), tmp_path / "r"
    assert run("train", "--text", t, "--out", out, *ARGS, "--stop-at", "8").returncode == 0
    before = max(row["elapsed_s"] for row in log(out))
    assert run("train", "--text", t, "--out", out, *ARGS, "--resume").returncode == 0
    after = [row["elapsed_s"] for row in log(out) if row["iter"] >= 8]
    assert all(e >= before for e in after), (before, after)
