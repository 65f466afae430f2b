"""Every notebook in notebooks/ runs top to bottom without an error (nbclient, the
venv's own kernel), and prints the numbers its lesson prints (shared/seeds/)."""

import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"

# The lessons' printed output, as facts the notebooks must reproduce digit for digit.
LESSON_FACTS = {
    "01_self_attention.ipynb": [
        "(4, 3) (4, 3) (4, 3)",
        "[[-0.01 -0.35 -0.19 -0.13]\n [-0.09 -4.31 -1.5  -1.24]\n [-0.06 -3.79 -0.67 -0.71]\n"
        " [-0.05 -1.1  -0.4  -0.38]]",
        "[[0.27 0.22 0.25 0.25]\n [0.49 0.04 0.22 0.25]\n [0.4  0.05 0.28 0.27]\n"
        " [0.31 0.17 0.26 0.26]]",
        "[1. 1. 1. 1.]",
        "(4, 3)\nthe   attends most to 'the' (27%)\ncat   attends most to 'the' (49%)\n"
        "sat   attends most to 'the' (40%)\ndown  attends most to 'the' (31%)",
        "True",
        re.compile(r"d =    4: spread of q\.k   2\.1, divided by sqrt\(d\) 1\.05\n"
                   r"d =   64: spread of q\.k   8\.2, divided by sqrt\(d\) 1\.03\n"
                   r"d = 1024: spread of q\.k  30\.4, divided by sqrt\(d\) 0\.95"),
        "[[1 0 0 0]\n [1 1 0 0]\n [1 1 1 0]\n [1 1 1 1]]",
        "[[1.   0.   0.   0.  ]\n [0.92 0.08 0.   0.  ]\n [0.55 0.06 0.39 0.  ]\n"
        " [0.31 0.17 0.26 0.26]]",
        "(5, 8) → (5, 8)",
    ],
    "02_attention_in_a_gpt.ipynb": [
        "torch.Size([2, 10, 16])",
        "rows sum to [1. 1. 1. 1.]",
        "outputs agree: True",
        "gradients agree: True",
        "without positions, a permutation of the same rows: True",
        "with positions: False",
    ],
}


def run(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    text, images = [], 0
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                text.append(o["text"])
            elif o.get("output_type") in ("display_data", "execute_result"):
                images += "image/png" in o.get("data", {})
    return "".join(text), images


def test_every_notebook_has_facts():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(LESSON_FACTS)


@pytest.mark.parametrize("name", sorted(LESSON_FACTS))
def test_notebook_runs_and_prints_the_lessons_numbers(name):
    text, images = run(NOTEBOOKS / name)  # a cell's error raises CellExecutionError
    assert images >= 1, "no picture was shown"
    for fact in LESSON_FACTS[name]:
        if isinstance(fact, re.Pattern):
            assert fact.search(text), f"{name}: missing {fact.pattern!r} in\n{text}"
        else:
            assert fact in text, f"{name}: missing {fact!r} in\n{text}"
