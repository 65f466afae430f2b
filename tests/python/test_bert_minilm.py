"""qkv.Model on the real all-MiniLM-L6-v2 weights against the libraries it
replaces: transformers' BertModel (eager attention) for the token ids, the
last hidden states and the attention maps; sentence-transformers' encode()
for the embeddings, at several batch sizes (so different padding on their
side); bfloat16 against float32; and the same forward in float64 against
BertModel in float64, where the two agree to rounding (1e-9)."""
import numpy as np
import pytest

import qkv
from qkv import _qkv

from bert_folders import auto_tokenizer, hf_ids, max_abs, minilm_dir, reference, texts

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

N_TEXTS = 56
MAX_LENGTH = 256  # sentence_bert_config.json's max_seq_length


@pytest.fixture(scope="module")
def folder():
    return minilm_dir()


@pytest.fixture(scope="module")
def model(folder):
    return qkv.Model.load(folder)


@pytest.fixture(scope="module")
def tokenizer(folder):
    return auto_tokenizer(folder)


@pytest.fixture(scope="module")
def bert(folder):
    return transformers.BertModel.from_pretrained(
        folder, attn_implementation="eager", torch_dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def corpus():
    return texts(N_TEXTS, seed=1)


def test_the_mix_of_texts_spans_short_to_truncated(corpus, tokenizer):
    lengths = [len(tokenizer(t)["input_ids"]) for t in corpus]
    assert min(lengths) == 2 and max(lengths) > 300
    assert sum(n > MAX_LENGTH for n in lengths) >= 3


def test_model_reads_the_folder(model):
    cfg = model.config
    assert cfg["architecture"] == "bert" and model.is_encoder
    assert (cfg["layers"], cfg["heads"], cfg["embd"], cfg["ffn"]) == (6, 12, 384, 1536)
    assert model.max_length == MAX_LENGTH


def test_token_ids_match_the_hf_tokenizer_truncated_to_256(model, tokenizer, corpus):
    for text in corpus:
        want = hf_ids(tokenizer, text, MAX_LENGTH)
        assert model.tokenize(text) == want, text[:80]
        assert model.tokens(text) == tokenizer.convert_ids_to_tokens(want)


def test_hidden_states_and_attention_match_bertmodel(model, bert, corpus):
    worst_h = worst_a = 0.0
    for text in corpus:
        ids = model.tokenize(text)
        want_h, want_a = reference(bert, ids, attentions=True)
        worst_h = max(worst_h, max_abs(model.hidden_states(ids), want_h))
        worst_a = max(worst_a, max_abs(model.attention_maps(ids), want_a))
    assert worst_h < 1e-4, worst_h
    assert worst_a < 1e-5, worst_a


def test_hidden_states_of_a_text_are_those_of_its_ids(model, corpus):
    np.testing.assert_array_equal(model.hidden_states(corpus[5]),
                                  model.hidden_states(model.tokenize(corpus[5])))


@pytest.fixture(scope="module")
def st_embeddings(folder, corpus):
    st = pytest.importorskip("sentence_transformers")
    encoder = st.SentenceTransformer(str(folder), device="cpu")
    return encoder.encode(corpus, batch_size=32, convert_to_numpy=True)


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_embeddings_match_sentence_transformers(model, corpus, st_embeddings, batch):
    got = model.embed(corpus, batch=batch)
    assert got.shape == (N_TEXTS, 384) and got.dtype == np.float32
    assert cosines(got, st_embeddings).min() >= 0.99999
    # The folder's Normalize module: unit vectors, as sentence-transformers gives.
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_bfloat16_embeddings_follow_float32(model, corpus):
    f32 = model.embed(corpus)
    bf16 = model.embed(corpus, dtype="bfloat16")
    assert cosines(bf16, f32).min() >= 0.9999
    assert not np.array_equal(bf16, f32)  # bf16 products really ran


def test_float64_forward_matches_bertmodel_in_float64(model, bert, corpus):
    """The model's weights (float32, widened) in qkv's forward in double and
    in BertModel.double(): the formulas agree to float64 rounding."""
    bert64 = transformers.BertModel.from_pretrained(
        minilm_dir(), attn_implementation="eager", torch_dtype=torch.float32).eval().double()
    for text in (corpus[1], corpus[3], corpus[7]):  # 3 tokens, 256 (cut), a middle one
        ids = model.tokenize(text)
        got = _qkv._testing.hidden_states_f64(model._m, ids)
        assert got.dtype == np.float64 and got.shape == (len(ids), 384)
        err = max_abs(got, reference(bert64, ids))
        assert err < 1e-9, (len(ids), err)


def test_one_model_shared_by_threads_gives_each_the_same_vectors(model):
    """A server's worker threads sharing one loaded Model (the GIL is released
    while it runs) must each get what a lone call gives, not vectors computed
    from another thread's activations."""
    import threading
    texts_ = ["hello world", "another one", "a third, longer sentence to embed"]
    expected = model.embed(texts_)
    wrong = []

    def worker():
        for _ in range(4):
            got = model.embed(texts_)
            if not np.allclose(got, expected, atol=1e-5):
                wrong.append(max_abs(got, expected))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_max_length_above_max_seq_length_follows_sentence_transformers(folder, model, corpus):
    # max_length 512 is what raising sentence-transformers' max_seq_length to
    # 512 gives (the model has 512 positions), not a silent cap at 256.
    st = pytest.importorskip("sentence_transformers")
    encoder = st.SentenceTransformer(str(folder), device="cpu")
    encoder.max_seq_length = 512
    long = [t for t in corpus if len(model.tokenize(t)) == MAX_LENGTH]
    assert long, "the corpus has texts cut at 256 tokens"
    want = encoder.encode(long, convert_to_numpy=True)
    got = model.embed(long, max_length=512)
    assert cosines(got, want).min() >= 0.99999
    assert cosines(model.embed(long), want).min() < 0.9999  # 256 tokens really differ
    with pytest.raises(ValueError, match="max_length 513 is more than the model's 512 positions"):
        model.embed(long, max_length=513)
