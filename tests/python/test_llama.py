"""qkv.Model on Llama folders made by transformers at test time (random
weights, LlamaForCausalLM's layout: RMSNorm, SwiGLU, RoPE with its scalings,
GQA, tied and untied heads, the projections' biases, heads wider than
hidden_size / heads; MistralForCausalLM's sliding window; Qwen2ForCausalLM's
biases on q, k and v, its tokenizer's split and NFC normalizer) against transformers itself: logits (1e-4 in
float32, 1e-9 with both sides in float64), the KV-cache path, greedy
generation, the beginning-of-text token a tokenizer.json's template puts in
front, and the options qkv must refuse by name."""
import json

import numpy as np
import pytest

import qkv
from qkv import _qkv

from gpt2_folders import EOT, check_bf16_weights_held, gpt2_tokenizer, qwen2_tokenizer, run_qkv

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed any further, hear me speak.",
           "Héllo, 世界! 👍🏽  spaces   and\ttabs 12345"]

LLAMA3_SCALING = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=16)
# name -> LlamaConfig options (and how the folder is saved)
CONFIGS = {
    "mha-untied": dict(num_key_value_heads=4),
    "gqa-2-groups": dict(num_key_value_heads=2),
    "mqa-tied": dict(num_key_value_heads=1, tie_word_embeddings=True),
    "llama3-rope-scaling": dict(num_key_value_heads=2, rope_theta=500000.0, rope_scaling=LLAMA3_SCALING),
    "linear-rope-scaling": dict(rope_scaling=dict(rope_type="linear", factor=2.0), rms_norm_eps=1e-5),
    "bfloat16-file": dict(num_key_value_heads=2, dtype="bfloat16"),
    "float16-file": dict(dtype="float16"),
    "attention-bias": dict(num_key_value_heads=2, attention_bias=True),
    "mlp-bias-tied": dict(mlp_bias=True, tie_word_embeddings=True),
    # a window of 5 keys: the longer prompts and all 32 generated tokens see past it
    "mistral-window": dict(arch="mistral", num_key_value_heads=2, sliding_window=5,
                           attention_bias=True),  # which Mistral ignores, as transformers does
    # heads of 16 where hidden_size / heads is 8: the attention is 64 wide, o_proj [32, 64]
    "wide-heads": dict(num_key_value_heads=2, head_dim=16),
    "qwen2": dict(arch="qwen2", num_key_value_heads=2, rope_theta=1000000.0),
    # Qwen2 with narrow heads (4 of 4: the attention 16 wide) and a tied head
    "qwen2-narrow-heads-tied": dict(arch="qwen2", num_key_value_heads=1, head_dim=4, tie_word_embeddings=True),
}


@pytest.fixture(scope="module")
def tokenizer():
    return gpt2_tokenizer()


def llama_folder(path, tokenizer, dtype="float32", seed=0, arch="llama", **config):
    eot = tokenizer.token_to_id(EOT)
    kw = dict(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=56,
              num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
              bos_token_id=eot, eos_token_id=eot, tie_word_embeddings=False, attn_implementation="eager")
    kw.update(config)
    torch.manual_seed(seed)
    if arch == "mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**kw)).eval()
    elif arch == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw)).eval()
        tokenizer = qwen2_tokenizer(tokenizer)
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
    with torch.no_grad():  # norms away from their all-ones start, biases from zero
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    with torch.no_grad():  # the file's rounding in the reference's weights (not its buffers:
        for p in model.parameters():  # a bf16 RoPE inv_freq would be transformers' own error)
            p.copy_(p.to(getattr(torch, dtype)).float())
    model.save_pretrained(path, safe_serialization=True)
    if dtype != "float32":
        import safetensors.torch as st
        tensors = {k: v.to(getattr(torch, dtype)) for k, v in st.load_file(path / "model.safetensors").items()}
        st.save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": EOT, "eos_token": EOT}))
    return model


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "llama"
    ref = llama_folder(path, tokenizer, **CONFIGS[request.param])
    return qkv.Model.load(path), ref


def hf_logits(ref, ids, dtype=torch.float32):
    with torch.no_grad():
        return ref.to(dtype)(torch.tensor([ids])).logits[0].numpy()


def test_logits_match_transformers(pair):
    m, ref = pair
    for text in PROMPTS:
        ids = m.tokenize(text)
        got, want = m.logits(ids), hf_logits(ref, ids)
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 1e-4, text


def inv_freq64(config):
    """RoPE's frequencies in float64, as transformers' rope utilities define
    them (default, linear, llama3), which compute them in float32."""
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    # transformers 5 keeps theta and the scaling in rope_parameters
    s = getattr(config, "rope_parameters", None) or dict(config.rope_scaling or {}, rope_theta=config.rope_theta)
    f = 1.0 / s["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        f = f / s["factor"]
    elif kind == "llama3":
        orig, lo, hi = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"]
        wavelen = 2 * np.pi / f
        smooth = (orig / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * f / s["factor"] + smooth * f
        f = torch.where(wavelen > orig / lo, f / s["factor"], torch.where(wavelen < orig / hi, f, mid))
    return f


def test_float64_forward_matches_transformers_in_float64(pair, monkeypatch):
    # transformers computes RoPE's angles, cos and sin, RMSNorm and the
    # attention softmax in float32 whatever the model's dtype; with those in
    # float64 too (the same formulas), the two forwards agree to rounding.
    m, ref = pair
    rotary, inv = ref.model.rotary_emb, inv_freq64(ref.config)

    def rotary64(x, position_ids):
        emb = torch.cat([position_ids[..., None].double() * inv] * 2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def rmsnorm64(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))
    softmax = torch.nn.functional.softmax

    def softmax64(x, dim=None, dtype=None, **kw):  # eager attention's is float32 too
        return softmax(x, dim=dim, dtype=torch.float64 if x.dtype == torch.float64 else dtype, **kw)
    monkeypatch.setattr(rotary, "forward", rotary64)
    monkeypatch.setattr(type(ref.model.norm), "forward", rmsnorm64)
    monkeypatch.setattr(torch.nn.functional, "softmax", softmax64)
    head = ref.lm_head.weight.detach().double().numpy()
    for text in PROMPTS:
        ids = m.tokenize(text)
        got = _qkv._testing.hidden_states_f64(m._m, ids) @ head.T
        want = hf_logits(ref, ids, torch.float64)
        assert np.abs(got - want).max() < 1e-9, text
    ref.float()


def test_greedy_generation_matches_transformers(pair, tokenizer):
    m, ref = pair
    prompt = "ROMEO:"
    ids = tokenizer.encode(prompt).ids
    with torch.no_grad():
        want = ref.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=32,
                            pad_token_id=tokenizer.token_to_id(EOT))[0, len(ids):].tolist()
    # A bf16 folder computes in bf16 by default, the reference in float32 on
    # the same (bf16-valued) weights: float32 compute must give its tokens
    # exactly; bf16's may part from them only where two logits all but tie.
    exact = m.generate(prompt, tokens=32, temperature=0.0, dtype="float32")
    assert exact == tokenizer.decode(want)
    got = m._m.generate(prompt, 32, 0.0, 0, 1337, True, None, None, False, True, None)["ids"]
    if got != want:
        k = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        with torch.no_grad():
            logits = ref(torch.tensor([ids + want[:k]])).logits[0, -1]
        assert m.weights_dtype == "bf16", f"float32 weights part from transformers at token {k}"
        assert abs(float(logits[got[k]] - logits[want[k]])) < 1e-2, f"bf16 parts at token {k} without a tie"
    assert m.generate(prompt, tokens=32, temperature=0.0, use_cache=False) == m.generate(prompt, tokens=32,
                                                                                          temperature=0.0)


def test_template_puts_the_beginning_of_text_token_in_front(tokenizer, tmp_path):
    # Llama's tokenizer.json: "<|begin_of_text|> $A" (here the test vocabulary's
    # <|endoftext|>); tokenizers' encode() puts it in front, and so must qkv.
    from tokenizers import Tokenizer, processors
    tok = Tokenizer.from_str(tokenizer.to_str())
    bos = tok.token_to_id(EOT)
    tok.post_processor = processors.TemplateProcessing(single=f"{EOT} $A", special_tokens=[(EOT, bos)])
    path = tmp_path / "llama"
    ref = llama_folder(path, tok, num_key_value_heads=2)
    m = qkv.Model.load(path)
    for text in PROMPTS + [""]:
        assert m.tokenize(text) == tok.encode(text).ids, text
    ids = tok.encode("ROMEO:").ids
    assert ids[0] == bos
    assert np.abs(m.logits(ids) - hf_logits(ref, ids)).max() < 1e-4
    with torch.no_grad():
        want = ref.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=16,
                            pad_token_id=bos)[0, len(ids):].tolist()
    assert m.generate("ROMEO:", tokens=16, temperature=0.0) == tok.decode(want)
    # The command line reads prompts the same way.
    (tmp_path / "in.txt").write_text("ROMEO:\n", encoding="utf-8")
    r = run_qkv("tokenize", "--model", path, "--input", tmp_path / "in.txt")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(i) for i in ids]
    r = run_qkv("logits", "--model", path, "--prompt", "ROMEO:", "-o", tmp_path / "l.npy")
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "l.npy").shape[0] == len(ids)


def test_bf16_generation(tokenizer, tmp_path):
    # dtype="bf16" runs the products in bf16 on the KV-cache path too: its
    # greedy text departs from float32's somewhere over these prompts (it
    # would not, were bf16 ignored), and every entry point gives the same.
    path = tmp_path / "llama"
    llama_folder(path, tokenizer, num_key_value_heads=2)
    m = qkv.Model.load(path)
    f32 = [m.generate(p, tokens=32, temperature=0.0) for p in PROMPTS]
    bf16 = [m.generate(p, tokens=32, temperature=0.0, dtype="bf16") for p in PROMPTS]
    assert f32 != bf16
    assert bf16[0] == m.generate(PROMPTS[0], tokens=32, temperature=0.0, dtype="bfloat16")
    assert bf16[0] == "".join(m.stream(PROMPTS[0], tokens=32, temperature=0.0, dtype="bf16"))
    assert m.generate(PROMPTS[0], tokens=32, temperature=0.0) == f32[0]  # float32 again after bf16
    r = run_qkv("sample", "--model", path, "--prompt", PROMPTS[0], "--tokens", 32, "--temperature", 0,
                "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    assert r.stdout == PROMPTS[0] + bf16[0] + "\n"
    with pytest.raises(ValueError, match="dtype: expected 'float32', 'bf16' or 'bfloat16', found 'float16'"):
        m.generate("x", dtype="float16")
    assert m.weights_dtype == "float32"
    assert m.generate(PROMPTS[0], tokens=32, temperature=0.0, dtype=None) == f32[0]  # the weights' dtype
    with pytest.raises(TypeError, match="dtype: expected a str"):
        m.generate("x", dtype=16)
    r = run_qkv("sample", "--model", path, "--dtype", "f16")
    assert r.returncode == 2 and "--dtype" in r.stderr, r.stderr


def test_kv_cache_dtype(tokenizer, tmp_path):
    # bf16 products keep a bf16 KV cache unless told otherwise: with a
    # float32 one, attention reads unrounded keys, and the greedy text
    # departs somewhere over these prompts.
    path = tmp_path / "llama"
    llama_folder(path, tokenizer, num_key_value_heads=2)
    m = qkv.Model.load(path)
    bf16 = [m.generate(p, tokens=32, temperature=0.0, dtype="bf16") for p in PROMPTS]
    assert bf16 == [m.generate(p, tokens=32, temperature=0.0, dtype="bf16", kv_dtype="bfloat16")
                    for p in PROMPTS]
    mixed = [m.generate(p, tokens=32, temperature=0.0, dtype="bf16", kv_dtype="float32") for p in PROMPTS]
    assert mixed != bf16
    assert mixed[0] == "".join(m.stream(PROMPTS[0], tokens=32, temperature=0.0, dtype="bf16",
                                        kv_dtype="float32"))
    f32 = m.generate(PROMPTS[0], tokens=32, temperature=0.0)
    assert f32 == m.generate(PROMPTS[0], tokens=32, temperature=0.0, kv_dtype="float32")
    for dtype, kv, want in (("bf16", "float32", mixed[0]), ("float32", "auto", f32)):
        r = run_qkv("sample", "--model", path, "--prompt", PROMPTS[0], "--tokens", 32, "--temperature", 0,
                    "--dtype", dtype, "--kv-dtype", kv)
        assert r.returncode == 0, r.stderr
        assert r.stdout == PROMPTS[0] + want + "\n"
    with pytest.raises(ValueError, match="kv_dtype: expected 'float32', 'bf16' or 'bfloat16', found 'f16'"):
        m.generate("x", kv_dtype="f16")
    with pytest.raises(TypeError, match="kv_dtype: expected a str"):
        m.generate("x", kv_dtype=2)
    r = run_qkv("sample", "--model", path, "--kv-dtype", "float16")
    assert r.returncode == 2 and "--kv-dtype" in r.stderr, r.stderr


def test_bf16_folder_keeps_its_weights_in_bf16(tokenizer, tmp_path):
    # q, k and v of two key/value groups stacked, gate and up stacked, biases, an untied head
    path = tmp_path / "llama"
    llama_folder(path, tokenizer, dtype="bfloat16", num_key_value_heads=2, attention_bias=True)
    check_bf16_weights_held(path, tmp_path, PROMPTS, mapped=True)


# name -> (config.json edit, what the message must contain)
REFUSED = {
    "yarn": (dict(rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=10000.0)),
             "rope_parameters.rope_type \"yarn\" is not supported"),
    "two-rope-settings": (dict(rope_scaling=dict(rope_type="linear", factor=2.0)),
                          "both rope_scaling and rope_parameters are given"),
    "attention-bias-not-a-flag": (dict(attention_bias="yes"), "attention_bias must be true or false"),
    "attention-bias-absent": (dict(attention_bias=True), "has no tensor model.layers.0.self_attn."),
    "mlp-bias-absent": (dict(mlp_bias=True), "has no tensor model.layers.0.mlp."),
    "mistral-layer-types": (dict(model_type="mistral", layer_types=["sliding_attention", "full_attention"]),
                            "layer_types"),
    "mistral-window-zero": (dict(model_type="mistral", sliding_window=0), "sliding_window must be an integer >= 1"),
    "gelu": (dict(hidden_act="gelu"), "hidden_act \"gelu\""),
    "odd-head-dim": (dict(head_dim=7), "head_dim must be even"),
    "head-dim-against-q-proj": (dict(head_dim=16), "num_attention_heads, head_dim and hidden_size make"),
    "qwen2-sliding-window": (dict(model_type="qwen2", use_sliding_window=True), "use_sliding_window"),
    "kv-heads": (dict(num_key_value_heads=3), "num_key_value_heads 3 does not divide"),
    "wrong-kv-heads": (dict(num_key_value_heads=2), "num_key_value_heads and hidden_size make"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsupported_options_are_named(case, tokenizer, tmp_path):
    path = tmp_path / "llama"
    llama_folder(path, tokenizer, num_key_value_heads=4)
    j = json.loads((path / "config.json").read_text())
    j.update(REFUSED[case][0])
    (path / "config.json").write_text(json.dumps(j))
    with pytest.raises(ValueError) as e:
        qkv.Model.load(path)
    assert REFUSED[case][1] in str(e.value), str(e.value)


@pytest.mark.parametrize("config", ["mha-untied", "mlp-bias-tied", "attention-bias", "qwen2", "wide-heads"])
def test_size_counts_the_folders_parameters(config, tokenizer, tmp_path):
    # Llama's three MLP matrices, its head (tied or not) and its biases.
    path = tmp_path / "llama"
    ref = llama_folder(path, tokenizer, **CONFIGS[config])
    r = run_qkv("size", "--model", path, "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["arch"] == "llama"
    assert row["params"] == ref.num_parameters()


def test_qwen2_folder_tokenizes_as_tokenizers(tokenizer, tmp_path):
    # Qwen2's split (one digit a piece) and its NFC normalizer ("e" and a
    # combining accent become "é" before the split).
    path = tmp_path / "qwen2"
    llama_folder(path, tokenizer, **CONFIGS["qwen2"])
    tok = qwen2_tokenizer(tokenizer)
    m = qkv.Model.load(path)
    assert m.config["architecture"] == "qwen2" and m.config["head_dim"] == 8
    for text in PROMPTS + ["caf" + "e\u0301 1234567", "x" + "\u212b" + "y"]:
        assert m.tokenize(text) == tok.encode(text).ids, text
    assert m.tokenize("e\u0301") == m.tokenize("\u00e9") != tokenizer.encode("e\u0301").ids
