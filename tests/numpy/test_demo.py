"""`qkv demo` prints the NumPy lesson's numbers (lessons/self_attention.py)."""
import subprocess
import sys

from conftest import ROOT


def lesson_lines():
    out = subprocess.run([sys.executable, str(ROOT / "lessons" / "self_attention.py")],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_demo_prints_the_lessons_text_digit_for_digit(run):
    r = run("demo")
    assert r.returncode == 0, r.stderr
    lesson = lesson_lines()
    demo = r.stdout.splitlines()
    assert len(demo) >= len(lesson)
    for i, (want, got) in enumerate(zip(lesson, demo)):
        assert got == want, f"line {i + 1}: lesson {want!r}, qkv demo {got!r}"


def test_demo_key_numbers(run):
    """A few of the lesson's numbers, written out, so the check does not rest
    on the lesson script alone."""
    out = run("demo").stdout
    assert "[[ 0.3047 -1.04    0.7505]" in out  # W_q from default_rng(42)
    assert "the   attends most to 'cat' (28%)" in out
    assert "cat   attends most to 'sat' (50%)" in out
    assert "attention(Q, K, V) matches the step-by-step result: True" in out
    assert "1024     30.35       0.95" in out
    assert "input (5, 8) -> heads (2, 5, 4) -> concat (5, 8) -> output (5, 8)" in out
    assert " [0.05 0.48 0.35 0.12]]" in out  # lesson 5, np.random.seed(0)


def test_demo_help(run):
    r = run("demo", "--help")
    assert r.returncode == 0
    assert "NumPy" in r.stdout
