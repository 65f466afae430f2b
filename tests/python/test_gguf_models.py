"""GGUF files (llama.cpp's format) loaded as models: written from
transformers' random Llama, Qwen2 and GPT-2 models as llama.cpp's converter
writes them (gguf_files.py), then read by qkv.Model.load and
`qkv logits --model FILE.gguf`."""
import os
import re
import subprocess

import numpy as np
import pytest

import qkv
from qkv import _qkv

from gguf_files import SpmVocab, gguf, gpt2_gguf, gpt2_model, hf_folder, llama3_tokenizer, llama_gguf, llama_model, torch
from gpt2_folders import EOT, QKV_BIN, gpt2_tokenizer, qwen2_tokenizer, run_qkv, smollm_tokenizer

SHAKESPEARE = __import__("pathlib").Path(__file__).resolve().parents[3] / "shared" / "data" / "tinyshakespeare.txt"
PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed any further, hear me speak.",
           "  thou art 1234 <|endoftext|> my lord's!"]
# Q8_0 rounds each weight to 1/254 of its block's largest: the logits of
# these small random models move by about 1e-3; the bound leaves room.
Q8_TOLERANCE = 2e-2
# A quantized model's products round each activation to int8 in blocks
# (qkv/weight.h), as llama.cpp's do: against the same weights dequantized
# to float32, the logits move by this much of their largest magnitude.
ACTIVATION_TOLERANCE = 3e-2


def near_dequantized(got, want):
    """The quantized path's logits `got` against the dequantized model's:
    within ACTIVATION_TOLERANCE of the largest, and not the same bits (the
    quantized products ran)."""
    scale = np.abs(want).max()
    diff = np.abs(got - want).max()
    assert 0 < diff <= ACTIVATION_TOLERANCE * scale, (diff, scale)


@pytest.fixture(scope="module")
def gpt2_tok():
    return gpt2_tokenizer()


def hf_logits(ref, ids):
    with torch.no_grad():
        return ref(torch.tensor([ids])).logits[0].numpy()


# name -> the model's options: heads of 32 where hidden_size / heads is 16
# (attention.key_length), Qwen2's biases on q, k and v and its split.
CASES = {"llama-gqa": {}, "llama-tied": dict(tie_word_embeddings=True), "llama-wide-heads": dict(head_dim=32),
         "qwen2": dict(arch="qwen2", head_dim=32, rope_theta=1000000.0), "gpt2": None,
         # biases on q, k, v and o: a quantized file's q and k rows are then rearranged at load
         "llama-biased": dict(attention_bias=True),
         # Llama 3.1's scaling: the file holds a factor per frequency (rope_freqs.weight)
         "llama3-rope-scaling": dict(rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                       high_freq_factor=4.0, original_max_position_embeddings=16))}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, gpt2_tok, tmp_path_factory):
    """(path of the F32 file, the transformers model, the tokenizer, arch)."""
    path = tmp_path_factory.mktemp(request.param) / "model.gguf"
    if request.param == "gpt2":
        ref = gpt2_model(gpt2_tok)
        return gpt2_gguf(ref, path, gpt2_tok), ref, gpt2_tok, "gpt2"
    config = CASES[request.param]
    tok = qwen2_tokenizer(gpt2_tok) if config.get("arch") == "qwen2" else llama3_tokenizer(gpt2_tok)
    ref = llama_model(tok, **config)
    return llama_gguf(ref, path, tok), ref, tok, ref.config.model_type


def test_f32_logits_match_transformers(case):
    path, ref, tok, arch = case
    m = qkv.Model.load(path)
    assert m.config["architecture"] == arch
    for text in PROMPTS:
        ids = m.tokenize(text)
        assert ids == tok.encode(text).ids, text
        got, want = m.logits(ids), hf_logits(ref, ids)
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 1e-4, text


def test_greedy_tokens_match_transformers(case):
    path, ref, tok, _ = case
    m = qkv.Model.load(path)
    prompt = "ROMEO:"
    ids = tok.encode(prompt).ids
    with torch.no_grad():  # the mask said: the beginning-of-text token is the pad token here
        want = ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            do_sample=False, max_new_tokens=24,
                            pad_token_id=tok.token_to_id(EOT))[0, len(ids):].tolist()
    assert m.generate(prompt, tokens=24, temperature=0.0) == tok.decode(want)


def test_q8_0_logits_near_float32(case, tmp_path):
    path, ref, tok, arch = case
    q8 = tmp_path / "q8.gguf"
    if arch == "gpt2":
        gpt2_gguf(ref, q8, tok, qtype=gguf.GGMLQuantizationType.Q8_0)
    else:
        llama_gguf(ref, q8, tok, qtype=gguf.GGMLQuantizationType.Q8_0)
    assert q8.stat().st_size < path.stat().st_size / 2
    m32, m8, m8d = qkv.Model.load(path), qkv.Model.load(q8), qkv.Model.load(q8, dequantize=True)
    ids = m32.tokenize(PROMPTS[1])
    diff = np.abs(m8d.logits(ids) - m32.logits(ids)).max()
    assert 0 < diff < Q8_TOLERANCE
    near_dequantized(m8.logits(ids), m8d.logits(ids))
    # A llama file's q and k rows are held as the file orders them (RoPE's
    # pairs adjacent); widened to float32 (hidden_states_f64 reads the float
    # weights) they are transformers' order again, and the model runs as the
    # one loaded dequantized, bit for bit.
    want = _qkv._testing.hidden_states_f64(m8d._m, ids)
    np.testing.assert_array_equal(_qkv._testing.hidden_states_f64(m8._m, ids), want)
    np.testing.assert_array_equal(m8.logits(ids), m8d.logits(ids))
    assert m8.generate(PROMPTS[1], tokens=8, temperature=0.0) == m8d.generate(PROMPTS[1], tokens=8, temperature=0.0)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"])
def test_quantized_file_equals_the_float32_file_of_its_values(qtype, gpt2_tok, tmp_path):
    # The gguf package quantizes only some types: random blocks stand in (a
    # small scale d, and dmin, in every block), and the float32 file holds
    # what the package's dequantizer makes of them. Same weights, same logits.
    tok = llama3_tokenizer(gpt2_tok)
    ref = llama_model(tok, hidden_size=256, intermediate_size=256)
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    block, size = gguf.constants.GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(0)
    blocks, values = {}, {}
    for name, t in ref.state_dict().items():
        if t.ndim != 2:
            continue
        rows, cols = t.shape
        b = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
        # Q6_K's int8 scales reach 128 where the others' stay below 64:
        # a smaller d keeps its weights of the others' size.
        scale = np.frombuffer(np.float16(2e-5 if qtype == "Q6_K" else 3e-4).tobytes(), np.uint8)
        if qtype == "Q6_K":
            b[..., -2:] = scale
        elif qtype in ("Q4_K", "Q5_K", "Q5_1"):
            b[..., 0:2] = b[..., 2:4] = scale
        elif qtype in ("Q4_0", "Q5_0", "Q8_0"):
            b[..., 0:2] = scale
        elif qtype == "F16":  # values of about 1e-2, each of either sign
            b = (rng.standard_normal((rows, cols)) * 1e-2).astype(np.float16).view(np.uint8).reshape(rows, cols, 2)
        else:  # BF16: the same
            b = (rng.standard_normal((rows, cols)).astype(np.float32) * 1e-2).view(np.uint32) >> 16
            b = b.astype(np.uint16).view(np.uint8).reshape(rows, cols, 2)
        b = b.reshape(rows, -1)
        blocks[name], values[name] = (b, qt), gguf.quants.dequantize(b, qt)
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight"}
    gname = lambda n: names.get(n) or "blk.{}.{}.weight".format(n.split(".")[2], {
        "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output", "gate_proj": "ffn_gate",
        "up_proj": "ffn_up", "down_proj": "ffn_down"}[n.split(".")[4]])
    quantized = llama_gguf(ref, tmp_path / "q.gguf", tok, replace={gname(n): v for n, v in blocks.items()})
    wide = llama_gguf(ref, tmp_path / "f32.gguf", tok, replace={gname(n): v for n, v in values.items()})
    assert quantized.stat().st_size < wide.stat().st_size / 1.9
    mq, mqd, mf = qkv.Model.load(quantized), qkv.Model.load(quantized, dequantize=True), qkv.Model.load(wide)
    ids = mf.tokenize(PROMPTS[1])
    want = mf.logits(ids)
    assert np.isfinite(want).all() and want.std() > 1e-3
    np.testing.assert_array_equal(mqd.logits(ids), want)
    if qtype in ("F16", "BF16"):  # a file of float matrices runs the float32 GEMMs
        np.testing.assert_array_equal(mq.logits(ids), want)
    else:
        near_dequantized(mq.logits(ids), want)
        # hidden_states runs a batch's attention (packed sequences): q and k put back alike
        near_dequantized(mq.hidden_states(ids), mf.hidden_states(ids))
    # A prompt of 32 tokens and more runs the float32 GEMM on the weights
    # dequantized exactly, a chunk of rows at a time: the float32 model's
    # logits but for the order of its sums; or, where the path keeps the
    # type int8 for many rows (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K on AVX512-VNNI:
    # its panels), the int8 products.
    long_ids = mf.tokenize(PROMPTS[1] + " " + PROMPTS[1])
    assert 32 <= len(long_ids) <= 64
    want = mf.logits(long_ids)
    if qtype not in ("F16", "BF16") and _qkv._testing.weight_matmul_tiles(qtype):
        near_dequantized(mq.logits(long_ids), want)
    else:
        np.testing.assert_allclose(mq.logits(long_ids), want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_cli_logits_reads_a_gguf_file(case, tmp_path):
    path, ref, tok, _ = case
    out = tmp_path / "logits.npy"
    r = run_qkv("logits", "--model", path, "--prompt", "ROMEO:", "--out", out)
    assert r.returncode == 0, r.stderr
    ids = tok.encode("ROMEO:").ids
    assert np.abs(np.load(out).reshape(len(ids), -1) - hf_logits(ref, ids)).max() < 1e-4


def test_cli_tokenize_reads_a_gguf_file(case):
    path, _, tok, _ = case
    lines = ["ROMEO: the king", "  thou art 1234 <|endoftext|> my lord's!"]
    r = run_qkv("tokenize", "--model", path, "--input", "-", input="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    assert [[int(x) for x in line.split()] for line in r.stdout.splitlines()] == [tok.encode(t).ids for t in lines]


@pytest.fixture(scope="module")
def small_llama(gpt2_tok):
    tok = llama3_tokenizer(gpt2_tok)
    return llama_model(tok, hidden_size=32, intermediate_size=64), tok


BAD = {
    "missing tensor": (dict(skip={"blk.1.ffn_down.weight"}),
                       "the file has no tensor blk.1.ffn_down.weight"),
    "wrong shape": (dict(reshape={"blk.0.attn_k.weight": 8}),
                    "tensor blk.0.attn_k.weight should be [32, 16] (ne[0] first, from the metadata), found [32, 8]"),
    "unsupported pre-tokenizer": (dict(pre="deepseek-llm"),
                                  "metadata \"tokenizer.ggml.pre\": \"deepseek-llm\" is not supported (gpt-2, llama-bpe, qwen2, smollm)"),
    "rope scaling": (dict(metadata={"rope.scaling.type": "yarn"}),
                     "metadata \"llama.rope.scaling.type\": \"yarn\" is not supported (none, linear)"),
    "rope factors misshapen": (dict(extra={"rope_freqs.weight": np.ones(5, np.float32)}),
                               "tensor rope_freqs.weight should be F32 [4] (half a head), found F32 [5]"),
    "rope factors not positive": (dict(extra={"rope_freqs.weight": np.array([1, 2, 0, 8], np.float32)}),
                                  "tensor rope_freqs.weight holds 0.000000 (factors must be finite > 0)"),
    "unknown key": (dict(metadata={"expert_count": 8}),
                    "metadata \"llama.expert_count\" is not supported by qkv's llama model (it may change the maths)"),
}


def test_qwen2_files_carry_no_rope_factors(gpt2_tok, tmp_path):
    # llama.cpp reads rope_freqs.weight in llama files only.
    tok = qwen2_tokenizer(gpt2_tok)
    model = llama_model(tok, arch="qwen2", hidden_size=32, intermediate_size=64)
    path = llama_gguf(model, tmp_path / "q.gguf", tok, extra={"rope_freqs.weight": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match="tensor rope_freqs.weight is not part of qkv's qwen2 model"):
        qkv.Model.load(path)


@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_files_are_refused(bad, small_llama, tmp_path):
    model, tok = small_llama
    kw, message = BAD[bad]
    path = llama_gguf(model, tmp_path / "bad.gguf", tok, **kw)
    with pytest.raises(ValueError, match="^'.*bad.gguf': " + re.escape(message)):
        qkv.Model.load(path)
    r = run_qkv("logits", "--model", path, "--prompt", "a", "--out", tmp_path / "l.npy")
    assert r.returncode == 1
    assert r.stderr.startswith("qkv logits: error: '") and message in r.stderr, r.stderr


def rewrite_string(path, key, value, out):
    """`path` with the string metadata `key` set to `value`."""
    reader = gguf.GGUFReader(str(path))
    arch = value if key == "general.architecture" else reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        if field.name == key:
            w.add_string(key, value)
        elif vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(field.name, field.contents())
        else:
            w.add_key_value(field.name, field.contents(), vtype)
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.mark.parametrize("key,value,message", [
    ("general.architecture", "falcon",
     "metadata \"general.architecture\": \"falcon\" is not supported (qkv runs: gpt2, llama, qwen2)"),
    ("tokenizer.ggml.model", "bert",
     "metadata \"tokenizer.ggml.model\": \"bert\" is not supported (qkv reads \"gpt2\", byte-level BPE, "
     "and \"llama\", SentencePiece BPE)"),
])
def test_unsupported_architecture_and_tokenizer_are_named(key, value, message, small_llama, tmp_path):
    model, tok = small_llama
    good = llama_gguf(model, tmp_path / "good.gguf", tok)
    path = rewrite_string(good, key, value, tmp_path / "bad.gguf")
    with pytest.raises(ValueError, match=re.escape(message)):
        qkv.Model.load(path)
    r = run_qkv("logits", "--model", path, "--prompt", "a", "--out", tmp_path / "l.npy")
    assert r.returncode == 1 and message in r.stderr, r.stderr


SPM_TEXTS = ["ROMEO: the king's men", "  two  spaces, then\ttab", "First Citizen:\nBefore we proceed",
             "caf\u00e9 na\u00efve \u2014 \u4e2d\u6587 \U0001F600 qu\u2019il", "a", ""]


def test_sentencepiece_tokenizer_of_a_gguf_file(tmp_path):
    # A Llama 2 / TinyLlama / Mistral file's tokenizer: qkv's ids are those
    # of llama.cpp's algorithm on the file's pieces and scores, and decode
    # gives the text back (pieces the vocabulary lacks as byte pieces).
    text = open(SHAKESPEARE, encoding="utf-8").read()[:200_000] if SHAKESPEARE.exists() else " ".join(PROMPTS) * 50
    vocab = SpmVocab(text)
    model = llama_model(vocab, hidden_size=32, intermediate_size=64)
    path = llama_gguf(model, tmp_path / "spm.gguf", vocab)
    m = qkv.Model.load(path)
    for t in SPM_TEXTS + PROMPTS:
        ids = m.tokenize(t)
        assert ids == vocab.encode(t), t
        assert m.decode(ids[1:]) == t, t
    out = m.generate("ROMEO:", tokens=8, temperature=0.0)
    assert isinstance(out, str)
    r = run_qkv("tokenize", "--model", path, "--input", "-", input=SPM_TEXTS[0] + "\n")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == vocab.encode(SPM_TEXTS[0])


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_quantize_at_load_equals_the_gguf_file(arch, qtype, gpt2_tok, tmp_path):
    # A folder quantized as it is read holds the blocks the gguf package
    # (ggml's reference quantizer) writes to a file of the same weights: the
    # same logits, bit for bit, as that file's, whether the folder holds
    # float32 (GPT-2's Conv1D matrices stored [in, out]) or bf16 weights.
    gt = getattr(gguf.GGMLQuantizationType, qtype.upper())
    if arch == "gpt2":
        ref, tok = gpt2_model(gpt2_tok), gpt2_tok
        for p in ref.parameters():  # bf16's values, so that both folders hold the same weights
            p.data = p.data.bfloat16().float()
        wpe = ref.transformer.wpe.weight.detach().numpy()  # positions stay float32, as in the folder
        path = gpt2_gguf(ref, tmp_path / "q.gguf", tok, qtype=gt,
                         replace={"position_embd.weight": (wpe, gguf.GGMLQuantizationType.F32)})
    else:
        tok = llama3_tokenizer(gpt2_tok)
        ref = llama_model(tok)
        for p in ref.parameters():
            p.data = p.data.bfloat16().float()
        path = llama_gguf(ref, tmp_path / "q.gguf", tok, qtype=gt)
    # The file quantizes token_embd and every matrix; 1-D tensors stay F32.
    want = qkv.Model.load(path)
    for dtype in ("float32", "bfloat16"):
        folder = hf_folder(ref, tok, tmp_path / dtype, dtype)
        m = qkv.Model.load(folder, quantize=qtype)
        for text in PROMPTS[:2]:
            ids = want.tokenize(text)
            np.testing.assert_array_equal(m.logits(ids), want.logits(ids), err_msg=f"{dtype} {text}")
    out = tmp_path / "l.npy"
    r = run_qkv("logits", "--model", folder, "--quantize", qtype, "--prompt", PROMPTS[0], "--out", out)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(out), want.logits(want.tokenize(PROMPTS[0])))


def test_quantize_at_load_refusals(gpt2_tok, tmp_path):
    path = gpt2_gguf(gpt2_model(gpt2_tok), tmp_path / "m.gguf", gpt2_tok)
    with pytest.raises(ValueError, match="a GGUF file keeps its own weight types"):
        qkv.Model.load(path, quantize="q8_0")
    with pytest.raises(ValueError, match="quantize: expected None"):
        qkv.Model.load(path, quantize="q4_k")
    r = run_qkv("logits", "--model", path, "--quantize", "q8_0", "--prompt", "a", "--out", tmp_path / "l.npy")
    assert r.returncode == 2 and "--quantize: '" in r.stderr and "is a file" in r.stderr, r.stderr
    r = run_qkv("sample", "--model", path, "--quantize", "q5_0", "--prompt", "a")
    assert r.returncode == 2 and "--quantize" in r.stderr, r.stderr


def test_smollm_pre_tokenizer_is_read_and_written(gpt2_tok, tmp_path):
    # SmolLM's tokenizer.json: a Digits step (each digit a piece) before
    # GPT-2's ByteLevel split; llama.cpp's name for it is "smollm".
    tok = smollm_tokenizer(gpt2_tok)
    texts = PROMPTS + ["In 1234 years, 56 ships and \u0663\u0664 boats sailed 7.5 leagues", "x2y 99 2024-12-06"]
    model = llama_model(tok, hidden_size=32, intermediate_size=64)
    folder = hf_folder(model, tok, tmp_path / "smollm")
    for t in texts:
        assert qkv.Model.load(folder).tokenize(t) == tok.encode(t).ids, t
    written = tmp_path / "written.gguf"
    qkv.quantize(str(folder), str(written), "q8_0")
    fields = {k: v.contents() for k, v in gguf.GGUFReader(written).fields.items() if not k.startswith("GGUF.")}
    assert fields["tokenizer.ggml.pre"] == "smollm"
    converted = llama_gguf(model, tmp_path / "converted.gguf", tok, pre="smollm", add_bos=False)
    for path in (written, converted):
        m = qkv.Model.load(path)
        for t in texts:
            assert m.tokenize(t) == tok.encode(t).ids, (path, t)


def test_disabled_features_are_named(small_llama, tmp_path):
    # QKV_DISABLE turns the VNNI kernels off (the same products, AVX2's
    # kernels); a name it does not know is an error naming the variable.
    ref, tok = small_llama
    path = llama_gguf(ref, tmp_path / "q8.gguf", tok, qtype=gguf.GGMLQuantizationType.Q8_0)
    if not QKV_BIN.exists():
        pytest.skip(f"no qkv binary at {QKV_BIN}")
    outs = []
    for value in ("", "avx512_vnni"):
        out = tmp_path / f"logits{len(outs)}.npy"
        r = subprocess.run([str(QKV_BIN), "logits", "--model", str(path), "--prompt", "ROMEO:", "--out", str(out)],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, QKV_DISABLE=value))
        assert r.returncode == 0, r.stderr
        outs.append(np.load(out))
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=1e-4 * np.abs(outs[0]).max())
    r = subprocess.run([str(QKV_BIN), "logits", "--model", str(path), "--prompt", "ROMEO:", "--out", str(tmp_path / "x.npy")],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, QKV_DISABLE="vnni"))
    assert r.returncode == 1, r.stderr
    assert "QKV_DISABLE: expected a comma-separated list of avx512_vnni, found 'vnni' in 'vnni'" in r.stderr
