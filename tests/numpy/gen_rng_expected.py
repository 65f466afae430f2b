"""Print the NumPy values hard-coded in tests/test_rng.cpp.

Run with NumPy >= 1.17 (checked with 2.4): python3 tests/numpy/gen_rng_expected.py
Floats print as repr(), the shortest decimal that round-trips, so the C++
literals are the same doubles. Long streams are summarised by hash_words(), an
FNV-1a-style hash over the 64-bit patterns (any single changed value changes
it), and by a plain left-to-right sum.
"""
import numpy as np

R = 3.6541528853610088  # ziggurat base-strip edge: |z| > R only comes from the tail branch


def hash_words(values):
    h = 0xCBF29CE484222325
    for w in np.asarray(values, dtype=np.float64).view(np.uint64).tolist():
        h = ((h ^ w) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def seq_sum(values):
    s = 0.0
    for v in np.asarray(values, dtype=np.float64).tolist():
        s += v
    return s


def floats(name, values):
    body = ", ".join(repr(float(v)) for v in np.ravel(values))
    print(f"{name} = {{{body}}};")


def ints(name, values):
    body = ", ".join(f"{int(v):#x}ULL" for v in np.ravel(values))
    print(f"{name} = {{{body}}};")


def summary(name, values):
    v = np.ravel(values)
    print(f"{name}: n={v.size} hash={hash_words(v):#x}ULL sum={seq_sum(v)!r}")


print("# default_rng")
ints("raw42", np.random.default_rng(42).bit_generator.random_raw(6))
ints("raw_big_seed (2**40 + 12345)", np.random.default_rng(2**40 + 12345).bit_generator.random_raw(3))
floats("normal42", np.random.default_rng(42).normal(size=12))
g = np.random.default_rng(0)
floats("rng0 random(4)", g.random(4))
floats("rng0 then standard_normal(4)", g.standard_normal(4))
floats("rng0 then normal(5, 2, 4)", g.normal(5.0, 2.0, size=4))

g = np.random.default_rng(42)
demo = [g.normal(size=(4, 3)) for _ in range(3)] + [g.normal(size=8)]
demo = np.concatenate([d.ravel() for d in demo])
summary("demo 3 x normal((4,3)) + normal(8)", demo)
floats("demo [12, 23, 24, 35, 36, 43]", demo[[12, 23, 24, 35, 36, 43]])

z = np.random.default_rng(42).standard_normal(200000)
summary("rng42 standard_normal(200000)", z)
tail = np.flatnonzero(np.abs(z) > R)
print(f"tail count={tail.size} first index={tail[0]} value={float(z[tail[0]])!r}")
floats("z[99999], z.min(), z.max()", [z[99999], z.min(), z.max()])

print("# legacy RandomState")
ints("RandomState(0) raw", np.random.RandomState(0)._bit_generator.random_raw(3))
np.random.seed(0)
floats("seed(0) randn(12)", np.random.randn(12))
np.random.seed(1)
floats("seed(1) random_sample(5)", np.random.random_sample(5))
np.random.seed(0)
legacy_demo = np.concatenate([np.random.randn(4, 8).ravel()] + [np.random.randn(8, 8).ravel() for _ in range(3)])
summary("seed(0) randn(4,8) + 3 x randn(8,8)", legacy_demo)
floats("legacy demo [31, 32, 95, 223]", legacy_demo[[31, 32, 95, 223]])
np.random.seed(0)
big = np.random.randn(100000)
summary("seed(0) randn(100000)", big)
floats("big[99999]", [big[99999]])
