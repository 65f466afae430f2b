"""qkv::BpeTokenizer against Hugging Face's tokenizers, id for id.

Tokenizers are trained here with the tokenizers library (nothing is
downloaded): GPT-2's layout (ByteLevel), Llama 3's (Split with its pattern,
then ByteLevel; ignore_merges; special tokens), Qwen2's (an NFC normalizer,
Llama 3's split with one digit a piece, merges not ignored) and Llama 2's (Prepend and
Replace normalizer, byte_fallback, no pre-tokenizer; or a Metaspace
pre-tokenizer and decoder), each with its family's post-processor (GPT-2's
ByteLevel, Llama's beginning-of-text template). Each encodes seeded
lines that stress the pre-tokenizer rules; tests/bpe_check (QKV_BPE_CHECK)
encodes and decodes them with qkv.
"""
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[2]
# Beside the repository, or beside the folder of its git worktrees.
SHAKESPEARE = next((p for p in (ROOT.parent / "shared/data/tinyshakespeare.txt",
                                ROOT.parents[1] / "shared/data/tinyshakespeare.txt") if p.exists()), None)
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_0|>"]
LINES = 10_000


@pytest.fixture(scope="module")
def bpe_check():
    path = Path(os.environ.get("QKV_BPE_CHECK", ROOT / "build" / "release" / "tests" / "bpe_check"))
    if not path.exists():
        pytest.fail(f"bpe_check not found at {path}; build first or set QKV_BPE_CHECK")
    return str(path)


def prose():
    if SHAKESPEARE:
        return SHAKESPEARE.read_text(encoding="utf-8").splitlines()
    rng = random.Random(1)
    words = ["the", "king", "shall", "not", "we", "thou", "art", "my", "lord", "good", "Romeo"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(5000)]


def fragments(rng, specials):
    """One random piece of text of one of the kinds that pre-tokenizers treat differently."""
    kind = rng.randrange(14)
    pick = lambda s: rng.choice(s)  # noqa: E731
    if kind == 0:
        return pick(PROSE)
    if kind == 1:
        return pick(["café", "naïve", "Ünïcödé", "façade", "Ελληνικά", "Москва", "ﬁnance", "Straße",
                     "e\u0301", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "हिन्दी"])
    if kind == 2:  # CJK, kana, hangul
        return "".join(chr(rng.choice([rng.randint(0x4E00, 0x9FFF), rng.randint(0x3040, 0x30FF),
                                       rng.randint(0xAC00, 0xD7A3)])) for _ in range(rng.randint(1, 8)))
    if kind == 3:  # emoji, with ZWJ sequences and skin tones
        return pick(["😀", "🎉", "👍🏽", "👩\u200d💻", "🇫🇷", "❤️", "🧑\u200d🤝\u200d🧑"]) * rng.randint(1, 3)
    if kind == 4:  # controls, zero-width characters, NEL, BOM
        return "".join(pick(["\x00", "\x01", "\x1b", "\x7f", "\x85", "\u200b", "\u200c", "\u200d",
                             "\ufeff", "\x0b", "\x0c", "\u00ad"]) for _ in range(rng.randint(1, 4)))
    if kind == 5:  # long words
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(rng.randint(20, 300)))
    if kind == 6:  # white space runs
        return "".join(pick([" ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2009"])
                       for _ in range(rng.randint(1, 9)))
    if kind == 7:  # digit runs of 1..10, some non-ASCII digits
        digits = "0123456789" if rng.random() < 0.8 else "٠١٢٣٤٥٦٧٨٩²³½Ⅻ"
        return "".join(pick(digits) for _ in range(rng.randint(1, 10)))
    if kind == 8:  # contractions in any case
        return pick(["I'm", "you'RE", "it'S", "we'Ve", "they'll", "he'D", "don't", "'LL", "'ſ", "o'Clock",
                     "''s", " 's", "'", "rock'n'roll"])
    if kind == 9:
        return pick(specials) if specials else " "
    if kind == 10:  # punctuation and symbols
        return "".join(pick("!?.,;:-_()[]{}<>|/\\@#$%^&*+=~`\"'€£¥©®™§¶•…—–") for _ in range(rng.randint(1, 6)))
    if kind == 11:  # any code point from the Basic Multilingual Plane, surrogates left out
        return "".join(chr(c if not 0xD800 <= c < 0xE000 else 0x20)
                       for c in (rng.randint(0x20, 0xFFFD) for _ in range(rng.randint(1, 5))))
    if kind == 12:
        return " " * rng.randint(1, 6) + pick(["x", "1", "!", "\n", "é"])
    return ""


def texts(seed, specials):
    rng = random.Random(seed)
    out = ["", " ", "\n", "  \n\n  ", "hello world", "Hello  world\n", " 123 4567 89"]
    while len(out) < LINES:
        out.append("".join(fragments(rng, specials) for _ in range(rng.randint(1, 8))))
    return out


PROSE = prose()


def training_lines(specials):
    return PROSE + texts(99, specials)[:2000]


def gpt2(prefix_space=False, digits=None):
    """GPT-2's layout; `digits` (True: a piece a digit, as SmolLM's; False: a
    piece a run of them) puts a Digits step before its ByteLevel."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    if digits is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=digits),
                                                     tok.pre_tokenizer])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(training_lines(["<|endoftext|>"]), trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)  # offsets only: no ids added
    return tok


def split_then_byte_level(pattern, specials, ignore_merges, normalizer=None):
    """Llama 3's layout and Qwen2's: a Split by `pattern`, then ByteLevel without its own split."""
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=specials, show_progress=False)
    tok.train_from_iterator(training_lines(specials), trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def llama3():
    tok = split_then_byte_level(LLAMA3_PATTERN, LLAMA3_SPECIALS, ignore_merges=True)
    bos = LLAMA3_SPECIALS[0]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])])
    return tok


def qwen2():
    return split_then_byte_level(QWEN2_PATTERN, QWEN2_SPECIALS, ignore_merges=False, normalizer=normalizers.NFC())


def sentencepiece(tmp, normalizer, pre_tokenizer, decoder):
    """SentencePiece's layout: spaces as "▁", characters outside the vocabulary as <0xNN> tokens."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=2000, limit_alphabet=150, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(training_lines(["<s>", "</s>"]), trainer)
    # The pipeline under test, and the 256 byte tokens in the vocabulary, as Llama's files have them.
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    # Llama 2's template: <s> in front; one case also puts </s> after.
    single = "<s> $A </s>" if pre_tokenizer is not None and pre_tokenizer.prepend_scheme == "first" else "<s> $A"
    tok.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(t, tok.token_to_id(t)) for t in ("<s>", "</s>")])
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    path = tmp / "sentencepiece.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return Tokenizer.from_file(str(path))


def llama2(tmp):
    """Llama 2's (and transformers' "legacy" conversion's): a normalizer, no pre-tokenizer."""
    return sentencepiece(
        tmp, normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                           decoders.Strip(" ", 1, 0)]))


def metaspace(scheme, split):
    """transformers' newer conversion: a Metaspace pre-tokenizer (and here its decoder) instead."""
    return lambda tmp: sentencepiece(
        tmp, None, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=split),
        decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme=scheme), decoders.ByteFallback(),
                           decoders.Fuse()]))


CASES = {
    "gpt2": lambda tmp: gpt2(),
    "gpt2_prefix_space": lambda tmp: gpt2(prefix_space=True),
    "smollm": lambda tmp: gpt2(digits=True),
    "digit_runs": lambda tmp: gpt2(digits=False),
    "llama3": lambda tmp: llama3(),
    "qwen2": lambda tmp: qwen2(),
    "llama2": llama2,
    "metaspace_first": metaspace("first", False),
    "metaspace_always_split": metaspace("always", True),
    "metaspace_never_split": metaspace("never", True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ids_and_text_match_tokenizers(name, bpe_check, tmp_path):
    tok = CASES[name](tmp_path)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]
    lines = texts(sorted(CASES).index(name), specials)
    (tmp_path / "texts.json").write_text(json.dumps(lines), encoding="utf-8")
    got = subprocess.run([bpe_check, str(path), str(tmp_path / "texts.json")], capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    ours = json.loads(got.stdout)
    want = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
    want_text = tok.decode_batch(want, skip_special_tokens=False)
    bad = [i for i in range(len(lines)) if ours["ids"][i] != want[i]]
    assert not bad, (f"{len(bad)} of {len(lines)} lines differ; first {lines[bad[0]]!r}:\n"
                     f"qkv        {ours['ids'][bad[0]]}\ntokenizers {want[bad[0]]}")
    # As a model reads them: with the post-processor's special tokens.
    want = [e.ids for e in tok.encode_batch(lines)]
    bad = [i for i in range(len(lines)) if ours["with_specials"][i] != want[i]]
    assert not bad, (f"{len(bad)} of {len(lines)} lines differ with special tokens; first {lines[bad[0]]!r}:\n"
                     f"qkv        {ours['with_specials'][bad[0]]}\ntokenizers {want[bad[0]]}")
    bad = [i for i in range(len(lines)) if ours["decoded"][i] != want_text[i]]
    assert not bad, (f"{len(bad)} of {len(lines)} decodes differ; first {lines[bad[0]]!r}:\n"
                     f"qkv        {ours['decoded'][bad[0]]!r}\ntokenizers {want_text[bad[0]]!r}")
