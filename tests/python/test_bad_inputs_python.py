"""Runs every row of the Python section of docs/bad-inputs.md, so the table
cannot drift from the code: the row's call (in backticks) is evaluated with
q, k, v float64 arrays [1, 2, 5, 4] (tq, tk, tv: the same as torch tensors),
and must raise the row's exception with the row's message fragments, in order."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import qkv
import qkv.lesson
import qkv.torch

TABLE = Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md"
ROW = re.compile(r"^\|\s*`(py-[a-z0-9-]+)`\s*\|(.*)\|\s*(\w+)\s*\|(.*)\|\s*$")


def python_rows():
    rows = {}
    for line in TABLE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            row_id, call, exc, message = m.groups()
            assert row_id not in rows, f"row {row_id} appears twice"
            rows[row_id] = (re.search(r"`([^`]+)`", call).group(1), exc,
                            re.findall(r"`([^`]+)`", message))
    return rows


ROWS = python_rows()


def test_the_table_has_python_rows():
    assert len(ROWS) >= 15


@pytest.mark.parametrize("row_id", sorted(ROWS))
def test_row(row_id, tmp_path, monkeypatch):
    call, exc, fragments = ROWS[row_id]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 40)
    q, k, v = (np.random.default_rng(i).random((1, 2, 5, 4)) for i in range(3))
    names = dict(np=np, torch=torch, qkv=qkv, q=q, k=k, v=v,
                 tq=torch.from_numpy(q.copy()), tk=torch.from_numpy(k), tv=torch.from_numpy(v))
    with pytest.raises(BaseException) as info:
        eval(call, names)  # noqa: S307 - the table's own documented calls
    assert type(info.value).__name__ == exc, (row_id, repr(info.value))
    message, at = str(info.value), 0
    for fragment in fragments:
        found = message.find(fragment, at)
        assert found >= 0, f"{row_id}: {fragment!r} not in {message!r} (after {at})"
        at = found + len(fragment)
