"""Shared fixtures: the qkv binary and a runner that captures exit code and output."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def qkv_bin():
    path = Path(os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"))
    if not path.exists():
        pytest.fail(f"qkv binary not found at {path}; build first or set QKV_BIN")
    return str(path)


@pytest.fixture
def run(qkv_bin):
    def _run(*args, timeout=120):
        return subprocess.run([qkv_bin, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    return _run
