"""The checks every entry point of the package puts its arguments through:
each refuses a value of the wrong kind or out of range with a TypeError or
ValueError naming the argument, before it reaches the extension (whose own
errors would print its C++ signature)."""

from __future__ import annotations

import os
from typing import Any, List

import numpy as np


def _int(x: Any, what: str, bits: int = 64) -> int:
    """An integer argument: Python or NumPy integers (not bool, not float, not
    str), within a signed `bits`-bit integer (the C++ side's type)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{what}: expected an integer, found {type(x).__name__} {x!r}")
    if not -2**(bits - 1) <= int(x) < 2**(bits - 1):
        raise ValueError(f"{what}: expected an integer in [-2**{bits - 1}, 2**{bits - 1}), "
                         f"found {int(x)}")
    return int(x)


def _seed(x: Any, what: str = "seed") -> int:
    """A random seed: an integer in [0, 2**64), the C++ side's uint64."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{what}: expected an integer, found {type(x).__name__} {x!r}")
    if not 0 <= int(x) < 2**64:
        raise ValueError(f"{what}: expected an integer in [0, 2**64), found {int(x)}")
    return int(x)


def _bool(x: Any, what: str) -> bool:
    """A flag: True or False (Python or NumPy), as torch's own flags take;
    never any truthy object (is_causal='no' must not mean causal)."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{what}: expected True or False, found {type(x).__name__} {x!r}")
    return bool(x)


def _float(x: Any, what: str) -> float:
    """A real-number argument: int or float (Python or NumPy), not bool or str."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what}: expected a number, found {type(x).__name__} {x!r}")
    return float(x)


def _seq(x: Any, what: str) -> list:
    """A sequence argument as a list: a list, tuple or 1-D array; a str is refused
    (it would read as its characters)."""
    if isinstance(x, (str, bytes)) or not (hasattr(x, "tolist") or isinstance(x, (list, tuple))):
        raise TypeError(f"{what}: expected a sequence, found {type(x).__name__} {x!r}")
    items = x.tolist() if hasattr(x, "tolist") else list(x)
    if not isinstance(items, list):
        raise TypeError(f"{what}: expected a sequence, found a scalar {items!r}")
    return items


def _text(s: Any, what: str) -> str:
    """A str argument that is valid Unicode (a lone surrogate cannot be UTF-8)."""
    if not isinstance(s, str):
        raise TypeError(f"{what}: expected a str, found {type(s).__name__} {s!r}")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: not valid Unicode text ({e.reason} at index {e.start})") from None
    return s


def _path(p: Any, what: str) -> str:
    """A path argument (str, bytes or os.PathLike) as the str the extension takes."""
    try:
        path = os.fsdecode(os.fspath(p))
    except TypeError:
        raise TypeError(f"{what}: expected a path (str or os.PathLike), found {type(p).__name__} "
                        f"{p!r}") from None
    return _text(path, what)


def _callback(f: Any, what: str) -> Any:
    """A callback argument: None or something to call (checked here, not at its first call)."""
    if f is not None and not callable(f):
        raise TypeError(f"{what}: expected a function (or None), found {type(f).__name__} {f!r}")
    return f


def _strs(x: Any, what: str, each: str) -> List[str]:
    """A sequence of str (labels, titles), one per `each`; one str is refused
    (it would read as its characters)."""
    if isinstance(x, str):
        raise TypeError(f"{what}: expected a sequence of str (one per {each}), found one str")
    return [_text(s, f"{what}[{i}]") for i, s in enumerate(_seq(x, what))]
