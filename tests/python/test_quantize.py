"""qkv quantize (and qkv.quantize): transformers-made GPT-2 and Llama folders
written as GGUF files of each mix, then read by the gguf package (the
types llama-quantize gives each tensor, the metadata llama.cpp reads) and
run by qkv: the Q8_0 and Q4_0 blocks are those the gguf package's reference
quantizer writes, a file's logits equal the folder's quantized at load, and
the K-quant mixes stay near the float weights."""
import numpy as np
import pytest

import qkv

from gpt2_folders import EOT, qwen2_tokenizer, run_qkv
from gguf_files import SpmVocab, gpt2_gguf, gpt2_model, hf_folder, llama3_rope_factors, llama3_tokenizer, llama_gguf, llama_model
from test_gguf_models import ACTIVATION_TOLERANCE, PROMPTS, SHAKESPEARE, SPM_TEXTS

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
QT = gguf.GGMLQuantizationType

MIXES = ["q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"]
BASE = {"q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_k_m": QT.Q4_K, "q5_k_m": QT.Q5_K, "q6_k": QT.Q6_K}
FILE_TYPE = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}
# Rows of 256 (the K-quants' block) and 8 layers, so that the _M mixes'
# layer pattern (more bits in layers 0, 3, 6 and 7 of 8) shows.
LLAMA = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=8, num_attention_heads=4,
             num_key_value_heads=2)


def more_bits(layer, layers):
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def expected_type(mix, name, shape, layers, tied):
    """llama-quantize's choice without an importance matrix (llama-quant.cpp),
    and its fallback where a row is not whole blocks of that type."""
    if len(shape) < 2 or name.endswith("_norm.weight") or name == "position_embd.weight":
        return QT.F32
    t = BASE[mix]
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        t = QT.Q8_0 if t == QT.Q8_0 else QT.Q6_K
    elif mix in ("q4_k_m", "q5_k_m") and any(k in name for k in ("attn_v.", "attn_qkv.", "ffn_down.")):
        if more_bits(int(name.split(".")[1]), layers):
            t = QT.Q6_K
    if shape[0] % gguf.constants.GGML_QUANT_SIZES[t][0]:
        t = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}.get(t, t)
    return t


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, gpt2_tok):
    tok = llama3_tokenizer(gpt2_tok)
    model = llama_model(tok, **LLAMA)
    path = hf_folder(model, tok, tmp_path_factory.mktemp("llama") / "folder")
    return model, tok, path


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory, gpt2_tok):
    """Qwen2: biases on q, k and v, heads of 96 (hidden_size / heads is 64)."""
    tok = qwen2_tokenizer(gpt2_tok)
    model = llama_model(tok, arch="qwen2", head_dim=96, **LLAMA)
    path = hf_folder(model, tok, tmp_path_factory.mktemp("qwen2") / "folder")
    return model, tok, path


@pytest.fixture(scope="module")
def gpt2_tok():
    from gpt2_folders import gpt2_tokenizer
    return gpt2_tokenizer()


def quantize_cli(folder, out, mix):
    r = run_qkv("quantize", "--model", folder, "--type", mix, "-o", out, "--quiet")
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("mix", MIXES)
def test_each_mix_gives_llama_quantizes_types(mix, llama_dir, tmp_path):
    model, tok, folder = llama_dir
    out = tmp_path / f"m.{mix}.gguf"
    r = quantize_cli(folder, out, mix)
    assert f"wrote {out}: {mix}" in r.stdout
    f = gguf.GGUFReader(out)
    tensors = {t.name: t for t in f.tensors}
    assert len(tensors) == 2 + 8 * 9 + 1  # embedding, output norm, head; 9 per block
    for name, t in tensors.items():
        want = expected_type(mix, name, list(t.shape), 8, tied=False)
        assert t.tensor_type == want, (name, t.tensor_type.name, want.name)
    fields = {k: v.contents() for k, v in f.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "llama" and fields["general.file_type"] == FILE_TYPE[mix]
    assert fields["llama.block_count"] == 8 and fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.rope.freq_base"] == pytest.approx(500000.0)
    assert fields["tokenizer.ggml.pre"] == "llama-bpe" and fields["tokenizer.ggml.add_bos_token"] is True
    assert fields["tokenizer.ggml.tokens"][:5] == [tok.id_to_token(i) for i in range(5)]


@pytest.mark.parametrize("mix", ["q4_k_m", "q5_k_m", "q6_k"])
def test_qwen2_rows_that_are_not_whole_super_blocks_fall_back(mix, qwen2_dir, tmp_path):
    # Heads of 96: attn_output's rows of 384 are not whole blocks of 256, and
    # take llama-quantize's fallback (Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for
    # Q6_K); the file runs near the folder's float weights.
    model, tok, folder = qwen2_dir
    out = tmp_path / f"m.{mix}.gguf"
    quantize_cli(folder, out, mix)
    f = gguf.GGUFReader(out)
    assert f.fields["general.architecture"].contents() == "qwen2"
    types = {t.name: t.tensor_type for t in f.tensors}
    for t in f.tensors:
        assert t.tensor_type == expected_type(mix, t.name, list(t.shape), 8, tied=False), t.name
    assert types["blk.0.attn_output.weight"] == {"q4_k_m": QT.Q5_0, "q5_k_m": QT.Q5_1, "q6_k": QT.Q8_0}[mix]
    assert "blk.0.attn_q.bias" in types and "blk.0.attn_output.bias" not in types
    m, deq, ref = qkv.Model.load(out), qkv.Model.load(out, dequantize=True), qkv.Model.load(folder)
    ids = ref.tokenize(PROMPTS[1])
    want, exact = ref.logits(ids), deq.logits(ids)
    # These random weights lose 4% (Q6_K) to 16% (Q4_K) of the logits' largest
    # magnitude; the products on int8 activations stay near the dequantized model's.
    assert np.abs(exact - want).max() < 0.2 * np.abs(want).max()
    got = m.logits(ids)
    assert 0 < np.abs(got - exact).max() <= ACTIVATION_TOLERANCE * np.abs(exact).max()


def test_llama3_rope_scaling_is_written_as_rope_freqs(gpt2_tok, tmp_path):
    # Llama 3.1's scaling goes into the file as the converter stores it: a
    # factor per frequency, which qkv and llama.cpp divide the frequencies by.
    tok = llama3_tokenizer(gpt2_tok)
    scaling = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64)
    model = llama_model(tok, hidden_size=256, intermediate_size=256, rope_scaling=scaling)
    folder = hf_folder(model, tok, tmp_path / "folder")
    out = tmp_path / "m.gguf"
    quantize_cli(folder, out, "q8_0")
    tensors = {t.name: t for t in gguf.GGUFReader(out).tensors}
    factors = tensors["rope_freqs.weight"]
    assert factors.tensor_type == QT.F32
    want = llama3_rope_factors(model.config, 256 // 4)
    np.testing.assert_array_equal(np.asarray(factors.data), want)  # the converter's float32 bits
    assert want.min() == 1 and want.max() == 8 and len(set(want.tolist())) > 2  # kept, stretched, blended
    m, ref = qkv.Model.load(out), qkv.Model.load(folder, quantize="q8_0")
    ids = ref.tokenize(PROMPTS[1] + " " + PROMPTS[1])
    want_logits = ref.logits(ids)
    np.testing.assert_allclose(m.logits(ids), want_logits, rtol=0, atol=1e-4 * np.abs(want_logits).max())


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_q8_0_and_q4_0_blocks_are_the_gguf_packages(arch, llama_dir, qwen2_dir, gpt2_tok, tmp_path):
    # The converter's tensors quantized by the gguf package (its reference
    # quantizers, llama's q and k rows permuted as the converter permutes
    # them): every tensor of the same type holds the same bytes.
    if arch != "gpt2":
        model, tok, folder = llama_dir if arch == "llama" else qwen2_dir
        make = llama_gguf
    else:
        model, tok = gpt2_model(gpt2_tok), gpt2_tok
        folder = hf_folder(model, tok, tmp_path / "folder")
        make = gpt2_gguf
    for mix in ("q8_0", "q4_0"):
        ours = gguf.GGUFReader(quantize_cli(folder, tmp_path / f"{mix}.gguf", mix) and tmp_path / f"{mix}.gguf")
        theirs = gguf.GGUFReader(make(model, tmp_path / f"ref.{mix}.gguf", tok, qtype=BASE[mix]))
        assert ours.fields["general.architecture"].contents() == arch
        ref = {t.name: t for t in theirs.tensors}
        # (the helper writes GPT-2's tied head a second time, as older converters did)
        assert {t.name for t in ours.tensors} == set(ref) - ({"output.weight"} if arch == "gpt2" else set())
        # The helper quantizes every matrix; the mixes keep position_embd
        # F32 and make the head (or GPT-2's tied table) Q6_K in q4_0.
        skipped = set()
        for t in ours.tensors:
            if t.tensor_type != ref[t.name].tensor_type:
                skipped.add(t.name)
                continue
            assert np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(ref[t.name].data).view(np.uint8)), t.name
        assert skipped <= {"output.weight", "token_embd.weight", "position_embd.weight"}, skipped


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("mix", ["q8_0", "q4_0"])
def test_a_written_file_runs_as_the_folder_quantized_at_load(mix, arch, llama_dir, qwen2_dir, tmp_path):
    model, tok, folder = llama_dir if arch == "llama" else qwen2_dir
    out = quantize_cli(folder, tmp_path / "m.gguf", mix) and tmp_path / "m.gguf"
    want = qkv.Model.load(folder, quantize=mix)
    got = qkv.Model.load(out)
    for text in PROMPTS[:2]:
        ids = want.tokenize(text)
        assert got.tokenize(text) == ids
        if mix == "q8_0":  # the same blocks everywhere (q4_0's head is Q6_K in the file)
            np.testing.assert_array_equal(got.logits(ids), want.logits(ids), err_msg=text)


def test_k_mixes_run_near_the_float_model(llama_dir, tmp_path):
    # Each file's logits against its own weights dequantized (the int8
    # activations' rounding, as in llama.cpp's products) and against the
    # float32 folder (the weights' rounding): relative L2 errors. These
    # random 8-layer weights measured 0.17 (Q4_K_M), 0.11 (Q5_K_M) and 0.05
    # (Q6_K); more bits must give less error.
    model, tok, folder = llama_dir
    ref = qkv.Model.load(folder)
    ids = ref.tokenize(PROMPTS[1])
    want = ref.logits(ids)
    errors = {}
    for mix, bound in (("q4_k_m", 0.25), ("q5_k_m", 0.16), ("q6_k", 0.08)):
        out = quantize_cli(folder, tmp_path / f"{mix}.gguf", mix) and tmp_path / f"{mix}.gguf"
        q, deq = qkv.Model.load(out), qkv.Model.load(out, dequantize=True)
        lq, ld = q.logits(ids), deq.logits(ids)
        assert np.abs(lq - ld).max() <= ACTIVATION_TOLERANCE * np.abs(ld).max()
        errors[mix] = np.linalg.norm(ld - want) / np.linalg.norm(want)
        assert 0 < errors[mix] <= bound, (mix, errors[mix])
        assert isinstance(q.generate("ROMEO:", tokens=4, temperature=0.0), str)
    assert errors["q6_k"] < errors["q5_k_m"] < errors["q4_k_m"], errors


def test_gpt2_with_its_tied_head(gpt2_tok, tmp_path):
    model = gpt2_model(gpt2_tok)
    folder = hf_folder(model, gpt2_tok, tmp_path / "folder")
    out = quantize_cli(folder, tmp_path / "m.gguf", "q8_0") and tmp_path / "m.gguf"
    f = gguf.GGUFReader(out)
    names = {t.name: t.tensor_type for t in f.tensors}
    assert "output.weight" not in names and names["token_embd.weight"] == QT.Q8_0
    assert names["position_embd.weight"] == QT.F32 and names["blk.0.attn_qkv.bias"] == QT.F32
    fields = {k: v.contents() for k, v in f.fields.items() if not k.startswith("GGUF.")}
    assert fields["tokenizer.ggml.pre"] == "gpt-2" and fields["tokenizer.ggml.eos_token_id"] == gpt2_tok.token_to_id(EOT)
    want, got = qkv.Model.load(folder, quantize="q8_0"), qkv.Model.load(out)
    ids = want.tokenize(PROMPTS[2])
    assert got.tokenize(PROMPTS[2]) == ids
    np.testing.assert_array_equal(got.logits(ids), want.logits(ids))


def test_a_gguf_file_quantized_again_keeps_its_metadata(llama_dir, tmp_path):
    model, tok, folder = llama_dir
    first = quantize_cli(folder, tmp_path / "a.gguf", "q8_0") and tmp_path / "a.gguf"
    tensors = qkv.quantize(first, tmp_path / "b.gguf", "q6_k")
    assert ("output.weight", [256, tok.get_vocab_size()], "Q6_K") in tensors
    a, b = gguf.GGUFReader(first), gguf.GGUFReader(tmp_path / "b.gguf")
    fa = {k: v.contents() for k, v in a.fields.items() if not k.startswith("GGUF.")}
    fb = {k: v.contents() for k, v in b.fields.items() if not k.startswith("GGUF.")}
    assert fb.pop("general.file_type") == 18 and fa.pop("general.file_type") == 7
    assert fa == fb
    assert {t.name: t.tensor_type.name for t in b.tensors} == {n: t for n, _, t in tensors}
    got, want = (run_qkv("tokenize", "--model", m, "--input", "-", input="\n".join(PROMPTS) + "\n")
                 for m in (tmp_path / "b.gguf", folder))
    assert got.returncode == 0 and got.stdout == want.stdout, got.stderr


def test_a_q8_0_file_quantized_again_keeps_its_blocks(llama_dir, tmp_path):
    # Q8_0 values quantized to Q8_0 are the same blocks: what qkv reads of a
    # file (a llama's q and k rows held in the file's order, read back in
    # transformers') is what it writes, in the converter's order again.
    _, _, folder = llama_dir
    first = quantize_cli(folder, tmp_path / "a.gguf", "q8_0") and tmp_path / "a.gguf"
    qkv.quantize(first, tmp_path / "b.gguf", "q8_0")
    a, b = ({t.name: t for t in gguf.GGUFReader(f).tensors} for f in (first, tmp_path / "b.gguf"))
    assert a.keys() == b.keys() and "blk.0.attn_q.weight" in a
    for name, t in a.items():
        assert b[name].tensor_type == t.tensor_type, name
        np.testing.assert_array_equal(b[name].data, t.data, err_msg=name)


def test_refusals_name_the_problem(llama_dir, tmp_path):
    model, tok, folder = llama_dir
    r = run_qkv("quantize", "--model", folder, "--type", "q3_k", "-o", tmp_path / "m.gguf")
    assert r.returncode == 2 and "--type" in r.stderr and "q4_k_m" in r.stderr, r.stderr
    r = run_qkv("quantize", "--model", folder, "--type", "q8_0", "-o", folder / "m.gguf")
    assert r.returncode == 2 and "--model" in r.stderr, r.stderr
    assert not (folder / "m.gguf").exists()
    (tmp_path / "dir").mkdir()
    r = run_qkv("quantize", "--model", folder, "--type", "q8_0", "-o", tmp_path / "dir")
    assert r.returncode == 1 and "directory" in r.stderr, r.stderr
    r = run_qkv("quantize", "--model", tmp_path / "missing", "--type", "q8_0", "-o", tmp_path / "m.gguf")
    assert r.returncode == 1 and "missing" in r.stderr, r.stderr
    with pytest.raises(ValueError, match="unknown type"):
        qkv.quantize(folder, tmp_path / "m.gguf", "q2_k")
    assert not (tmp_path / "m.gguf").exists()


def test_models_gguf_cannot_describe_are_refused(gpt2_tok, tmp_path):
    from test_llama import llama_folder
    mistral = tmp_path / "mistral"
    mistral.mkdir()
    llama_folder(mistral, gpt2_tok, arch="mistral", num_key_value_heads=2, sliding_window=5)
    r = run_qkv("quantize", "--model", mistral, "--type", "q8_0", "-o", tmp_path / "m.gguf")
    assert r.returncode == 1 and "sliding-window" in r.stderr, r.stderr
    assert not (tmp_path / "m.gguf").exists()
    # llama.cpp reads Llama 3.1's rope_freqs in llama files only
    qwen2 = tmp_path / "qwen2"
    qwen2.mkdir()
    llama_folder(qwen2, gpt2_tok, arch="qwen2", num_key_value_heads=2,
                 rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                   original_max_position_embeddings=16))
    r = run_qkv("quantize", "--model", qwen2, "--type", "q8_0", "-o", tmp_path / "m.gguf")
    assert r.returncode == 1 and "Qwen2 with Llama 3.1's RoPE scaling" in r.stderr, r.stderr
    chars = tmp_path / "chars"
    (tmp_path / "t.txt").write_text("hello world " * 50)
    r = run_qkv("train", "--text", tmp_path / "t.txt", "--out", chars, "--iters", "1", "--layers", "1", "--embd",
                "32", "--heads", "2", "--context", "8", "--batch", "2", "--eval-iters", "1", "--no-progress")
    assert r.returncode == 0, r.stderr
    r = run_qkv("quantize", "--model", chars, "--type", "q8_0", "-o", tmp_path / "m.gguf")
    assert r.returncode == 1 and "character-level" in r.stderr, r.stderr


@pytest.mark.parametrize("metaspace", [False, True])
def test_a_sentencepiece_folder_gets_gguf_llama_tokenizer(metaspace, tmp_path):
    # A Llama 2 / TinyLlama / Mistral folder: its tokenizer.json (SentencePiece
    # BPE as transformers converts it) becomes GGUF's "llama" model, a score
    # for each piece, which llama.cpp's algorithm (SpmVocab.encode) and qkv
    # tokenize as the folder's tokenizer does.
    text = open(SHAKESPEARE, encoding="utf-8").read()[:200_000] if SHAKESPEARE.exists() else " ".join(PROMPTS) * 50
    vocab = SpmVocab(text)
    tok = vocab.hf_tokenizer(metaspace=metaspace)
    texts = SPM_TEXTS + PROMPTS
    # The folder's ids, as SentencePiece's: but a Metaspace pre-tokenizer puts
    # no "▁" in front of a text that starts with a space, where SentencePiece
    # (and so GGUF's add_space_prefix, as llama.cpp's converter writes it too)
    # always does.
    want = {t: vocab.encode(t) if metaspace and t.startswith(" ") else tok.encode(t).ids for t in texts}
    assert all(want[t] == vocab.encode(t) for t in texts)
    folder = hf_folder(llama_model(vocab), tok, tmp_path / "folder", bos="<s>", eos="</s>")
    out = tmp_path / "m.gguf"
    quantize_cli(folder, out, "q8_0")
    fields = gguf.GGUFReader(out).fields
    assert fields["tokenizer.ggml.model"].contents() == "llama"
    assert fields["tokenizer.ggml.tokens"].contents() == vocab.tokens
    assert fields["tokenizer.ggml.token_type"].contents() == vocab.types
    assert fields["tokenizer.ggml.add_space_prefix"].contents() is True
    assert fields["tokenizer.ggml.bos_token_id"].contents() == 1
    assert "tokenizer.ggml.merges" not in fields
    # llama.cpp's algorithm on the file's pieces and scores gives the folder's ids
    written = SpmVocab.__new__(SpmVocab)
    written.tokens, written.scores = vocab.tokens, fields["tokenizer.ggml.scores"].contents()
    m = qkv.Model.load(out)
    for t in texts:
        assert written.encode(t) == want[t], t
        assert m.tokenize(t) == want[t], t
        assert m.decode(want[t][1:]) == t, t


def test_a_sentencepiece_folder_without_byte_fallback_is_refused(tmp_path):
    # llama.cpp's SentencePiece falls back to byte pieces; a tokenizer that
    # gives <unk> instead would tokenize differently there.
    vocab = SpmVocab(" ".join(PROMPTS) * 50)
    folder = hf_folder(llama_model(vocab), vocab.hf_tokenizer(byte_fallback=False), tmp_path / "folder",
                       bos="<s>", eos="</s>")
    r = run_qkv("quantize", "--model", folder, "--type", "q8_0", "-o", tmp_path / "m.gguf")
    assert r.returncode == 1 and "SentencePiece BPE with byte fallback" in r.stderr, r.stderr
    assert not (tmp_path / "m.gguf").exists()
