"""The lessons' random streams, bit for bit, from qkv's C++ generators.

The two lessons qkv reproduces draw their inputs from NumPy: one from
``np.random.default_rng(42)``, the other from ``np.random.seed(0)``. These
classes give the same numbers in the same order (qkv/rng.h, the generators
``qkv demo`` uses), so a notebook can show that qkv's inputs are the lesson's.

    g = qkv.lesson.default_rng(42)
    W_q = g.normal(size=(4, 3))          # == np.random.default_rng(42).normal(size=(4, 3))
    s = qkv.lesson.RandomState(0)
    x = s.randn(4, 8)                    # == (np.random.seed(0), np.random.randn(4, 8))
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import _qkv

__all__ = ["default_rng", "RandomState", "softmax"]

Size = Optional[Union[int, Sequence[int]]]


def _shape(size: Size) -> Tuple[int, ...]:
    """size as NumPy takes it: None, an integer or a sequence of integers, each >= 0."""
    if size is None:
        return ()
    dims = [size] if isinstance(size, (int, np.integer)) else size
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
        raise TypeError(f"size: expected an integer or a sequence of integers, found "
                        f"{type(size).__name__} {size!r}")
    out = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"size: expected integers, found {type(d).__name__} {d!r}")
        if d < 0:
            raise ValueError(f"size: expected sizes >= 0, found {tuple(dims)!r}")
        out.append(int(d))
    return tuple(out)


def _seed(seed) -> int:
    """A seed as NumPy takes it: a non-negative integer (Python or NumPy, not
    bool or float)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected an integer, found {type(seed).__name__} {seed!r}")
    if int(seed) < 0:
        raise ValueError(f"seed: expected a non-negative integer, found {int(seed)}")
    return int(seed)


def _real(x, what: str) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what}: expected a number, found {type(x).__name__} {x!r}")
    return float(x)


def _words(seed: int) -> list:
    """The seed's 32-bit words, least significant first: how SeedSequence
    reads an int of any size (0 is [0])."""
    words = [seed & 0xFFFFFFFF]
    seed >>= 32
    while seed:
        words.append(seed & 0xFFFFFFFF)
        seed >>= 32
    return words


def _draw(fill, size: Size):
    shape = _shape(size)
    n = math.prod(shape)  # exact: np.prod's int64 would wrap (2**40 x 2**40 is 0)
    if n >= 2**63:
        raise ValueError(f"size: {shape} holds {n} values, more than 2**63 - 1")
    flat = fill(n)
    return float(flat[0]) if size is None else flat.reshape(shape)


class Generator:
    """``np.random.default_rng(seed)``: PCG64 seeded by SeedSequence, NumPy's ziggurat."""

    def __init__(self, seed: int):
        self._g = _qkv.NumpyGenerator(_words(_seed(seed)))

    def random(self, size: Size = None):
        """Generator.random: floats in [0, 1)."""
        return _draw(self._g.random, size)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Size = None):
        """Generator.normal, element by element in C order."""
        loc, scale = _real(loc, "loc"), _real(scale, "scale")
        if scale < 0:  # NaN passes, as in NumPy: it gives NaN draws
            raise ValueError(f"scale: expected a value >= 0, found {scale}")
        return _draw(lambda n: self._g.normal(loc, scale, n), size)

    def standard_normal(self, size: Size = None):
        """Generator.standard_normal."""
        return self.normal(0.0, 1.0, size)

    def random_raw(self) -> int:
        """One raw 64-bit PCG64 output (bit_generator.random_raw())."""
        return self._g.next_uint64()


def default_rng(seed: int) -> Generator:
    """The stream of ``np.random.default_rng(seed)``."""
    return Generator(seed)


class RandomState:
    """``np.random.seed(seed)`` / ``np.random.RandomState(seed)``: MT19937 and the
    legacy polar Box-Muller gauss (its spare value kept between calls, as NumPy does)."""

    def __init__(self, seed: int):
        seed = _seed(seed)
        if seed >= 2**32:  # NumPy's own limit for RandomState
            raise ValueError(f"seed: expected an integer in [0, 2**32), found {seed}")
        self._s = _qkv.NumpyRandomState(seed)

    def randn(self, *shape: int):
        """np.random.randn(*shape); a float with no arguments."""
        return _draw(self._s.randn, None if not shape else shape)

    def standard_normal(self, size: Size = None):
        """np.random.standard_normal(size)."""
        return _draw(self._s.randn, size)

    def random_sample(self, size: Size = None):
        """np.random.random_sample(size): floats in [0, 1)."""
        return _draw(self._s.random_sample, size)

    def random_raw(self) -> int:
        """One raw 32-bit MT19937 output."""
        return self._s.next_uint32()


def softmax(x, axis: int = -1) -> np.ndarray:
    """Row softmax with the maximum subtracted first (no overflow); -inf gives 0."""
    x = np.asarray(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
