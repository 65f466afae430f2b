#!/usr/bin/env python3
"""fuzz/make_corpus.py: writes the seed corpus under fuzz/corpus/<target>/.

Plain Python (no NumPy): small valid files of each kind, and slightly broken
ones next to them. Rerun after changing it; the files are committed.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def npy(descr, shape, payload, version=(1, 0), fortran=False, header=None):
    """The bytes np.save writes (header padded to 64 with spaces and a newline)."""
    if header is None:
        dims = f"{shape[0]}," if len(shape) == 1 else ", ".join(map(str, shape))
        header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({dims}), }}"
    lenfmt = "<H" if version == (1, 0) else "<I"
    pre = 6 + 2 + struct.calcsize(lenfmt)
    h = header.encode("latin1")
    pad = (64 - (pre + len(h) + 1) % 64) % 64
    h = h + b" " * pad + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(lenfmt, len(h)) + h + payload


def f32(*xs):
    return struct.pack(f"<{len(xs)}f", *xs)


def f64(*xs):
    return struct.pack(f"<{len(xs)}d", *xs)


def corpus_npy():
    put("npy", "f4_2x3.npy", npy("<f4", (2, 3), f32(1, 2, 3, 4, 5, 6)))
    put("npy", "f8_4.npy", npy("<f8", (4,), f64(0.5, -1, float("inf"), float("nan"))))
    put("npy", "b1_2x2.npy", npy("|b1", (2, 2), bytes([1, 0, 0, 1])))
    put("npy", "f4_scalar.npy", npy("<f4", (), f32(3.5)))
    put("npy", "f4_empty_0x3.npy", npy("<f4", (0, 3), b""))
    put("npy", "f4_v2.npy", npy("<f4", (1, 2), f32(1, 2), version=(2, 0)))
    put("npy", "f8_v3.npy", npy("<f8", (1,), f64(7), version=(3, 0)))
    put("npy", "f4_2x2x2.npy", npy("<f4", (2, 2, 2), f32(*range(8))))
    # Slightly broken.
    put("npy", "f4_fortran_2x2.npy", npy("<f4", (2, 2), f32(1, 2, 3, 4), fortran=True))
    put("npy", "f4_bigendian.npy", npy(">f4", (2,), struct.pack(">2f", 1, 2)))
    put("npy", "bad_i4.npy", npy("<i4", (2,), struct.pack("<2i", 1, 2)))
    put("npy", "bad_truncated.npy", npy("<f4", (2, 3), f32(1, 2, 3)))
    put("npy", "bad_overflow_shape.npy", npy("<f4", (), b"", header=
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }"))
    put("npy", "bad_bool_value.npy", npy("|b1", (2,), bytes([1, 2])))
    put("npy", "bad_header_keys.npy", npy("<f4", (), f32(1), header=
        "{'descr': '<f4', 'shape': (), 'fortran_order': False, 'extra': 1, }"))
    put("npy", "bad_huge_itemsize.npy", npy("<i400000000", (1,), b"\0" * 4))
    put("npy", "bad_magic.npy", b"\x93NUMPZ\x01\x00" + b"\x00" * 8)


def safetensors(entries, metadata=None):
    """entries: (name, dtype, shape, payload); written in order, contiguous."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in entries:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def raw_safetensors(header_text, data=b""):
    h = header_text.encode()
    return struct.pack("<Q", len(h)) + h + data


CONFIG = {"vocab": 66, "context": 64, "layers": 4, "heads": 4, "kv_heads": 4, "embd": 128,
          "rope": False, "bias": False, "arch": "gpt"}


def corpus_checkpoint():
    t = "checkpoint"
    put(t, "model.safetensors", safetensors(
        [("transformer.wte.weight", "F32", (3, 2), f32(*range(6))),
         ("transformer.ln_f.weight", "F32", (2,), f32(1, 1))],
        {"format": "pt", "qkv_config": json.dumps(CONFIG)}))
    put(t, "train_state.safetensors", safetensors(
        [("adam.m", "F32", (3,), f32(0, 0.1, 0.2)), ("adam.v", "F32", (3,), f32(0, 1e-3, 2e-3))],
        {"next_iter": "10", "adam_steps": "10", "options": "{\"lr\": 0.001}"}))
    put(t, "mixed.safetensors", safetensors(
        [("a", "F64", (2,), f64(1, 2)), ("b", "BOOL", (2, 1), bytes([0, 1])),
         ("c", "F32", (), f32(5)), ("d", "F32", (0, 4), b"")]))
    put(t, "empty.safetensors", raw_safetensors("{}      "))
    put(t, "config.json", json.dumps(CONFIG, indent=2) + "\n")
    put(t, "config_rope_gqa.json", json.dumps(dict(CONFIG, rope=True, kv_heads=2, vocab=1)))
    # Slightly broken.
    put(t, "bad_overlap.safetensors", raw_safetensors(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)))
    put(t, "bad_gap.safetensors", raw_safetensors(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)))
    put(t, "bad_dtype.safetensors", raw_safetensors(
        '{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}', b"\0" * 8))
    put(t, "bad_shape_overflow.safetensors", raw_safetensors(
        '{"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}}', f32(1)))
    put(t, "bad_duplicate.safetensors", raw_safetensors(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)))
    put(t, "bad_metadata.safetensors", raw_safetensors('{"__metadata__":{"x":1}}'))
    put(t, "bad_header_len.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    put(t, "bad_truncated.safetensors",
        safetensors([("a", "F32", (4,), f32(1, 2, 3, 4))])[:-3])
    put(t, "bad_config_heads.json", json.dumps(dict(CONFIG, heads=3)))
    put(t, "bad_config_missing.json", '{"vocab": 5, "context": 8}')
    put(t, "bad_config_types.json", json.dumps(dict(CONFIG, rope=1, embd=1.5)))
    put(t, "bad_config_negative.json", json.dumps(dict(CONFIG, layers=-9223372036854775808)))


def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, payload):
    """One metadata entry; vtype is GGUF's number (0 UINT8 ... 8 STRING, 9 ARRAY ... 12 FLOAT64)."""
    return gguf_str(key) + struct.pack("<I", vtype) + payload


def gguf_array(etype, items):
    """An array's bytes: element type, count, the elements' bytes (a list)."""
    return struct.pack("<IQ", etype, len(items)) + b"".join(items)


def gguf(kvs, tensors, data, version=3, alignment=32):
    """kvs: entries' bytes; tensors: (name, dims in ggml order, ggml type, offset)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, dims, ggml_type, offset in tensors:
        out += gguf_str(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def block(size, scales, seed):
    """A quantized block of `size` bytes, pseudo-random, with f16 1.0 (0x3c00) at each scale offset."""
    b = bytearray((seed * 37 + i * 11) % 256 for i in range(size))
    for at in scales:
        b[at:at + 2] = struct.pack("<H", 0x3C00)
    return bytes(b)


def corpus_gguf():
    t = "gguf"
    every = [
        gguf_kv("general.architecture", 8, gguf_str("llama")),
        gguf_kv("u8", 0, b"\xc8"), gguf_kv("i8", 1, b"\x9c"), gguf_kv("u16", 2, struct.pack("<H", 60000)),
        gguf_kv("i16", 3, struct.pack("<h", -3)), gguf_kv("u32", 4, struct.pack("<I", 7)),
        gguf_kv("i32", 5, struct.pack("<i", -7)), gguf_kv("f32", 6, f32(0.5)), gguf_kv("bool", 7, b"\x01"),
        gguf_kv("u64", 10, struct.pack("<Q", 2**63)), gguf_kv("i64", 11, struct.pack("<q", -1)),
        gguf_kv("f64", 12, f64(1e-300)),
        gguf_kv("tokens", 9, gguf_array(8, [gguf_str("a"), gguf_str(""), gguf_str("\u00e9")])),
        gguf_kv("scores", 9, gguf_array(6, [f32(0.0), f32(-1.5)])),
        gguf_kv("types", 9, gguf_array(5, [struct.pack("<i", 1), struct.pack("<i", 3)])),
        gguf_kv("nested", 9, gguf_array(9, [gguf_array(0, [b"\x01"]), gguf_array(8, [gguf_str("x")])])),
        gguf_kv("empty", 9, gguf_array(12, [])),
    ]
    # One tensor of each weight type qkv has, 32-aligned, one row of blocks each.
    kinds = [("f32", [4, 2], 0, f32(*range(8))), ("f16", [4], 1, struct.pack("<4H", 0x3C00, 0xC000, 0x7C00, 1)),
             ("bf16", [2], 30, struct.pack("<2H", 0x3F80, 0xC049)), ("q8_0", [32], 8, block(34, [0], 1)),
             ("q4_0", [32, 2], 2, block(18, [0], 2) + block(18, [0], 3)), ("q4_k", [256], 12, block(144, [0, 2], 4)),
             ("q5_k", [256], 13, block(176, [0, 2], 5)), ("q6_k", [256], 14, block(210, [208], 6))]
    tensors, data = [], b""
    for name, dims, ggml_type, payload in kinds:
        tensors.append((name, dims, ggml_type, len(data)))
        data += payload + b"\0" * (-len(payload) % 32)
    put(t, "every_type.gguf", gguf(every, tensors, data))
    put(t, "v2.gguf", gguf(every[:3], tensors[:2], data[:64], version=2))
    align64 = [gguf_kv("general.alignment", 4, struct.pack("<I", 64))]
    put(t, "align64.gguf", gguf(align64, [("w", [4], 0, 64)], b"\0" * 64 + f32(1, 2, 3, 4), alignment=64))
    put(t, "align1.gguf", gguf([gguf_kv("general.alignment", 4, struct.pack("<I", 1))],
                               [("w", [1], 0, 3)], b"\0\0\0" + f32(1), alignment=1))
    put(t, "no_tensors.gguf", gguf(every[:1], [], b""))
    # Slightly broken.
    put(t, "bad_truncated.gguf", gguf(every, tensors, data)[:-20])
    put(t, "bad_magic.gguf", b"GGUG" + gguf([], [], b"")[4:])
    put(t, "bad_version1.gguf", gguf([], [], b"", version=1))
    put(t, "bad_big_endian.gguf", gguf([], [], b"", version=0x03000000))
    put(t, "bad_unknown_type.gguf", gguf([], [("w", [4], 4, 0)], f32(1, 2, 3, 4)))
    put(t, "bad_misaligned.gguf", gguf([], [("w", [1], 0, 4)], f32(1, 2)))
    put(t, "bad_overlap.gguf", gguf([], [("a", [16], 0, 0), ("b", [8], 0, 32)], b"\0" * 64))
    put(t, "bad_duplicate_key.gguf", gguf([every[1], every[1]], [], b""))
    put(t, "bad_alignment.gguf", gguf([gguf_kv("general.alignment", 4, struct.pack("<I", 48))], [], b""))
    put(t, "bad_row.gguf", gguf([], [("w", [100], 12, 0)], block(144, [0, 2], 7)))
    put(t, "bad_dims_overflow.gguf", gguf([], [("w", [2**32, 2**32], 0, 0)], f32(1)))
    put(t, "bad_array_length.gguf", gguf([gguf_kv("a", 9, struct.pack("<IQ", 4, 2**62))], [], b""))


def corpus_vocab():
    t = "vocab"
    put(t, "shakespeare.json", '{"type": "char", "chars": ["\\n", " ", "!", "A", "a", "z"], '
        '"unknown": "\\uFFFD"}\n')
    put(t, "unicode.json", '{"type":"char","chars":["a","\\u00e9","\\u4e2d","\\ud83d\\ude00"],'
        '"unknown":"\\ufffd"}')
    put(t, "one.json", '{"type":"char","chars":["x"],"unknown":"\\uFFFD"}')
    put(t, "bad_unsorted.json", '{"type":"char","chars":["b","a"],"unknown":"\\uFFFD"}')
    put(t, "bad_two_chars.json", '{"type":"char","chars":["ab"],"unknown":"\\uFFFD"}')
    put(t, "bad_dup_key.json", '{"type":"char","type":"char","chars":["a"],"unknown":"\\uFFFD"}')
    put(t, "bad_lone_surrogate.json", '{"type":"char","chars":["\\ud800"],"unknown":"\\uFFFD"}')
    put(t, "bad_empty.json", '{"type":"char","chars":[],"unknown":"\\uFFFD"}')
    put(t, "bad_type.json", '{"type":"bpe","chars":["a"],"unknown":"\\uFFFD"}')
    put(t, "bad_truncated.json", '{"type":"char","chars":["a","b"')


def corpus_tokenizer():
    t = "tokenizer"
    put(t, "ascii", b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
        b"\xffhear me, Citizen!")
    put(t, "unicode", "na\u00efve caf\u00e9 \u4e2d\u6587 \U0001F600 \u00e9t\u00e9".encode()
        + b"\xff" + "caf\u00e9 \U0001F601 \u00df".encode())
    put(t, "only_train", "\u00ff\u0100\u07ff\u0800\uffff\U00010000\U0010FFFF".encode())
    put(t, "bad_overlong", b"ab\xc0\xafcd\xffab")
    put(t, "bad_surrogate", b"ab\xed\xa0\x80\xffab")
    put(t, "bad_truncated", b"ab\xe4\xb8\xffab\xe4")
    put(t, "bad_above_max", b"x\xf4\x90\x80\x80\xffx")
    put(t, "bad_stray_cont", b"\x80abc\xffabc")


def model_input(config, vocab, weights):
    """fuzz_model's input: config and vocab each after a 2-byte length, then the weights."""
    c, v = config.encode(), vocab.encode()
    return struct.pack("<H", len(c)) + c + struct.pack("<H", len(v)) + v + weights


def corpus_model():
    t = "model"
    cfg = dict(CONFIG, vocab=3, context=2, layers=1, heads=1, kv_heads=1, embd=2)
    vocab = '{"type":"char","chars":["a","b"],"unknown":"\\uFFFD"}'
    shapes = [("transformer.wte.weight", (3, 2)), ("transformer.wpe.weight", (2, 2)),
              ("transformer.h.0.ln_1.weight", (2,)), ("transformer.h.0.attn.c_attn.weight", (6, 2)),
              ("transformer.h.0.attn.c_proj.weight", (2, 2)), ("transformer.h.0.ln_2.weight", (2,)),
              ("transformer.h.0.mlp.c_fc.weight", (8, 2)), ("transformer.h.0.mlp.c_proj.weight", (2, 8)),
              ("transformer.ln_f.weight", (2,))]
    def weights(shapes):
        entries = []
        for name, shape in shapes:
            n = 1
            for d in shape:
                n *= d
            entries.append((name, "F32", shape, f32(*[0.01 * i for i in range(n)])))
        return safetensors(entries, {"format": "pt"})
    put(t, "tiny", model_input(json.dumps(cfg), vocab, weights(shapes)))
    rope = [(n, s) for n, s in shapes if n != "transformer.wpe.weight"]
    put(t, "tiny_rope", model_input(json.dumps(dict(cfg, rope=True)), vocab, weights(rope)))
    # Slightly broken: a context the weights cannot hold, a vocabulary of the
    # wrong size, an unknown key.
    put(t, "bad_context", model_input(json.dumps(dict(cfg, context=10**7)), vocab, weights(shapes)))
    put(t, "bad_vocab_size", model_input(json.dumps(cfg), '{"type":"char","chars":["a"],'
                                         '"unknown":"\\uFFFD"}', weights(shapes)))
    put(t, "bad_unknown_key", model_input(json.dumps(dict(cfg, dropout=0.1)), vocab, weights(shapes)))


def corpus_cli():
    t = "cli"
    for name, args in [
        ("attention", ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "-o", "o.npy",
                       "--window", "-1,9223372036854775807", "--causal", "top-left",
                       "--key-lengths", "3,4", "--softcap", "30", "--scale", "0.5"]),
        ("attention_threads", ["attention", "--q", "q", "--k", "k", "--v", "v", "-o", "o",
                               "--threads", "100000", "--alibi"]),
        ("train", ["train", "--text", "t.txt", "--out", "run", "--layers", "1", "--embd", "8",
                   "--heads", "2", "--rope", "--seed", "18446744073709551615", "--lr", "inf"]),
        ("train_bf16", ["train", "--text", "t.txt", "--out", "run", "--dtype", "bf16", "--layers",
                        "1", "--embd", "8", "--heads", "2", "--iters", "-3"]),
        ("train_resume", ["train", "--text", "t.txt", "--out", "run", "--resume", "--force",
                          "--stop-at", "250", "--threads", "0"]),
        ("sample", ["sample", "--model", "m", "--tokens", "99999999999999999999", "--top-k", "3",
                    "--temperature", "0.5", "--prompt", "ROMEO:"]),
        ("bench", ["bench", "--n", "64", "--heads", "8", "--kv-heads", "2", "--window", "16",
                   "--threads", "2147483647", "--json"]),
        ("explain", ["explain", "--d-model", "100000000000", "--heads", "2"]),
    ]:
        put(t, name, "\0".join(args))


if __name__ == "__main__":
    corpus_npy()
    corpus_checkpoint()
    corpus_gguf()
    corpus_vocab()
    corpus_tokenizer()
    corpus_model()
    corpus_cli()
