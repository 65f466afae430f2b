"""The token labels of `qkv explain --model`, for each kind of tokenizer: a
qkv character model, BERT's WordPiece, GPT-2's byte-level BPE and Llama 2's
SentencePiece BPE with byte fallback. Every view (the terminal heatmap, the
PNG, the HTML page) shows the same label per token: the text the token
stands for, with one mark for a space ("␣", never GPT-2's "Ġ" or
SentencePiece's "▁"), WordPiece's "##" kept, escapes for what draws nothing,
and a byte of a character split over tokens as "\\xe2". The expected labels
are worked out here from the `tokenizers` library's own tokens."""
import json
import re
import shutil
import unicodedata

import numpy as np
import pytest

import qkv

from bert_folders import minilm_dir, random_bert, write_folder
from gpt2_folders import gpt2_folder, gpt2_tokenizer, run_qkv, training_lines

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tk = pytest.importorskip("tokenizers")

# Spaces, a word WordPiece splits, characters split over byte tokens (é, 世,
# 👍), a newline and a tab.
PROMPT = "What is it? qkvish café 世\n\t👍"
INVISIBLE = {"Cc", "Cf", "Zl", "Zp", "Zs", "Co", "Cn"}
ESCAPES = {" ": "\u2423", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def visible(text: bytes) -> str:
    """What a label shows for a token's bytes (qkv::visible_text, written
    again): the space as the open box, escapes for newlines, tabs and what
    draws nothing, each byte that is not part of a whole character as \\xNN."""
    out = ""
    for ch in text.decode("utf-8", errors="backslashreplace"):
        cat = unicodedata.category(ch)
        if ch in ESCAPES:
            out += ESCAPES[ch]
        elif cat in INVISIBLE or (not out and cat.startswith("M")):
            out += f"U+{ord(ch):04X}"
        else:
            out += ch
    return out


def byte_level_bytes(token: str) -> bytes:
    """GPT-2's token spelling back to bytes: printable bytes stand for
    themselves, the others for U+0100 onwards, in order ("Ġ" is the space)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {chr(b): b for b in printable}
    n = 0
    for b in range(256):
        if b not in printable:
            chars[chr(0x100 + n)] = b
            n += 1
    return bytes(chars[c] for c in token)


def sentencepiece_bytes(token: str) -> bytes:
    """A SentencePiece token's bytes: "▁" is the space, <0xNN> one byte."""
    m = re.fullmatch(r"<0x([0-9A-F]{2})>", token)
    return bytes([int(m.group(1), 16)]) if m else token.replace("\u2581", " ").encode()


def sentencepiece_tokenizer():
    """Llama 2's layout: a Prepend and Replace normalizer making spaces "▁",
    BPE with byte fallback (the 256 <0xNN> tokens, for characters outside
    the vocabulary), <s> in front of the text."""
    tok = tk.Tokenizer(tk.models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = tk.trainers.BpeTrainer(vocab_size=800, limit_alphabet=60, special_tokens=["<unk>", "<s>", "</s>"],
                                     show_progress=False)
    tok.train_from_iterator(training_lines(), trainer)
    tok.normalizer = tk.normalizers.Sequence([tk.normalizers.Prepend("\u2581"),
                                              tk.normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = tk.decoders.Sequence([tk.decoders.Replace("\u2581", " "), tk.decoders.ByteFallback(),
                                        tk.decoders.Fuse(), tk.decoders.Strip(" ", 1, 0)])
    tok.post_processor = tk.processors.TemplateProcessing(single="<s> $A",
                                                         special_tokens=[("<s>", tok.token_to_id("<s>"))])
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    return tk.Tokenizer.from_str(json.dumps(spec))


def llama_folder(path, tok):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=56,
                                   num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=64,
                                   bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
    transformers.LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))


def char_model(path):
    (path.parent / "text.txt").write_text("What is it? the cat sat on the mat. " * 40)
    qkv.train(path.parent / "text.txt", path, iters=2, layers=1, heads=2, embd=16, context=32, batch=4,
              eval_iters=1, eval_interval=2, warmup=1, threads=1)


def char_labels(prompt):
    return [visible(ch.encode()) for ch in prompt]


def gpt2_case(path):
    tok = gpt2_tokenizer()
    gpt2_folder(path, tok)
    return [visible(byte_level_bytes(t)) for t in tok.encode(PROMPT).tokens]


def llama2_case(path):
    tok = sentencepiece_tokenizer()
    llama_folder(path, tok)
    tokens = tok.encode(PROMPT).tokens
    assert "<0xC3>" in tokens, tokens  # the case of a byte token, as meant
    return [visible(sentencepiece_bytes(t)) for t in tokens]


def bert_case(path):
    write_folder(random_bert(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37),
                 path, minilm_dir())
    hf = transformers.AutoTokenizer.from_pretrained(str(path))
    return [visible(t.encode()) for t in hf.convert_ids_to_tokens(hf(PROMPT)["input_ids"])]


def char_case(path):
    char_model(path)
    return char_labels(PROMPT)


# name -> makes the folder at the path, returns the labels expected for PROMPT
CASES = {"char": char_case, "wordpiece": bert_case, "byte-level-bpe": gpt2_case, "sentencepiece": llama2_case}


@pytest.fixture(scope="module", params=sorted(CASES))
def folder(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "model"
    return request.param, path, CASES[request.param](path)


def cut(label, width=12):
    """A label as the terminal fits it: at most `width` characters, the last '…' when cut."""
    return label if len(label) <= width else label[:width - 1] + "\u2026"


def terminal_row_labels(stdout, n):
    """The row labels of the one heatmap: the n lines above its legend, each
    label up to its first plain space (labels have none: spaces are '␣')."""
    lines = stdout.splitlines()
    legend = next(i for i, ln in enumerate(lines) if ln.startswith("0 ") and ln.rstrip().endswith("exactly 0)"))
    return [ln.split(" ", 1)[0] for ln in lines[legend - n:legend]]


def page_tokens(html):
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1)
    return json.loads(data)["tokens"]


def test_every_view_shows_the_text_each_token_stands_for(folder, tmp_path):
    name, path, want = folder
    png, page, npy = tmp_path / "a.png", tmp_path / "a.html", tmp_path / "w.npy"
    r = run_qkv("explain", "--model", path, "--prompt", PROMPT, "--layer", "0", "--head", "0", "--png", png,
                "--html", page, "--weights-npy", npy, "--no-color")
    assert r.returncode == 0, r.stderr
    for label in want:
        assert "\u0120" not in label and "\u2581" not in label, want  # no tokenizer's own space mark
    if name != "wordpiece":
        assert any(label.startswith("\u2423") for label in want), want
    assert terminal_row_labels(r.stdout, len(want)) == [cut(x) for x in want]
    assert page_tokens(page.read_text(encoding="utf-8")) == want
    # The PNG is the picture of exactly these labels, drawn as the library draws labels.
    weights = np.load(npy)[0, 0].astype(np.float64)
    assert png.read_bytes() == qkv.heatmap_png(weights, want, want, titles=["layer 0, head 0"], per_row=1)
    if name != "char":  # the library's labels are the command's (a character model's: its typed characters)
        assert qkv.Model.load(path).token_labels(PROMPT) == want


def test_each_kind_of_token_reads_as_its_text(folder):
    # GPT-2's "Ġis" and Llama 2's "▁is" are the same text and the same label;
    # a character split into bytes shows its bytes, never U+FFFD or '?'; a
    # WordPiece continuation keeps its "##".
    name, _, want = folder
    if name in ("byte-level-bpe", "sentencepiece"):
        assert "\u2423is" in want and "\u2423it" in want, want
        assert any("\\xc3" in x for x in want), want
        assert "\\n" in "".join(want) and "\\t" in "".join(want), want
    if name == "wordpiece":
        assert want[0] == "[CLS]" and want[-1] == "[SEP]" and any(x.startswith("##") for x in want), want
    assert not any("?" in x and x != "?" for x in want), want


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through Selenium, or a skip where either is missing."""
    webdriver = pytest.importorskip("selenium.webdriver")
    chrome, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chrome or not driver:
        pytest.skip("Chromium (chromium and chromium-driver) is needed to open the attention page")
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    d = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    yield d
    d.quit()


def test_the_page_shows_the_labels_and_every_weight_a_token_reads(folder, tmp_path, browser):
    name, path, want = folder
    page, npy = tmp_path / "a.html", tmp_path / "w.npy"
    r = run_qkv("explain", "--model", path, "--prompt", PROMPT, "--layer", "0", "--head", "0", "--html", page,
                "--weights-npy", npy)
    assert r.returncode == 0, r.stderr
    browser.get(page.as_uri())
    shown = browser.execute_script("return [...document.querySelectorAll('#prompt .tok')].map(e => e.textContent)")
    assert shown == want
    # The first token: a causal model's reads itself only, an encoder's (BERT's) every token.
    browser.execute_script("document.querySelectorAll('#prompt .tok')[0].focus()")
    texts = browser.execute_script("return [...document.querySelectorAll('.w')].map(e => e.textContent)")
    weights = np.load(npy)[0, 0, 0]
    if name == "wordpiece":
        np.testing.assert_allclose([float(t) for t in texts], weights, atol=6e-4)
    else:
        assert texts[1:] == [""] * (len(want) - 1), texts
