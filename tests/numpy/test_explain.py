"""`qkv explain`: every stage printed, weights consistent with NumPy, a PNG
with one panel per head."""
import json
import re
import struct

import numpy as np

import tiny_models
from reference import attention


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_explain_tokens_prints_every_stage(run, tmp_path):
    png = tmp_path / "attn.png"
    r = run("explain", "--tokens", "the cat sat on the mat", "--heads", "2", "--causal",
            "top-left", "--png", png, "--no-color")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for stage in ("token embeddings X", "projections: Q = X W_q", "-- head 0 --", "-- head 1 --",
                  "scores = q kᵀ · scale", "weights = softmax", "head output", "heads concatenated",
                  "output = concat · W_o", "MultiHeadAttention::forward gives the same output"):
        assert stage in out, stage
    for word in ("the", "cat", "sat", "on", "mat"):
        assert word in out
    assert "\x1b[" not in out  # --no-color
    diff = float(re.search(r"max \|diff\| = ([0-9.e+-]+)", out).group(1))
    assert diff < 1e-12
    width, height = png_size(png)
    assert width > 100 and height > 50
    assert "wrote 2 heatmap panels" in out


def test_explain_is_deterministic_and_seeded(run):
    a = run("explain", "--seed", "3", "--no-color").stdout
    b = run("explain", "--seed", "3", "--no-color").stdout
    c = run("explain", "--seed", "4", "--no-color").stdout
    assert a == b and a != c


def test_explain_npy_inputs_gqa(run, tmp_path):
    rng = np.random.default_rng(5)
    q = rng.normal(size=(4, 3, 8)).astype(np.float32)
    k = rng.normal(size=(2, 6, 8)).astype(np.float32)
    v = rng.normal(size=(2, 6, 8)).astype(np.float32)
    for name, a in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", a)
    png = tmp_path / "w.png"
    r = run("explain", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
            tmp_path / "v.npy", "--causal", "bottom-right", "--png", png, "--no-color")
    assert r.returncode == 0, r.stderr
    assert "-- head 3 (reads key/value head 1) --" in r.stdout
    assert "wrote 4 heatmap panels" in r.stdout
    # The printed weights of head 3 agree with NumPy (4 decimals).
    _, w, _ = attention(q, k, v, causal="bottom-right")
    block = r.stdout.split("-- head 3")[1].split("weights = softmax")[1].split("\n", 1)[1]
    rows = re.findall(r"\[\[?([^\]]+)\]", block)[:3]
    got = np.array([[float(x) for x in row.split()] for row in rows])
    np.testing.assert_allclose(got, w[3], atol=6e-5)
    png_size(png)


def test_explain_png_unwritable(run, tmp_path):
    r = run("explain", "--png", tmp_path / "missing" / "x.png", "--no-color")
    assert r.returncode == 1
    assert "cannot write" in r.stderr


def printed_matrix(text, title, head=0):
    """The matrix printed under the line starting with `title` in head `head`'s
    block, as a float array (NumPy's text, 4 decimals)."""
    block = text.split(f"-- head {head}")[1]
    lines = block.split("\n" + title, 1)[1].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.lstrip().startswith("["):
            break
        rows.append([float(x) for x in line.strip(" []").split()])
    return np.array(rows)


def save_bool(path, values):
    np.save(path, np.array(values, dtype=bool))
    return path


def test_explain_words_with_a_padding_mask(run, tmp_path):
    """Regression: the words form never loaded --mask and passed an empty
    tensor on, a SIGSEGV. Now one bool per word keeps every row off <pad>."""
    pad = save_bool(tmp_path / "pad.npy", [1, 1, 1, 0, 0])
    r = run("explain", "--tokens", "the cat sat <pad> <pad>", "--mask", pad, "--no-color")
    assert r.returncode == 0, r.stderr
    assert "mask: from --mask" in r.stdout
    for head in (0, 1):
        w = printed_matrix(r.stdout, "weights = softmax", head)
        assert w.shape == (5, 5)
        assert np.all(w[:, 3:] == 0)
        np.testing.assert_allclose(w.sum(axis=1), 1, atol=3e-4)
    # A full [T, T] mask works as well, and combines with --causal.
    full = save_bool(tmp_path / "full.npy", np.tril(np.ones((5, 5))) * [1, 1, 1, 0, 0])
    r = run("explain", "--tokens", "the cat sat <pad> <pad>", "--mask", full, "--causal",
            "top-left", "--no-color")
    assert r.returncode == 0, r.stderr
    w = printed_matrix(r.stdout, "weights = softmax")
    assert np.all(np.triu(w, 1) == 0) and np.all(w[:, 3:] == 0)


def test_explain_mask_alone_missing_file_is_an_error_not_a_crash(run, tmp_path):
    r = run("explain", "--mask", tmp_path / "m.npy")
    assert r.returncode == 1
    assert r.stderr.startswith("qkv explain: error: --mask: cannot open")


def test_explain_mask_that_does_not_fit_the_words(run, tmp_path):
    r = run("explain", "--tokens", "the cat sat", "--mask",
            save_bool(tmp_path / "pad.npy", [1, 1, 1, 0, 0]))
    assert r.returncode == 1
    assert "mask: expected a shape broadcastable to [2, 3, 3]" in r.stderr


def weights_by_word(run, sentence, *extra):
    """Head 0's weights as {(query word, key word): weight}."""
    r = run("explain", "--tokens", sentence, "--no-color", *extra)
    assert r.returncode == 0, r.stderr
    w = printed_matrix(r.stdout, "weights = softmax")
    words = sentence.split()
    return {(a, b): w[i, j] for i, a in enumerate(words) for j, b in enumerate(words)}


def test_word_order_matters_by_default(run):
    """Attention alone is order-blind: with --positions none, "man bites dog"
    gives "dog bites man"'s weights, rows and columns permuted. Positions are
    on by default, so the two sentences get different rows."""
    a = weights_by_word(run, "dog bites man", "--positions", "none")
    b = weights_by_word(run, "man bites dog", "--positions", "none")
    assert a == b
    a = weights_by_word(run, "dog bites man")
    b = weights_by_word(run, "man bites dog")
    assert max(abs(a[key] - b[key]) for key in a) > 0.01


def test_word_embedding_depends_on_the_word_only(run):
    """A word keeps its embedding whatever the sentence: its row of X is the
    same in "the cat" and "a cat"."""
    def x_rows(sentence):
        out = run("explain", "--tokens", sentence, "--positions", "none", "--no-color").stdout
        lines = out.split("token embeddings X")[1].splitlines()[1:]
        return [line.strip(" []") for line in lines if line.lstrip().startswith("[")]
    assert x_rows("the cat")[1] == x_rows("a cat")[1]
    assert x_rows("the cat")[0] != x_rows("a cat")[0]


def test_explain_d_k_scale_and_raw_scores(run):
    """The practice task on one's own words: d_k = 16 and no scaling."""
    r = run("explain", "--d-k", "16", "--scale", "1", "--raw-scores", "--no-color")
    assert r.returncode == 0, r.stderr
    assert "Q = X W_q [2, 4, 16]" in r.stdout
    assert "scale = 1.0" in r.stdout
    raw = printed_matrix(r.stdout, "raw scores = q kᵀ, before scaling")
    scaled = printed_matrix(r.stdout, "scores = q kᵀ · scale")
    np.testing.assert_array_equal(raw, scaled)
    w = printed_matrix(r.stdout, "weights = softmax")
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(w, e / e.sum(axis=1, keepdims=True), atol=2e-4)
    peak = r.stdout.split("-- head 0")[1].split("largest weight in each row: [")[1].split("]")[0]
    np.testing.assert_allclose([float(x) for x in peak.split()], w.max(axis=1), atol=1e-4)
    # The default scale is 1/sqrt(d_k): the same raw scores, divided by 4.
    r = run("explain", "--d-k", "16", "--raw-scores", "--no-color")
    np.testing.assert_allclose(printed_matrix(r.stdout, "scores = q kᵀ · scale"),
                               printed_matrix(r.stdout, "raw scores = q kᵀ") / 4, atol=1e-4)
    assert "max |diff| = 0)" in r.stdout or re.search(r"max \|diff\| = \d\.?\d*e-1\d", r.stdout)


def test_explain_rope_does_not_claim_a_comparison_it_cannot_make(run):
    r = run("explain", "--positions", "rope", "--no-color")
    assert r.returncode == 0, r.stderr
    assert "MultiHeadAttention::forward gives the same output" not in r.stdout
    assert "not compared with MultiHeadAttention::forward" in r.stdout


def test_model_labels_show_every_character_alike_in_terminal_and_page(qkv_bin, tmp_path_factory, tmp_path):
    # A character model's labels are the typed characters, each visible: the
    # space as '␣' (the mark every tokenizer's leading space gets), escapes
    # for a tab and a newline, the code point of what draws nothing (a
    # zero-width space, a combining accent cut from its letter).
    model = tiny_models.trained(tmp_path_factory, qkv_bin, "learned")
    prompt = "the cat\tsate\u0301\n\u200b a"
    want = ["t", "h", "e", "\u2423", "c", "a", "t", "\\t", "s", "a", "t", "e", "U+0301", "\\n", "U+200B",
            "\u2423", "a"]
    page = tmp_path / "a.html"
    r = tiny_models.runner(qkv_bin)("explain", "--model", model, "--prompt", prompt, "--layer", "0",
                                    "--head", "0", "--html", page, "--no-color")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    legend = next(i for i, ln in enumerate(lines) if ln.startswith("0 ") and "exactly 0" in ln)
    assert [ln.split(" ", 1)[0] for ln in lines[legend - len(want):legend]] == want, r.stdout
    data = re.search(r'id="data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S).group(1)
    assert json.loads(data)["tokens"] == want
