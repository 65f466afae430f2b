"""Runs every row of docs/bad-inputs.md, so the table cannot drift from the
code: each row's id names a setup below that writes the input the row
describes and returns the command line; the command must exit with the row's
code and print one line containing the row's message fragments (the parts in
backticks, in order; what lies between them is a path that varies)."""
import fcntl
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from tiny_bert import SHARDS, bert_folder as tiny_bert

TABLE = ROOT / "docs" / "bad-inputs.md"
ROW = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|(.*)\|(.*)\|(.*)\|\s*(\d+)\s*\|\s*$")


def table_rows():
    rows = {}
    for line in TABLE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            row_id, _command, _input, message, code = m.groups()
            assert row_id not in rows, f"row {row_id} appears twice"
            rows[row_id] = (re.findall(r"`([^`]+)`", message), int(code))
    return rows


ROWS = table_rows()


# --- inputs -----------------------------------------------------------------

def npy_header(shape, descr="<f4", length=None, version=b"\x01\x00"):
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    n = len(header) if length is None else length
    return b"\x93NUMPY" + version + n.to_bytes(2, "little") + header.encode()


def safetensors_bytes(header: bytes, data=b"", length=None):
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


class Inputs:
    """Writes the files a row needs under tmp and builds command lines."""

    def __init__(self, tmp: Path, model: Path):
        self.tmp, self._model = tmp, model
        rng = np.random.default_rng(0)
        self.q = rng.normal(size=(2, 3, 4)).astype(np.float32)
        self.k = rng.normal(size=(1, 5, 4)).astype(np.float32)
        self.v = rng.normal(size=(1, 5, 4)).astype(np.float32)

    def file(self, name, content):
        path = self.tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            np.save(path, content)
        return str(path)

    def attention(self, *extra, q=None, k=None, v=None, out=None):
        paths = {name: self.file(f"{name}.npy", self.__dict__[name] if x is None else x)
                 if not isinstance(x, Path) else str(x)
                 for name, x in (("q", q), ("k", k), ("v", v))}
        return ["attention", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"],
                "-o", str(out or self.tmp / "out.npy"), *extra]

    def text(self, content=None):
        words = "the cat sat on a mat while the dog ran far away".split()
        body = " ".join(words[i % len(words)] for i in range(400)) if content is None else content
        return self.file("text.txt", body)

    def train(self, *extra, text=None, out=None, **options):
        """A tiny run; options override its sizes (context=10**8 -> --context 100000000)."""
        sizes = {"layers": 1, "heads": 2, "embd": 8, "context": 8, "iters": 2, "eval_iters": 1,
                 "threads": 1, **options}
        flags = [x for k, v in sizes.items() for x in ("--" + k.replace("_", "-"), str(v))]
        return ["train", "--text", self.text() if text is None else text,
                "--out", str(self.tmp / "run" if out is None else out),
                *flags, "--no-progress", *extra]

    def model(self):
        """A copy of a trained checkpoint, to damage."""
        copy = self.tmp / "model"
        shutil.copytree(self._model, copy)
        return copy

    def sample(self, model, *extra, tokens="1"):
        return ["sample", "--model", str(model), "--tokens=" + tokens, *extra]


def damaged_weights(i: Inputs, damage):
    model = i.model()
    path = model / "model.safetensors"
    path.write_bytes(damage(path.read_bytes()))
    return i.sample(model)


def nan_weights(i: Inputs):
    model = i.model()
    path = model / "model.safetensors"
    data = bytearray(path.read_bytes())
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    data[header_end:header_end + 4] = struct.pack("<f", float("nan"))
    path.write_bytes(bytes(data))
    return i.sample(model)


def edited(i: Inputs, name, content):
    model = i.model()
    (model / name).write_text(content)
    return i.sample(model)


def resumed_on_other_text(i: Inputs):
    out = i.tmp / "run"
    shutil.copytree(i._model, out)
    return i.train("--resume", text=i.text("a different text " * 40), out=out)


def nanogpt_state(i: Inputs, drop=None, reshape=None, vocab_rows=4, untied=False):
    """A 1-layer nanoGPT state_dict (embd 8, context 8, no bias) as safetensors,
    for the vocabulary text "abc\\n" (4 characters); returns `qkv import`'s args."""
    C = 8
    shapes = {"transformer.wte.weight": (vocab_rows, C), "transformer.wpe.weight": (8, C),
              "transformer.h.0.ln_1.weight": (C,), "transformer.h.0.attn.c_attn.weight": (3 * C, C),
              "transformer.h.0.attn.c_proj.weight": (C, C), "transformer.h.0.ln_2.weight": (C,),
              "transformer.h.0.mlp.c_fc.weight": (4 * C, C),
              "transformer.h.0.mlp.c_proj.weight": (C, 4 * C), "transformer.ln_f.weight": (C,),
              "lm_head.weight": (vocab_rows, C)}
    if reshape:
        shapes[reshape[0]] = reshape[1]
    shapes.pop(drop, None)
    rng = np.random.default_rng(0)
    arrays = {name: rng.normal(0, 0.02, shape).astype("<f4") for name, shape in shapes.items()}
    if "lm_head.weight" in arrays and not untied:
        arrays["lm_head.weight"] = arrays["transformer.wte.weight"]
    header, data = {}, b""
    for name, a in arrays.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [len(data), len(data) + a.nbytes]}
        data += a.tobytes()
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    weights = i.file("ckpt.safetensors", safetensors_bytes(h, data))
    return ["import", "--from", "nanogpt", "--weights", weights, "--vocab-text",
            i.file("input.txt", "abc\n"), "--heads", "2", "-o", i.tmp / "imported"]


def gguf_model(i: Inputs, drop=(), rows=None, extra=None, metadata=None, strings=None, qtype=None, out=None,
               tokens=None, merges=("a b",)):
    """A 1-layer llama GGUF file (embd 32, 2 heads, a 6-token byte-level BPE
    vocabulary) with random float32 weights, as llama.cpp's converter names
    them: `drop` leaves tensors out, `rows` cuts one ({name: rows}), `extra`
    adds tensors, `metadata` adds llama.* keys, `strings` replaces string keys,
    `qtype` (a ggml type number) stores token_embd as zero bytes of that type,
    `tokens` and `merges` replace the vocabulary's.
    Returns qkv logits' args."""
    import gguf
    rng = np.random.default_rng(0)
    strings = {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
               **(strings or {})}
    arch = strings.pop("general.architecture")
    path = i.tmp / "m.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in {"context_length": 16, "embedding_length": 32, "block_count": 1, "feed_forward_length": 32,
                       "attention.head_count": 2, "attention.layer_norm_rms_epsilon": 1e-5,
                       **(metadata or {})}.items():
        (w.add_string if isinstance(value, str) else w.add_float32 if isinstance(value, float) else w.add_uint32)(
            f"llama.{key}", value)
    tokens = tokens or ["<|endoftext|>", "a", "b", "c", "\u0120", "ab"]
    w.add_string("tokenizer.ggml.model", strings["tokenizer.ggml.model"])
    w.add_string("tokenizer.ggml.pre", strings["tokenizer.ggml.pre"])
    w.add_token_list(tokens)
    w.add_token_types([3, 1, 1, 1, 1, 1])
    w.add_token_merges(list(merges))
    shapes = {"token_embd.weight": (6, 32), "output_norm.weight": (32,), "blk.0.attn_norm.weight": (32,),
              "blk.0.ffn_norm.weight": (32,), **{f"blk.0.{n}.weight": (32, 32) for n in (
                  "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")},
              **(extra or {})}
    for name, shape in shapes.items():
        if name in drop:
            continue
        if rows and name in rows:
            shape = (rows[name], *shape[1:])
        if qtype is not None and name == "token_embd.weight":
            block, size = gguf.constants.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
            w.add_tensor(name, np.zeros((shape[0], shape[1] // block * size), np.uint8),
                         raw_dtype=gguf.GGMLQuantizationType(qtype))
        else:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ["logits", "--model", path, "--prompt", "ab", "-o", out or i.tmp / "l.npy"]


def bert_checkpoint_import(i: Inputs):
    """`qkv import` given a BERT checkpoint: F32 embeddings and I64 position ids."""
    header = {"embeddings.position_ids": {"dtype": "I64", "shape": [1, 2], "data_offsets": [0, 16]},
              "embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [2, 2],
                                                    "data_offsets": [16, 32]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    weights = i.file("bert.safetensors", safetensors_bytes(h, b"\0" * 32))
    return ["import", "--from", "nanogpt", "--weights", weights, "--vocab-text",
            i.file("input.txt", "abc\n"), "--heads", "2", "-o", i.tmp / "imported"]


def text_is_the_runs_log(i: Inputs):
    out = i.tmp / "run"
    out.mkdir()
    return i.train(text=i.file("run/log.jsonl", "the cat sat on the mat " * 40), out=out)


def vocab_text_directory(i: Inputs, path):
    """nanogpt_state's import with --vocab-text naming a directory."""
    args = nanogpt_state(i)
    Path(path).mkdir(exist_ok=True)
    args[args.index("--vocab-text") + 1] = str(path)
    return args


def edited_config(i: Inputs, **changes):
    model = i.model()
    cfg = json.loads((model / "config.json").read_text())
    cfg.update(changes)
    (model / "config.json").write_text(json.dumps(cfg))
    return i.sample(model)


def trained_run_in_the_way(i: Inputs):
    out = i.tmp / "run"
    shutil.copytree(i._model, out)
    return i.train(out=out)


HELD = []  # lock files held open while their row runs


def run_dir_in_use(i: Inputs):
    out = i.tmp / "run"
    out.mkdir()
    lock = open(out / ".qkv-train.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running qkv train holds it
    HELD.append(lock)
    return i.train(out=out)


def symlink_to(i: Inputs, name, target):
    link = i.tmp / name
    link.symlink_to(target)
    return link


def raw_bytes_in_npy_header():
    header = b"{'descr': '<\xff\xfe\x1b[31m', 'fortran_order': False, 'shape': (2, 3, 4), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


# The smallest BERT tokenizer.json qkv reads.
BERT_JSON = {
    "added_tokens": [], "normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}},
}


def bert_folder(i: Inputs, tokenizer_json, text=b"fine\n"):
    folder = i.tmp / "bert"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tokenizer_json)
    return ["tokenize", "--model", folder, "--input", i.file("lines.txt", text)]


# The smallest BPE tokenizer.json qkv reads (no normalizer, pre-tokenizer or special tokens).
BPE_JSON = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "vocab": {"a": 0, "b": 1}, "merges": []}}


def embed_tiny_bert(i: Inputs, **folder):
    """qkv embed of tiny_bert.bert_folder(**folder)."""
    model = tiny_bert(i.tmp / "bert", **folder)
    return ["embed", "--model", model, "--input", i.file("lines.txt", "hello\n"), "-o", i.tmp / "e.npy"]


def embed_max_seq_length(i: Inputs, n):
    args = embed_tiny_bert(i)
    (i.tmp / "bert" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": n}))
    return args


def weights_into_directory(i: Inputs):
    return i.attention("--lse", str(i.tmp / "lse.npy"), "--weights", str(i.tmp / "no" / "w.npy"))


def hard_link(i: Inputs, target, name):
    """A hard link to target, named tmp/name."""
    link = i.tmp / name
    os.link(target, link)
    return link


def users_directory(i: Inputs, *names):
    """A directory holding the user's own files of these names."""
    d = i.tmp / "mine"
    d.mkdir()
    for name in names:
        (d / name).write_text("the user's own\n")
    return d


def text_is_the_runs_plot(i: Inputs):
    out = i.tmp / "run"
    out.mkdir()
    return i.train("--force", text=i.file("run/loss.png", "the cat sat on the mat " * 40), out=out)


def weights_in_out(i: Inputs):
    args = nanogpt_state(i)
    (i.tmp / "ckpt.safetensors").rename(i.tmp / "model.safetensors")
    return [*args[:4], i.tmp / "model.safetensors", *args[5:-1], i.tmp, "--force"]


# A setup that returns (args, path) runs with stdout sent to that path.
STDOUT_FULL = "/dev/full"

HUGE = 1_000_000  # N = S = 10^6: the weights [1, 10^6, 10^6] float32 are 3.6 TiB

SETUP = {
    # qkv attention: the .npy loader
    "npy-not-numpy": lambda i: i.attention(q=b"hello world, this is not numpy"),
    "npy-empty-file": lambda i: i.attention(k=b""),
    "npy-truncated-header": lambda i: i.attention(q=npy_header("(2, 3, 4)")[:20]),
    "npy-truncated-data": lambda i: i.attention(q=npy_header("(2, 3, 4)") + b"\0" * 10),
    "npy-header-length-past-end": lambda i: i.attention(
        q=npy_header("(2, 3, 4)", length=60000)),
    "npy-oversized-header": lambda i: i.attention(
        q=b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little") + b"{" * 64),
    "npy-malformed-header": lambda i: i.attention(q=b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'\n"),
    "npy-shape-overflow": lambda i: i.attention(
        q=npy_header("(4294967296, 4294967296, 4294967296)")),
    "npy-negative-dim": lambda i: i.attention(q=npy_header("(2, -3, 4)")),
    "npy-int64": lambda i: i.attention(q=np.zeros((2, 3, 4), np.int64)),
    "npy-big-endian-int": lambda i: i.attention(q=np.zeros((2, 3, 4), ">i4")),
    "npy-missing-file": lambda i: i.attention(v=i.tmp / "nope.npy"),
    "npy-directory": lambda i: i.attention(k=i.tmp),
    # qkv attention: values, shapes, options, output
    "attention-nan-in-q": lambda i: i.attention(q=np.full((2, 3, 4), np.nan, np.float32)),
    "attention-inf-in-v": lambda i: i.attention(
        v=np.where(np.arange(20).reshape(1, 5, 4) == 7, np.inf, 0).astype(np.float32)),
    "attention-head-dim-differs": lambda i: i.attention(k=np.zeros((1, 5, 3), np.float32)),
    "attention-empty-keys": lambda i: i.attention(k=np.zeros((1, 0, 4), np.float32),
                                                 v=np.zeros((1, 0, 4), np.float32)),
    "attention-mask-nan": lambda i: i.attention(
        "--mask", i.file("mask.npy", np.full((3, 5), np.nan, np.float32))),
    "attention-weights-exceed-memory": lambda i: i.attention(
        "--weights", str(i.tmp / "w.npy"), q=np.zeros((1, HUGE, 1), np.float32),
        k=np.zeros((1, HUGE, 1), np.float32), v=np.zeros((1, HUGE, 1), np.float32)),
    "attention-unwritable-output": lambda i: i.attention(out=i.tmp / "no" / "dir" / "out.npy"),
    "attention-output-is-directory": lambda i: i.attention(out=i.tmp),
    "attention-outputs-one-file": lambda i: i.attention("--weights", i.tmp / "out.npy"),
    "attention-outputs-linked": lambda i: i.attention(
        "--lse", hard_link(i, i.file("o.npy", b"old"), "lse.npy"), out=i.tmp / "o.npy"),
    "attention-output-is-input": lambda i: [*i.attention()[:-2], "-o", f"{i.tmp}/./k.npy"],
    "attention-output-links-to-input": lambda i: [*i.attention()[:-2], "-o",
                                                  hard_link(i, i.tmp / "q.npy", "o.npy")],
    "attention-window-one-side": lambda i: i.attention("--window", "128"),
    "attention-2d-and-3d": lambda i: i.attention(q=i.k[0], v=i.v[0]),
    "attention-key-length-above-s": lambda i: i.attention("--key-lengths", "6"),
    "attention-threads-out-of-range": lambda i: i.attention("--threads", "99999999999"),
    "attention-threads-above-max": lambda i: i.attention("--threads", "100000"),
    "attention-scale-nan": lambda i: i.attention("--scale", "nan"),
    "attention-scale-empty": lambda i: i.attention("--scale", ""),
    "attention-softcap-nan": lambda i: i.attention("--softcap", "nan"),
    "attention-output-to-full-device": lambda i: i.attention(
        out=symlink_to(i, "full.npy", "/dev/full")),
    "attention-outputs-all-or-none": weights_into_directory,
    "npy-raw-bytes-in-header": lambda i: i.attention(q=raw_bytes_in_npy_header()),
    "attention-unknown-flag": lambda i: i.attention("--frobnicate"),
    "attention-missing-option": lambda i: ["attention", "--q", "q.npy"],
    # qkv bench
    "bench-n-zero": lambda i: ["bench", "--n", "0"],
    "bench-kv-heads-not-divisor": lambda i: ["bench", "--heads", "8", "--kv-heads", "3"],
    "bench-exceeds-memory": lambda i: ["bench", "--n", "100000000", "--heads", "64"],
    "bench-size-overflow": lambda i: ["bench", "--n", "4000000000000", "--d", "4000000000000"],
    "bench-reps-zero": lambda i: ["bench", "--reps", "0"],
    "bench-bad-kernel": lambda i: ["bench", "--kernel", "turbo"],
    "bench-threads-above-max": lambda i: ["bench", "--threads", "100000"],
    # qkv train
    "train-empty-text": lambda i: i.train(text=i.text("")),
    "train-invalid-utf8": lambda i: i.train(text=i.file("bad.txt", b"hello \xff world " * 100)),
    "train-text-too-short": lambda i: i.train(text=i.text("to be or not to be")),
    "train-text-is-its-own-log": text_is_the_runs_log,
    "train-text-is-its-loss-plot": text_is_the_runs_plot,
    "train-text-is-directory": lambda i: i.train(text=str(i.tmp)),
    "train-text-missing": lambda i: i.train(text=str(i.tmp / "nope.txt")),
    "train-text-empty-path": lambda i: i.train(text=""),
    "train-out-empty": lambda i: i.train(out=""),
    "train-resume-and-force": lambda i: i.train("--resume", "--force"),
    "train-out-is-file": lambda i: i.train(out=Path(i.file("taken", "x"))),
    "train-context-exceeds-memory": lambda i: i.train(context=100_000_000),
    "train-embd-overflow": lambda i: i.train(embd=4_000_000_000, heads=1),
    "train-batch-zero": lambda i: i.train("--batch", "0"),
    "train-lr-negative": lambda i: i.train("--lr=-1"),
    "train-heads-not-divisor": lambda i: i.train(heads=3),
    "train-lr-inf": lambda i: i.train("--lr", "inf"),
    "train-weight-decay-nan": lambda i: i.train("--weight-decay", "nan"),
    "train-rope-odd-head-dim": lambda i: i.train("--rope", embd=6),
    "train-seed-out-of-range": lambda i: i.train("--seed", "18446744073709551616"),
    "train-threads-above-max": lambda i: i.train(threads=100000),
    "train-out-holds-run": trained_run_in_the_way,
    "train-out-not-made-by-qkv": lambda i: i.train(out=users_directory(i, "config.json", "notes.txt")),
    "train-out-in-use": run_dir_in_use,
    "train-iters-zero": lambda i: i.train(iters=0),
    "train-min-lr-above-lr": lambda i: i.train("--lr", "0.001", "--min-lr", "0.01"),
    "train-bad-kernel": lambda i: i.train("--kernel", "gpu"),
    "train-stop-at-off-interval": lambda i: i.train("--stop-at", "7"),
    "train-resume-without-checkpoint": lambda i: i.train("--resume"),
    "train-resume-other-text": resumed_on_other_text,
    # qkv sample: the checkpoint loader
    "sample-missing-model": lambda i: i.sample(i.tmp / "nowhere"),
    "sample-truncated-weights": lambda i: damaged_weights(i, lambda d: d[:len(d) // 2]),
    "sample-oversized-header": lambda i: damaged_weights(
        i, lambda d: struct.pack("<Q", 2**62) + d[8:]),
    "sample-header-not-json": lambda i: damaged_weights(i, lambda d: d[:8] + b"#" + d[9:]),
    "sample-empty-weights": lambda i: damaged_weights(i, lambda d: b""),
    "sample-nan-weights": nan_weights,
    "sample-config-not-json": lambda i: edited(i, "config.json", "{not json"),
    "sample-config-wrong-type": lambda i: edited(i, "config.json", '{"vocab": "many"}'),
    "sample-config-duplicate-key": lambda i: edited(i, "config.json", '{"layers": 1, "layers": 2}'),
    "sample-vocab-not-json": lambda i: edited(i, "vocab.json", "[1, 2"),
    "sample-config-unknown-key": lambda i: edited_config(i, dropout=0.1),
    "sample-config-unknown-arch": lambda i: edited_config(i, arch="llama"),
    "sample-config-exceeds-weights": lambda i: edited_config(i, context=10_000_000),
    "sample-config-bad-gelu": lambda i: edited_config(i, gelu="fast"),
    "sample-model-empty": lambda i: ["sample", "--model", ""],
    # A str with a surrogate escape: subprocess passes it as the raw byte 0xff.
    "sample-prompt-invalid-utf8": lambda i: i.sample(i._model, "--prompt", "a\udcffb"),
    "sample-tokens-out-of-range": lambda i: i.sample(i._model, tokens="99999999999999999999"),
    "sample-threads-above-max": lambda i: i.sample(i._model, "--threads", "100000"),
    "sample-prompt-too-long": lambda i: i.sample(i._model, "--prompt", "the cat s"),
    # A prompt from the tiny model's own text: the default "\n" is not in its
    # vocabulary, and its warning would be a second line.
    "sample-stdout-full": lambda i: (i.sample(i._model, "--prompt", "a", tokens="40000"), STDOUT_FULL),
    "sample-tokens-negative": lambda i: i.sample(i._model, tokens="-1"),
    "sample-temperature-negative": lambda i: i.sample(i._model, "--temperature=-1"),
    "sample-temperature-nan": lambda i: i.sample(i._model, "--temperature", "nan"),
    "sample-top-p-zero": lambda i: i.sample(i._model, "--top-p", "0"),
    "sample-top-p-above-one": lambda i: i.sample(i._model, "--top-p", "1.5"),
    "sample-top-p-nan": lambda i: i.sample(i._model, "--top-p", "nan"),
    # "\udcff" reaches the command line as the byte 0xFF (Python's surrogateescape)
    # qkv logits
    "logits-empty-prompt": lambda i: ["logits", "--model", i._model, "--prompt", "",
                                      "-o", i.tmp / "l.npy"],
    "logits-prompt-too-long": lambda i: ["logits", "--model", i._model, "--prompt", "the cat s",
                                         "-o", i.tmp / "l.npy"],
    "logits-missing-output": lambda i: ["logits", "--model", i._model, "--prompt", "the"],
    "logits-unwritable-output": lambda i: ["logits", "--model", i._model, "--prompt", "the",
                                           "-o", i.tmp / "no" / "dir" / "l.npy"],
    "logits-model-empty": lambda i: ["logits", "--model", "", "--prompt", "the", "-o", i.tmp / "l.npy"],
    "logits-out-empty": lambda i: ["logits", "--model", i._model, "--prompt", "the", "-o", ""],
    "logits-output-is-model-folder": lambda i: ["logits", "--model", i.model(), "--prompt", "the",
                                                "-o", i.tmp / "model"],
    "logits-output-in-model-folder": lambda i: ["logits", "--model", i.model(), "--prompt", "the",
                                                "-o", i.tmp / "model" / "new.npy"],
    "logits-output-links-into-model": lambda i: ["logits", "--model", i.model(), "--prompt", "the", "-o",
                                                 hard_link(i, i.tmp / "model" / "config.json", "l.npy")],
    # qkv logits --model FILE.gguf
    "gguf-unknown-architecture": lambda i: gguf_model(i, strings={"general.architecture": "falcon"}),
    "gguf-missing-tensor": lambda i: gguf_model(i, drop={"blk.0.ffn_down.weight"}),
    "gguf-wrong-shape": lambda i: gguf_model(i, rows={"blk.0.attn_k.weight": 16}),
    "gguf-rope-factors": lambda i: gguf_model(i, extra={"rope_freqs.weight": (5,)}),
    "gguf-extra-tensor": lambda i: gguf_model(i, extra={"blk.0.attn_q_norm.weight": (16,)}),
    "gguf-unsupported-type": lambda i: gguf_model(i, qtype=3),
    "gguf-unsupported-key": lambda i: gguf_model(i, metadata={"expert_count": 8}),
    "gguf-rope-scaling": lambda i: gguf_model(i, metadata={"rope.scaling.type": "yarn"}),
    "gguf-tokenizer-model": lambda i: gguf_model(i, strings={"tokenizer.ggml.model": "bert"}),
    "gguf-pre-tokenizer": lambda i: gguf_model(i, strings={"tokenizer.ggml.pre": "deepseek-llm"}),
    "gguf-repeated-token": lambda i: gguf_model(i, tokens=["<|endoftext|>", "a", "b", "c", "\u0120", "a"]),
    "gguf-bad-merge": lambda i: gguf_model(i, merges=["a b c"]),
    "gguf-output-is-model": lambda i: gguf_model(i, out=i.tmp / "m.gguf"),
    "gguf-quantize-file": lambda i: gguf_model(i) + ["--quantize", "q8_0"],
    # qkv quantize
    "quantize-unknown-type": lambda i: ["quantize", "--model", gguf_model(i)[2], "--type", "q3_k_m",
                                        "-o", i.tmp / "q.gguf"],
    "quantize-char-model": lambda i: ["quantize", "--model", i.model(), "--type", "q8_0", "-o", i.tmp / "q.gguf"],
    # qkv import, qkv export
    "import-unknown-from": lambda i: ["import", "--from", "llama", "--weights", "w.safetensors",
                                      "--vocab-text", "t.txt", "--heads", "2", "-o", i.tmp / "m"],
    "import-not-nanogpt": bert_checkpoint_import,
    "import-missing-tensor": lambda i: nanogpt_state(i, drop="transformer.h.0.mlp.c_fc.weight"),
    "import-wrong-shape": lambda i: nanogpt_state(
        i, reshape=("transformer.h.0.attn.c_attn.weight", (24, 9))),
    "import-vocab-mismatch": lambda i: nanogpt_state(i, vocab_rows=5),
    "import-untied-head": lambda i: nanogpt_state(i, untied=True),
    "import-missing-weights": lambda i: ["import", "--from", "nanogpt", "--weights", i.tmp / "none",
                                         "--vocab-text", i.file("input.txt", "abc"), "--heads", "2",
                                         "-o", i.tmp / "m"],
    "import-heads-not-divisor": lambda i: [*nanogpt_state(i)[:-3], "3", "-o", i.tmp / "imported"],
    "import-empty-positions": lambda i: nanogpt_state(i, reshape=("transformer.wpe.weight", (0, 8))),
    "import-vocab-text-directory": lambda i: vocab_text_directory(i, i.tmp / "vocab"),
    "import-out-not-made-by-qkv": lambda i: [*nanogpt_state(i)[:-1],
                                             users_directory(i, "config.json", "vocab.json")],
    "import-weights-in-out": weights_in_out,
    "export-unknown-to": lambda i: ["export", "--to", "gguf", "--model", i._model, "-o", i.tmp / "x"],
    "export-output-over-model-file": lambda i: ["export", "--to", "nanogpt", "--model", i.model(),
                                                "-o", i.tmp / "model" / "model.safetensors"],
    "export-missing-model": lambda i: ["export", "--to", "nanogpt", "--model", i.tmp / "nowhere",
                                       "-o", i.tmp / "x.safetensors"],
    # qkv explain, qkv demo, qkv itself
    "explain-d-model-exceeds-memory": lambda i: ["explain", "--d-model", "100000000000"],
    "explain-heads-not-divisor": lambda i: ["explain", "--heads", "3"],
    "explain-mask-missing-file": lambda i: ["explain", "--mask", str(i.tmp / "m.npy")],
    "explain-mask-wrong-length": lambda i: ["explain", "--tokens", "the cat sat", "--mask",
                                            i.file("pad.npy", np.array([1, 1, 1, 0, 0], bool))],
    "explain-mask-empty": lambda i: ["explain", "--mask", i.file("m.npy", np.zeros(0, bool))],
    "explain-d-k-zero": lambda i: ["explain", "--d-k", "0"],
    "explain-d-k-with-files": lambda i: ["explain", *i.attention()[1:7], "--d-k", "4"],
    "explain-scale-infinite": lambda i: ["explain", "--scale", "inf"],
    "explain-2d-and-3d": lambda i: ["explain", "--q", i.file("q2.npy", np.zeros((4, 3))),
                                    "--k", i.file("k3.npy", np.zeros((1, 4, 3))),
                                    "--v", i.file("v2.npy", np.zeros((4, 3)))],
    "explain-blank-tokens": lambda i: ["explain", "--tokens", "   "],
    "explain-outputs-one-file": lambda i: ["explain", "--model", i._model, "--prompt", "the",
                                           "--png", i.tmp / "x", "--html", f"{i.tmp}/./x"],
    "explain-png-unwritable": lambda i: ["explain", "--png", str(i.tmp / "no" / "dir" / "a.png")],
    # qkv explain --model (the table's model: 1 layer, 2 heads, context 8)
    "explain-model-words-option": lambda i: ["explain", "--model", i._model, "--prompt", "the",
                                             "--d-model", "4"],
    "explain-model-tokens": lambda i: ["explain", "--model", i._model, "--tokens", "the cat"],
    "explain-model-without-prompt": lambda i: ["explain", "--model", i._model],
    "explain-model-empty-prompt": lambda i: ["explain", "--model", i._model, "--prompt", ""],
    "explain-model-prompt-too-long": lambda i: ["explain", "--model", i._model, "--prompt",
                                                "the cat s"],
    "explain-model-prompt-invalid-utf8": lambda i: ["explain", "--model", i._model, "--prompt",
                                                    "th\udcff"],
    "explain-model-layer-out-of-range": lambda i: ["explain", "--model", i._model, "--prompt",
                                                   "the", "--layer", "1"],
    "explain-model-head-out-of-range": lambda i: ["explain", "--model", i._model, "--prompt",
                                                  "the", "--head", "2"],
    "explain-model-html-unwritable": lambda i: ["explain", "--model", i._model, "--prompt", "the",
                                                "--html", i.tmp / "no" / "dir" / "a.html"],
    "explain-prompt-without-model": lambda i: ["explain", "--prompt", "the"],
    "demo-unknown-section": lambda i: ["demo", "--section", "2.9"],
    "demo-precision-out-of-range": lambda i: ["demo", "--precision", "13"],
    "demo-stdout-full": lambda i: (["demo"], STDOUT_FULL),
    "demo-unknown-flag": lambda i: ["demo", "--frobnicate"],
    "size-unknown-preset": lambda i: ["size", "gpt-5"],
    "size-heads-do-not-divide": lambda i: ["size", "--layers", "2", "--embd", "100", "--heads", "3",
                                           "--vocab", "5"],
    "size-preset-and-shape": lambda i: ["size", "gpt2", "--layers", "2"],
    "tokenize-missing-folder": lambda i: ["tokenize", "--model", i.tmp / "nope", "--input", "-"],
    "tokenize-no-tokenizer": lambda i: ["tokenize", "--model", i.tmp, "--input", "-"],
    "tokenize-truncated-json": lambda i: bert_folder(i, json.dumps(BERT_JSON)[:40]),
    "tokenize-unsupported-normalizer": lambda i: bert_folder(i, json.dumps({**BERT_JSON,
                                                                            "normalizer": {"type": "NFKC"}})),
    "tokenize-invalid-utf8": lambda i: bert_folder(i, json.dumps(BERT_JSON), text=b"fine\nbad\xff\n"),
    "tokenize-vocab-gap": lambda i: bert_folder(i, json.dumps({**BERT_JSON, "model": {
        **BERT_JSON["model"], "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 3}}})),
    "tokenize-max-length-too-small": lambda i: [*bert_folder(i, json.dumps(BERT_JSON)), "--max-length", "1"],
    "tokenize-max-length-negative": lambda i: [*bert_folder(i, json.dumps(BERT_JSON)), "--max-length", "-1"],
    "tokenize-bpe-invalid-utf8": lambda i: bert_folder(i, json.dumps(BPE_JSON), text=b"ab\nba\nab \xff ab\n"),
    "train-invalid-utf8-later-line": lambda i: i.train(text=i.file("bad.txt", b"the cat\nsat on\nthe \xff mat\n")),
    "train-stop-at-negative": lambda i: i.train("--stop-at", "-1"),
    "explain-model-layer-fraction": lambda i: ["explain", "--model", i._model, "--prompt", "the", "--layer", "0.5"],
    "embed-max-length-negative": lambda i: [*embed_tiny_bert(i), "--max-length", "-1"],
    "embed-batch-fraction": lambda i: [*embed_tiny_bert(i), "--batch", "1.5"],
    "embed-max-seq-length-one": lambda i: embed_max_seq_length(i, 1),
    "embed-shard-index-tensor-nowhere": lambda i: embed_tiny_bert(
        i, second={"encoder.layer.0.output.dense.weight"}, index={"pooler.dense.weight": SHARDS[0]}),
    "embed-shard-index-file-missing": lambda i: embed_tiny_bert(
        i, second={"encoder.layer.0.output.dense.weight"},
        index={"encoder.layer.0.output.dense.weight": "model-00003-of-00002.safetensors"}),
    "qkv-unknown-command": lambda i: ["attend"],
}


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory, qkv_bin):
    import subprocess
    tmp = tmp_path_factory.mktemp("table")
    i = Inputs(tmp, tmp / "unused")
    r = subprocess.run([qkv_bin, *i.train(out=tmp / "model")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return tmp / "model"


def test_table_and_setups_match():
    assert len(ROWS) >= 30
    assert sorted(ROWS) == sorted(SETUP), (set(ROWS) ^ set(SETUP))


@pytest.mark.parametrize("row_id", sorted(SETUP))
def test_row(row_id, run, qkv_bin, tmp_path, trained_model):
    assert row_id in ROWS, f"{row_id} has a setup but no row in {TABLE.name}"
    fragments, code = ROWS[row_id]
    args = SETUP[row_id](Inputs(tmp_path, trained_model))
    if isinstance(args, tuple):
        args, stdout = args
        with open(stdout, "w") as out:
            r = subprocess.run([qkv_bin, *map(str, args)], stdout=out, stderr=subprocess.PIPE,
                               text=True, timeout=120, stdin=subprocess.DEVNULL)
    else:
        r = run(*args)
    while HELD:
        HELD.pop().close()
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    at = 0
    for fragment in fragments:
        found = lines[0].find(fragment, at)
        assert found >= 0, f"{fragment!r} not in {lines[0]!r} (after column {at})"
        at = found + len(fragment)
