"""`qkv demo` prints every number the two seed lessons print.

The expected numbers are the lessons' own printed output, stored in
lesson_facts.py (lesson 2's "Output" blocks and model-size table; for lesson 5,
which shows its code but not its printed matrix, the output of that code), so
these tests run on any clone. Where the lesson texts are present (../shared/seeds/
beside the repository, or QKV_SEEDS), test_stored_facts_are_the_lessons checks
the stored facts against the texts themselves. Nothing here is a script of ours;
if the demo and a lesson disagree, the lesson wins.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from lesson_facts import (LESSON2_MODEL_TABLE, LESSON2_OUTPUT_BLOCKS, LESSON5_SHAPES,
                          LESSON5_WEIGHTS)

SEEDS = Path(os.environ.get("QKV_SEEDS", ROOT.parent / "shared" / "seeds"))
SECTIONS = ["2.2", "2.3", "2.4", "2.5", "sizes", "lesson5", "practice-unscaled",
            "practice-padding"]


def lesson_text(prefix):
    """The text of the seed lesson whose file name starts with `prefix`, or a skip."""
    files = sorted(SEEDS.glob(f"{prefix}_*.txt")) if SEEDS.is_dir() else []
    if not files:
        pytest.skip(f"lesson text {prefix}_*.txt not found in {SEEDS} (../shared/seeds or "
                    "QKV_SEEDS); the demo is still checked against lesson_facts.py")
    return files[0].read_text(encoding="utf-8")


def output_blocks(text):
    """The lines of every block that follows a line reading "Output", up to
    the next blank line, in the order the lesson prints them."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() == "Output":
            block = []
            for follow in lines[i + 1:]:
                if not follow.strip():
                    break
                block.append(follow.rstrip())
            blocks.append(block)
    return blocks


def model_table(text):
    """Lesson 2's model-size table, each row split on white space."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["Model", "d_model"])
    end = next(i for i in range(head, len(lines)) if not lines[i].strip())
    return [line.split() for line in lines[head:end]]


def find_block(lines, block, start=0):
    """Index of the first place at or after `start` where `block` appears as
    consecutive lines, or -1."""
    for i in range(start, len(lines) - len(block) + 1):
        if lines[i:i + len(block)] == block:
            return i
    return -1


def demo_lines(run, *args):
    r = run("demo", *args)
    assert r.returncode == 0, r.stderr
    return [line.rstrip() for line in r.stdout.splitlines()]


def lesson5_code(text):
    """Lesson 5's first code block, the NumPy one, with the typographic quotes
    and dash the saved web page put into it turned back into Python."""
    blocks = re.findall(r"“`python\n(.*?)\n“`", text, flags=re.S)
    assert blocks, "no code block found in lesson 5"
    code = blocks[0]
    for typo, plain in (("“", '"'), ("”", '"'), ("‘", "'"), ("’", "'"), ("–", "-")):
        code = code.replace(typo, plain)
    return code


def test_stored_facts_are_the_lessons(tmp_path):
    """lesson_facts.py is exactly what the lesson texts print (skips without them)."""
    lesson2 = lesson_text("000")
    stored = [block for blocks in LESSON2_OUTPUT_BLOCKS.values() for block in blocks]
    assert output_blocks(lesson2) == stored
    assert model_table(lesson2) == LESSON2_MODEL_TABLE
    lesson5 = lesson_text("001")
    code = lesson5_code(lesson5)
    assert "np.random.seed(0)" in code and "print(weights.round(2))" in code
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [line.rstrip() for line in r.stdout.splitlines()] == LESSON5_WEIGHTS
    shown = re.findall(r"print\([^\n]*\)\s*#\s*(torch\.Size\(\[[\d, ]+\]\))", lesson5)
    assert shown == LESSON5_SHAPES


def test_every_output_block_of_lesson_2_in_order(run):
    blocks = [block for blocks in LESSON2_OUTPUT_BLOCKS.values() for block in blocks]
    numbers = sum(len(re.findall(r"\d+\.?\d*", line)) for block in blocks for line in block)
    assert len(blocks) >= 8 and numbers >= 80, "lesson_facts.py lost some of the lesson's output"
    lines = demo_lines(run)
    at = 0
    for block in blocks:
        found = find_block(lines, block, at)
        assert found >= 0, ("lesson output missing from qkv demo (or out of order):\n" +
                            "\n".join(block))
        at = found + len(block)


def test_sections_are_the_whole_demo_in_pieces(run):
    """Each --section prints its part exactly as the whole demo does, so a
    part's random numbers continue the lesson's stream even when it is alone."""
    whole = demo_lines(run)
    pieces = []
    for name in SECTIONS:
        part = demo_lines(run, "--section", name)
        assert part[0].startswith("== ") and f"(--section {name})" in part[0]
        pieces.extend(([""] if pieces else []) + part)
    assert whole[:len(pieces)] == pieces


def test_lesson_2_blocks_by_section(run):
    for name, expected in LESSON2_OUTPUT_BLOCKS.items():
        lines = demo_lines(run, "--section", name)
        for block in expected:
            assert find_block(lines, block) >= 0, (name, block)


def test_model_size_table(run):
    assert len(LESSON2_MODEL_TABLE) == 5  # the header and four models
    demo = [line.split() for line in demo_lines(run, "--section", "sizes")]
    for row in LESSON2_MODEL_TABLE:
        assert any(d[:len(row)] == row for d in demo), f"table row {' '.join(row)} not in qkv demo"


def test_lesson_5_weights_as_its_own_code_prints_them(run):
    assert len(LESSON5_WEIGHTS) == 4 and LESSON5_WEIGHTS[0].startswith("[[1. ")
    assert find_block(demo_lines(run, "--section", "lesson5"), LESSON5_WEIGHTS) >= 0
    # Written out as well, so a change in the stored facts cannot hide a wrong demo.
    assert " [0.05 0.48 0.35 0.12]]" in LESSON5_WEIGHTS


def test_lesson_5_printed_shapes(run):
    """The shapes lesson 5 writes as comments after its print calls."""
    lines = demo_lines(run, "--section", "lesson5")
    for s in LESSON5_SHAPES:
        assert s in lines


def test_precision_adds_digits_everywhere(run):
    lines = demo_lines(run, "--section", "2.2", "--precision", "4")
    assert find_block(lines, ["[[-0.0063 -0.3507 -0.1853 -0.1303]"]) >= 0
    assert "cat   attends most to 'the' (48.90%)" in lines
    lines = demo_lines(run, "--section", "2.3", "--precision", "4")
    assert "d= 1024  std of q·k =   30.350   after /√d = 0.9484" in lines


def test_practice_unscaled_matches_numpy(run):
    """Practice 1 states its inputs; NumPy on those inputs gives the same rows."""
    X = np.array([[0.1, 0.0, 0.2, 0.0], [0.9, 0.8, 0.1, 0.3],
                  [0.2, 0.9, 0.7, 0.1], [0.1, 0.3, 0.9, 0.4]])
    rng = np.random.default_rng(42)
    W_q, W_k = rng.normal(size=(4, 16)), rng.normal(size=(4, 16))
    scores = (X @ W_q) @ (X @ W_k).T
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    unscaled = e / e.sum(axis=1, keepdims=True)
    with np.printoptions(precision=2, suppress=True):
        expected = str(unscaled).splitlines() + [str(unscaled.max(axis=1))]
    lines = demo_lines(run, "--section", "practice-unscaled")
    assert find_block(lines, expected[:4]) >= 0, expected
    assert expected[4] in lines
    # The unit-variance table: without scaling, rows sharpen as d_k grows.
    table = [line.split() for line in lines if re.match(r"^\s+(3|16|64)\s+0\.\d\d", line)]
    assert [int(row[0]) for row in table] == [3, 16, 64]
    unscaled_mean = [float(row[1]) for row in table]
    scaled_mean = [float(row[2]) for row in table]
    assert unscaled_mean == sorted(unscaled_mean) and unscaled_mean[-1] > 0.85
    assert max(scaled_mean) - min(scaled_mean) < 0.05


def test_practice_padding_keeps_every_row_off_the_pads(run):
    lines = demo_lines(run, "--section", "practice-padding")
    at = lines.index("Weights with the mask (np.where(mask, scores, -inf) before softmax):")
    rows = [[float(x) for x in line.strip(" []").split()] for line in lines[at + 1:at + 7]]
    assert len(rows) == 6 and all(len(r) == 6 for r in rows)
    for r in rows:
        assert r[4] == 0 and r[5] == 0
        assert abs(sum(r) - 1) <= 0.03  # printed to 2 decimals
    assert "[0. 0. 0. 0. 0. 0.]" in lines
    assert "the four real tokens' rows are 2.2's weights (np.allclose): True" in lines
    assert ("attention(Q, K, V, mask) with that (6,) array gives masked weights @ V: True"
            in lines)


def test_demo_help_lists_the_sections(run):
    r = run("demo", "--help")
    assert r.returncode == 0
    for name in SECTIONS:
        assert name in r.stdout


@pytest.mark.parametrize("args, fragment", [
    (["--section", "3.1"], "--section: expected one of 2.2, 2.3"),
    (["--precision", "1"], "--precision: expected an integer from 2"),
    (["--precision", "13"], "--precision: expected an integer from 2"),
])
def test_demo_bad_options(run, args, fragment):
    r = run("demo", *args)
    assert r.returncode == 2
    assert fragment in r.stderr


@pytest.mark.parametrize("precision", ["2", "6", "12"])  # 12: rows wrap at 75 columns
def test_numpy_twin_in_lessons_prints_the_same(run, precision):
    """lessons/self_attention.py, the NumPy version of the demo for learners,
    prints qkv demo's text line for line."""
    r = subprocess.run([sys.executable, str(ROOT / "lessons" / "self_attention.py"),
                        "--precision", precision], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    twin = [line.rstrip() for line in r.stdout.splitlines()]
    demo = demo_lines(run, "--precision", precision)
    for i, (want, got) in enumerate(zip(twin, demo)):
        assert got == want, f"line {i + 1}: NumPy {want!r}, qkv demo {got!r}"
    assert len(twin) == len(demo)
