"""`qkv explain --model`: a trained model's attention weights, checked against
the checkpoint run independently in NumPy (gpt_reference.py), and the HTML
page checked in a real headless Chromium: hover each token, read the weights
the page shows, compare them with the model's."""
import os
import shutil
import struct

import numpy as np
import pytest

import tiny_models
from gpt_reference import Checkpoint

PROMPT = "the cat sat on a mat"


@pytest.fixture
def run(qkv_bin):
    return tiny_models.runner(qkv_bin)


@pytest.fixture(scope="module", params=sorted(tiny_models.VARIANTS))
def model(request, tmp_path_factory, qkv_bin):
    return tiny_models.trained(tmp_path_factory, qkv_bin, request.param)


@pytest.fixture(scope="module")
def learned(tmp_path_factory, qkv_bin):
    return tiny_models.trained(tmp_path_factory, qkv_bin, "learned")


def explain(run, model, tmp_path, *extra, prompt=PROMPT):
    npy = tmp_path / "weights.npy"
    r = run("explain", "--model", model, "--prompt", prompt, "--weights-npy", npy, "--no-color",
            *extra)
    assert r.returncode == 0, r.stderr
    return np.load(npy), r


def test_weights_equal_numpy_forward_of_the_checkpoint(model, run, tmp_path):
    ck = Checkpoint(model)
    weights, r = explain(run, model, tmp_path)
    truth, _ = ck.run(ck.encode(PROMPT))
    L, H, T = ck.cfg["layers"], ck.cfg["heads"], len(PROMPT)
    assert weights.shape == (L, H, T, T) and weights.dtype == np.float32
    # Layer 0 from the embeddings alone: LayerNorm, the c_attn split, RoPE when
    # on, the causal softmax. Later layers through the whole block in float64.
    np.testing.assert_allclose(weights[0], truth[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(weights, truth, atol=1e-4, rtol=0)
    assert np.all(weights[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)
    np.testing.assert_allclose(weights.sum(-1), 1, atol=1e-5)
    # Trained: a uniform causal row would give 1/(i+1) everywhere.
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    assert np.abs(truth - uniform).max() > 0.3
    for layer in range(L):
        for head in range(H):
            assert f"-- layer {layer}, head {head} --" in r.stdout
    assert "␣" in r.stdout  # spaces labelled visibly


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_layer_and_head_select_one_panel(learned, run, tmp_path):
    ck = Checkpoint(learned)
    truth, _ = ck.run(ck.encode(PROMPT))
    one, r = explain(run, learned, tmp_path, "--layer", "1", "--head", "0", "--png",
                     tmp_path / "one.png")
    assert one.shape == (1, 1, len(PROMPT), len(PROMPT))
    np.testing.assert_allclose(one[0, 0], truth[1, 0], atol=1e-4)
    assert r.stdout.count("-- layer") == 1 and "-- layer 1, head 0 --" in r.stdout
    assert "wrote 1 heatmap panel (1 layer x 1 head)" in r.stdout
    layer, _ = explain(run, learned, tmp_path, "--layer", "0")
    np.testing.assert_allclose(layer[0], truth[0], atol=1e-5)
    head, _ = explain(run, learned, tmp_path, "--head", "1")
    np.testing.assert_allclose(head[:, 0], truth[:, 1], atol=1e-4)
    # The grid: 2 layers x 2 heads is about as tall as wide; one panel is smaller.
    _, r = explain(run, learned, tmp_path, "--png", tmp_path / "grid.png")
    assert "wrote 4 heatmap panels (2 layers x 2 heads)" in r.stdout
    gw, gh = png_size(tmp_path / "grid.png")
    ow, oh = png_size(tmp_path / "one.png")
    assert gw > 1.5 * ow and gh > 1.5 * oh


def test_unseen_prompt_characters_reported_once(learned, run, tmp_path):
    prompt = "é the é cat ßé"
    for args in (["explain", "--model", learned, "--prompt", prompt],
                 ["logits", "--model", learned, "--prompt", prompt, "-o", tmp_path / "l.npy"],
                 ["sample", "--model", learned, "--prompt", prompt, "--tokens", "5"]):
        r = run(*args)
        assert r.returncode == 0, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert "warning: --prompt: 2 characters not in the model's vocabulary" in lines[0]
        assert lines[0].count("é") == 1 and lines[0].count("ß") == 1, lines[0]


# --- the HTML page in a real browser -------------------------------------------

def chromium():
    """A headless Chromium driven by Selenium; outside CI, a skip when absent."""
    def missing(what):
        message = (f"{what} is needed for the browser test of the attention page "
                   "(apt-get install chromium chromium-driver; pip install selenium)")
        if os.environ.get("CI"):
            pytest.fail(message + ", and CI must run it")
        pytest.skip(message)

    try:
        from selenium import webdriver
    except ImportError:
        missing("Python's selenium")
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver:
        missing("Chromium (chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


READ_WEIGHTS = """return [...document.querySelectorAll('.w')].map(e => [
    +e.dataset.layer, +e.dataset.head, +e.dataset.key, e.dataset.query, e.textContent]);"""


def shown_weights(driver):
    """{(layer, head, key): (query, text)} of every .w element on the page."""
    return {(l, h, k): (q, text) for l, h, k, q, text in driver.execute_script(READ_WEIGHTS)}


def test_page_shows_the_models_weights_on_hover(learned, run, tmp_path, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    ck = Checkpoint(learned)
    truth, _ = ck.run(ck.encode(PROMPT))
    page = tmp_path / "attention.html"
    exported, r = explain(run, learned, tmp_path, "--html", page)
    assert f"wrote the attention page to {page}" in r.stdout
    html = page.read_text()
    # Self-contained: nothing to fetch.
    for needle in ("http://", "https://", "<script src", "<link"):
        assert needle not in html, needle
    L, H, T = truth.shape[:3]

    browser.get(page.as_uri())
    tokens = browser.find_elements(By.CSS_SELECTOR, "#prompt .tok")
    assert [t.text for t in tokens] == [("␣" if c == " " else c) for c in PROMPT]
    titles = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".panel h2")]
    assert titles == [f"layer {l} · head {h}" for l in range(L) for h in range(H)]
    for i in [3, 0, T - 1, 7, 12, 1]:  # out of order: each hover must replace the last
        ActionChains(browser).move_to_element(tokens[i]).perform()
        assert browser.execute_script("return document.body.dataset.selected") == str(i)
        shown = shown_weights(browser)
        assert len(shown) == L * H * T
        for (l, h, k), (query, text) in shown.items():
            assert query == str(i)
            if k > i:  # a later token: causal, nothing to show
                assert text == "", (l, h, i, k, text)
                continue
            assert len(text.split(".")[1]) == 3, text
            value = float(text)
            # Three decimals of the model's weight: the page is the model.
            assert abs(value - truth[l, h, i, k]) <= 6e-4, (l, h, i, k, value, truth[l, h, i, k])
            assert abs(value - exported[l, h, i, k]) <= 6e-4
        row = np.array([[[float(shown[l, h, k][1]) for k in range(i + 1)] for h in range(H)]
                        for l in range(L)])
        np.testing.assert_allclose(row.sum(-1), 1, atol=(i + 1) * 6e-4)
        # Each panel's heatmap outlines the selected query's row.
        tops = browser.execute_script(
            "return [...document.querySelectorAll('.map .row')].map(e => e.style.top)")
        assert len(tops) == L * H
        assert all(abs(float(t.rstrip("%")) - 100 * i / T) < 1e-6 for t in tops), tops
    # The keyboard reaches the tokens too: focus selects.
    browser.execute_script("arguments[0].focus()", tokens[5])
    assert browser.execute_script("return document.body.dataset.selected") == "5"


def test_page_of_one_layer_names_it(learned, run, tmp_path, browser):
    ck = Checkpoint(learned)
    truth, _ = ck.run(ck.encode(PROMPT))
    page = tmp_path / "layer1.html"
    explain(run, learned, tmp_path, "--html", page, "--layer", "1")
    browser.get(page.as_uri())
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    tokens = browser.find_elements(By.CSS_SELECTOR, "#prompt .tok")
    ActionChains(browser).move_to_element(tokens[9]).perform()
    shown = shown_weights(browser)
    assert {l for l, _, _ in shown} == {1}
    for (l, h, k), (_, text) in shown.items():
        if k <= 9:
            assert abs(float(text) - truth[1, h, 9, k]) <= 6e-4
