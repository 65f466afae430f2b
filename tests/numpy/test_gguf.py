"""qkv's GGUF reader and weight types against the gguf Python package (llama.cpp's), bit for bit.

Files are written here with gguf's GGUFWriter: every metadata value type, arrays of each and
of arrays, tensors of every weight type qkv has. tests/gguf_check (QKV_GGUF_CHECK) reads
them with qkv::GgufFile and dequantizes every tensor with qkv's reference rows; the float32
bits must equal gguf.quants.dequantize's. Q8_0, Q4_0, Q5_0 and Q5_1 blocks from qkv's quantizer must
equal gguf.quants.quantize's, byte for byte (both follow ggml's reference quantizers).
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf.constants import GGML_QUANT_SIZES

ROOT = Path(__file__).resolve().parents[2]
WEIGHT_TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q5_0, QT.Q5_1, QT.Q4_K, QT.Q5_K, QT.Q6_K]
# Where each block keeps its f16 scales (d, and dmin for Q4_K and Q5_K, m for Q5_1).
SCALE_BYTES = {QT.Q8_0: [0], QT.Q4_0: [0], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2],
               QT.Q6_K: [208]}

# (key, value, type, element type): one of each value type, arrays of each, nested arrays.
SCALARS = [
    ("t.u8", 200, VT.UINT8), ("t.i8", -100, VT.INT8), ("t.u16", 60000, VT.UINT16),
    ("t.i16", -30000, VT.INT16), ("t.u32", 4_000_000_000, VT.UINT32), ("t.i32", -2_000_000_000, VT.INT32),
    ("t.u64", 2**64 - 1, VT.UINT64), ("t.i64", -2**63, VT.INT64), ("t.f32", 0.1, VT.FLOAT32),
    ("t.f64", 1 / 3, VT.FLOAT64), ("t.bool", True, VT.BOOL), ("t.str", "héllo, wörld", VT.STRING),
]
ARRAYS = [
    ("a.u8", [0, 255, 7], VT.UINT8), ("a.i8", [-128, 127], VT.INT8), ("a.u16", [1, 65535], VT.UINT16),
    ("a.i16", [-32768, 5], VT.INT16), ("a.u32", [2**32 - 1], VT.UINT32), ("a.i32", [-1, 2, -3], VT.INT32),
    ("a.u64", [2**63, 1], VT.UINT64), ("a.i64", [-2**63, 2**63 - 1], VT.INT64),
    ("a.f32", [0.5, -1e-3, 3e38], VT.FLOAT32), ("a.f64", [1e-300, -2.5], VT.FLOAT64),
    ("a.bool", [True, False, True], VT.BOOL), ("a.str", ["", "a", "ünïcode", "x" * 300], VT.STRING),
]
NESTED = [[1, 2], [3], [4, 5, 6]]


@pytest.fixture(scope="module")
def gguf_check():
    path = Path(os.environ.get("QKV_GGUF_CHECK", ROOT / "build" / "release" / "tests" / "gguf_check"))
    if not path.exists():
        pytest.fail(f"gguf_check not found at {path}; build first or set QKV_GGUF_CHECK")
    return str(path)


def check(gguf_check, *args):
    return subprocess.run([gguf_check, *map(str, args)], capture_output=True, text=True, timeout=120)


def dump(gguf_check, path):
    r = check(gguf_check, "dump", path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def write(path, metadata=(), tensors=(), alignment=None, endianess=gguf.GGUFEndian.LITTLE):
    """A GGUF file by GGUFWriter: metadata (key, value, type[, element type]), tensors (name, array, type)."""
    w = gguf.GGUFWriter(str(path), arch="test", endianess=endianess)
    if alignment:
        w.add_custom_alignment(alignment)
    for key, value, vtype, *sub in metadata:
        w.add_key_value(key, value, vtype, sub_type=sub[0] if sub else None)
    for name, array, qtype in tensors:
        w.add_tensor(name, array, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def f16_scales(rng, n):
    """n random finite f16 values (subnormals and the largest included), as uint16 bits."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    return np.where((bits & 0x7C00) == 0x7C00, bits & 0x83FF, bits).astype(np.uint16)


def random_blocks(rng, qtype, rows, row_len):
    """Random block bytes (rows, row bytes) whose f16 scales are finite."""
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * row_len // block, size), dtype=np.uint8)
    for at in SCALE_BYTES[qtype]:
        blocks[:, at:at + 2] = f16_scales(rng, blocks.shape[0]).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def weights(rng, qtype, rows=3, row_len=512):
    """A (rows, row_len) tensor stored as qtype: (what GGUFWriter takes, its raw type)."""
    if qtype == QT.F32:
        return rng.integers(0, 1 << 32, size=(rows, row_len), dtype=np.uint32).view(np.float32), None
    if qtype == QT.F16:
        return f16_scales(rng, rows * row_len).reshape(rows, row_len).view(np.float16), None
    if qtype == QT.BF16:
        return rng.integers(0, 1 << 16, size=(rows, row_len), dtype=np.uint16).view(np.uint8), qtype
    return random_blocks(rng, qtype, rows, row_len), qtype


def test_every_metadata_type(gguf_check, tmp_path):
    meta = [(k, v, t) for k, v, t in SCALARS]
    meta += [(k, v, VT.ARRAY, t) for k, v, t in ARRAYS]
    meta += [("a.nested", NESTED, VT.ARRAY), ("a.deep", [[["x"], ["y", "z"]], [["w"]]], VT.ARRAY)]
    got = dict(dump(gguf_check, write(tmp_path / "m.gguf", meta))["metadata"])
    assert got["general.architecture"] == {"type": "STRING", "value": "test"}
    for key, value, vtype in SCALARS:
        want = float(np.float32(value)) if vtype == VT.FLOAT32 else value
        assert got[key] == {"type": vtype.name, "value": want}, key
    for key, value, vtype in ARRAYS:
        want = [float(np.float32(x)) for x in value] if vtype == VT.FLOAT32 else value
        assert got[key] == {"type": "ARRAY", "element_type": vtype.name, "value": want}, key
    nested = got["a.nested"]
    assert (nested["type"], nested["element_type"]) == ("ARRAY", "ARRAY")
    assert [x["value"] for x in nested["value"]] == NESTED
    assert {x["element_type"] for x in nested["value"]} == {"INT32"}
    deep = got["a.deep"]["value"]
    assert [[y["value"] for y in x["value"]] for x in deep] == [[["x"], ["y", "z"]], [["w"]]]


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("alignment", [None, 64])
def test_tensors_of_every_type_dequantize_as_gguf_does(gguf_check, tmp_path, version, alignment):
    rng = np.random.default_rng(version * 100 + (alignment or 0))
    tensors = [(f"w.{q.name}", *weights(rng, q)) for q in WEIGHT_TYPES]
    x = rng.standard_normal((2, 256)).astype(np.float32)
    for q in (QT.Q8_0, QT.Q4_0, QT.Q5_0, QT.Q5_1):
        tensors.append((f"quantized.{q.name}", gguf.quants.quantize(x, q), q))
    path = write(tmp_path / "t.gguf", tensors=tensors, alignment=alignment)
    if version == 2:  # the same layout; only the number differs
        data = bytearray(path.read_bytes())
        data[4:8] = (2).to_bytes(4, "little")
        path.write_bytes(bytes(data))
    got = dump(gguf_check, path)
    assert got["version"] == version
    assert got["alignment"] == (alignment or 32)
    reader = gguf.GGUFReader(str(path))
    assert len(got["tensors"]) == len(reader.tensors) == len(tensors)
    for mine, theirs in zip(got["tensors"], reader.tensors):
        assert mine["name"] == theirs.name
        assert mine["type"] == int(theirs.tensor_type)
        assert mine["shape"] == [int(d) for d in theirs.shape]  # both in ggml order, ne[0] first
        assert got["data_offset"] + mine["offset"] == theirs.data_offset
        assert mine["offset"] % got["alignment"] == 0
        assert mine["nbytes"] == theirs.n_bytes
        want = gguf.quants.dequantize(np.asarray(theirs.data), theirs.tensor_type).astype(np.float32)
        assert np.array_equal(np.array(mine["bits"], dtype=np.uint32), want.reshape(-1).view(np.uint32)), \
            mine["name"]


def quantizer_inputs(rng):
    """Blocks of 32 that reach the quantizers' corners, then ordinary data."""
    blocks = [
        np.zeros(32),                                               # d = 0
        np.r_[127, np.arange(31) - 15.5],                           # d = 1: ties round away from zero
        np.r_[-8, np.linspace(-7.5, 7.5, 31)],                      # Q4_0: d = 1, its nibbles' ties
        np.r_[8, -8, np.linspace(-7, 7, 30)],                       # the first largest magnitude wins
        rng.standard_normal(32) * 1e-30,                            # d is below f16's smallest: 0
        rng.standard_normal(32) * 1e-6,                             # f16 subnormal d
        rng.standard_normal(32) * 3e6,                              # d near f16's largest
        rng.standard_normal(32) * 1e7,                              # d past it: inf in f16
        np.full(32, -3.25),
    ]
    ordinary = rng.standard_normal(32 * 64) * rng.choice([1e-3, 1, 50], size=32 * 64)
    return np.concatenate(blocks + [ordinary]).astype(np.float32)


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_0, QT.Q5_0, QT.Q5_1])
def test_quantizers_write_ggml_bits(gguf_check, tmp_path, qtype):
    x = quantizer_inputs(np.random.default_rng(int(qtype)))
    x.tofile(tmp_path / "x.f32")
    r = check(gguf_check, "quantize", qtype.name, tmp_path / "x.f32", tmp_path / "q.bin")
    assert r.returncode == 0, r.stderr
    with np.errstate(over="ignore"):
        want = gguf.quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
    got = np.fromfile(tmp_path / "q.bin", dtype=np.uint8)
    block = GGML_QUANT_SIZES[qtype][1]
    bad = [i for i in range(len(want) // block) if not np.array_equal(got[i * block:(i + 1) * block],
                                                                      want[i * block:(i + 1) * block])]
    assert got.size == want.size and not bad, f"blocks {bad[:5]} differ"


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K])
def test_k_quantizers_write_ggml_bits(gguf_check, tmp_path, qtype):
    # Blocks of ggml's reference quantizers (tests/numpy/gen_kquant_fixture.py),
    # edge cases first: zeros, constants, one sign only, tiny and huge scales.
    fixture = np.load(Path(__file__).parent / "data" / "kquant.npz")
    fixture["x"].tofile(tmp_path / "x.f32")
    r = check(gguf_check, "quantize", qtype.name, tmp_path / "x.f32", tmp_path / "q.bin")
    assert r.returncode == 0, r.stderr
    got, want = np.fromfile(tmp_path / "q.bin", dtype=np.uint8), fixture[qtype.name]
    block = GGML_QUANT_SIZES[qtype][1]
    assert got.size == want.size
    bad = [i for i in range(want.size // block) if not np.array_equal(got[i * block:(i + 1) * block],
                                                                      want[i * block:(i + 1) * block])]
    assert not bad, f"blocks {bad[:5]} differ from ggml's"
    # And the blocks dequantize (as the gguf package does) near the input.
    back = gguf.quants.dequantize(got.reshape(1, -1), qtype).reshape(-1)
    x = fixture["x"]
    assert np.all(np.isfinite(back))
    rel = np.linalg.norm(back[256 * 9:] - x[256 * 9:]) / np.linalg.norm(x[256 * 9:])
    assert rel < {QT.Q4_K: 0.12, QT.Q5_K: 0.06, QT.Q6_K: 0.03}[qtype], rel


def test_half_rounding_is_numpys(gguf_check, tmp_path):
    rng = np.random.default_rng(5)
    edges = np.array([0.0, -0.0, 65504, 65519.996, 65520, -65520, 1e9, np.inf, -np.inf, 2**-14,
                      2**-24, 2**-25, 1.5 * 2**-25, 3 * 2**-26, 2**-26, 1 + 2**-11, 1 + 3 * 2**-11,
                      2**-14 - 2**-25, 6.1e-5, 1e-45], dtype=np.float32)
    bits = rng.integers(0, 1 << 32, size=200_000, dtype=np.uint32).view(np.float32)
    near = (rng.standard_normal(200_000) * 2.0 ** rng.integers(-30, 18, size=200_000)).astype(np.float32)
    x = np.concatenate([edges, bits[~np.isnan(bits)], near])
    x.tofile(tmp_path / "x.f32")
    r = check(gguf_check, "half", tmp_path / "x.f32", tmp_path / "h.u16")
    assert r.returncode == 0, r.stderr
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    got = np.fromfile(tmp_path / "h.u16", dtype=np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(x[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_type_tables_match_gguf(gguf_check):
    r = check(gguf_check, "types")
    assert r.returncode == 0, r.stderr
    tables = json.loads(r.stdout)
    # qkv may lag a newer gguf package by a type or two (refused as unknown), but what it
    # lists must agree.
    for type_id, name, block, block_bytes in tables["ggml"]:
        assert QT(type_id).name == name
        assert GGML_QUANT_SIZES[QT(type_id)] == (block, block_bytes), name
    assert [(w[0], w[1]) for w in tables["weights"]] == sorted((int(q), q.name) for q in WEIGHT_TYPES)
    for type_id, name, block, block_bytes, quantizes in tables["weights"]:
        assert GGML_QUANT_SIZES[QT(type_id)] == (block, block_bytes), name
        assert quantizes == (name != "BF16")


def test_big_endian_and_broken_files_exit_1_naming_the_file(gguf_check, tmp_path):
    x = np.ones((2, 32), dtype=np.float32)
    big = write(tmp_path / "big.gguf", tensors=[("w", x, None)], endianess=gguf.GGUFEndian.BIG)
    r = check(gguf_check, "dump", big)
    assert r.returncode == 1
    assert f"'{big}': version: expected a little-endian file, found a big-endian one" in r.stderr
    good = write(tmp_path / "good.gguf", tensors=[("w", x, None)]).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[:-1])
    r = check(gguf_check, "dump", cut)
    assert r.returncode == 1
    assert f"'{cut}': tensor \"w\": expected its 256 bytes at offset 0" in r.stderr
    assert "(truncated file?)" in r.stderr
