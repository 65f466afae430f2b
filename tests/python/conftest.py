"""The Python package's tests run against the installed qkv (pip install .,
scripts/python_env.sh), never a source folder put on sys.path by hand."""
import os

import pytest


def pytest_configure(config):
    import qkv
    if not os.environ.get("QKV_PYTHON_DEV") and "site-packages" not in qkv.__file__:
        raise pytest.UsageError(f"qkv imported from {qkv.__file__}, not an installed package "
                                "(run scripts/python_env.sh, or set QKV_PYTHON_DEV=1)")
