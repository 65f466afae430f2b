"""GGUF files written at test time as llama.cpp's converter (convert_hf_to_gguf.py)
writes them, from transformers' random Llama, Qwen2 and GPT-2 models: its
tensor names, its metadata, its permutation of Llama's q and k rows (Qwen2's
stay as they are), the tokenizer from a `tokenizers` object or a
SentencePiece vocabulary; and the same models as Hugging Face folders."""
import json

import numpy as np
import pytest

from gpt2_folders import EOT

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

def llama3_tokenizer(tok):
    """`tok`'s vocabulary and merges with Llama 3's pre-tokenizer, merges
    ignored for whole words, and the beginning-of-text token in front (here
    <|endoftext|>), as Llama 3's tokenizer.json has them."""
    spec = json.loads(tok.to_str())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    spec["model"]["ignore_merges"] = True
    eot = tok.token_to_id(EOT)
    spec["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": EOT, "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                              "special_tokens": {EOT: {"id": EOT, "ids": [eot], "tokens": [EOT]}}}
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def add_tokenizer(w, tok, pre, add_bos):
    """The tokenizer metadata the converter writes for a byte-level BPE
    tokenizer, or for a SentencePiece one (an SpmVocab as `tok`)."""
    if isinstance(tok, SpmVocab):
        w.add_tokenizer_model("llama")
        w.add_token_list(tok.tokens)
        w.add_token_scores(tok.scores)
        w.add_token_types(tok.types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        return
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a.content for a in tok.get_added_tokens_decoder().values() if a.special}
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.token_to_id(EOT))
    w.add_eos_token_id(tok.token_to_id(EOT))
    w.add_add_bos_token(add_bos)


class SpmVocab:
    """A SentencePiece BPE vocabulary as llama.cpp's converter writes one
    from a tokenizer.model: <unk>, <s>, </s>, the 256 byte pieces <0xNN>,
    then pieces learned (by the tokenizers library's BPE trainer) on `text`,
    "▁" for a space; each piece's score is minus its id, as SentencePiece
    scores pieces by frequency."""

    def __init__(self, text, size=600):
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        t.train_from_iterator(text.splitlines(), trainers.BpeTrainer(
            vocab_size=size, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=100, show_progress=False))
        learned = sorted(t.get_vocab().items(), key=lambda kv: kv[1])
        self.tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        self.tokens += [p for p, _ in learned if p not in self.tokens]
        self.types = [2, 3, 3] + [6] * 256 + [1] * (len(self.tokens) - 259)
        self.scores = [0.0] * 259 + [-float(i) for i in range(259, len(self.tokens))]

    def get_vocab_size(self):
        return len(self.tokens)

    def encode(self, text):
        """llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm), plainly:
        "▁" in front and for each space, then, while some adjacent pair's
        union is a piece, the highest-scoring union merges (the leftmost of
        equals); a character that is no piece becomes its byte pieces.
        <s> in front; no text, no "▁"."""
        if not text:
            return [1]
        ids = {}
        for i, p in enumerate(self.tokens):
            ids.setdefault(p, i)
        sym = list("\u2581" + text.replace(" ", "\u2581"))
        while True:
            best = None
            for i in range(len(sym) - 1):
                u = sym[i] + sym[i + 1]
                if u in ids and ids[u] >= 259 and (best is None or self.scores[ids[u]] > self.scores[ids[best[1]]]):
                    best = (i, u)
            if best is None:
                break
            sym[best[0]:best[0] + 2] = [best[1]]
        out = [1]
        for p in sym:
            out += [ids[p]] if p in ids else [ids[f"<0x{b:02X}>"] for b in p.encode()]
        return out

    def hf_tokenizer(self, metaspace=False, byte_fallback=True):
        """The tokenizer.json transformers makes of such a vocabulary (as of
        Llama 2's or TinyLlama's tokenizer.model): BPE whose merges are every
        split of each piece into two pieces, by the piece's score; spaces as
        "▁" by the normalizer or (newer conversions) a Metaspace
        pre-tokenizer that does not split; <s> in front."""
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
        ids = {p: i for i, p in enumerate(self.tokens)}
        merges = []
        for i in sorted(range(len(self.tokens)), key=lambda i: -self.scores[i]):
            p = self.tokens[i]
            merges += sorted(((p[:k], p[k:]) for k in range(1, len(p)) if p[:k] in ids and p[k:] in ids),
                             key=lambda lr: (ids[lr[0]], ids[lr[1]]))
        t = Tokenizer(models.BPE(vocab=ids, merges=merges, unk_token="<unk>", byte_fallback=byte_fallback,
                                 fuse_unk=True))
        if metaspace:
            t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        else:
            t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)])
        t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        t.add_special_tokens(["<unk>", "<s>", "</s>"])
        return t


def permute(w, n_head):
    """LlamaModel.permute of convert_hf_to_gguf.py: each head's rows from
    RoPE's half-split pairs to adjacent ones."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, arch, tensors, metadata, tok, pre, add_bos, qtype=None, skip=(), reshape=None, replace=None,
               extra=None):
    """`tensors` (llama.cpp's names -> float32 arrays, PyTorch's shapes) and
    `metadata` (keys under ARCH.) to a GGUF file; 2-D tensors as `qtype` when
    given (1-D ones stay F32, as llama.cpp keeps norms). `replace` gives
    tensors other values: a float32 array, or (its blocks' bytes, ggml type).
    `skip` leaves tensors out, `reshape` changes them and `extra` adds more, for the tests of bad files."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in metadata.items():
        if isinstance(value, str):
            w.add_string(f"{arch}.{key}", value)
        elif isinstance(value, float):
            w.add_float32(f"{arch}.{key}", value)
        else:
            w.add_uint32(f"{arch}.{key}", value)
    add_tokenizer(w, tok, pre, add_bos)
    for name, a in {**tensors, **(extra or {})}.items():
        if name in skip:
            continue
        if replace and name in replace:
            a = replace[name]
            if isinstance(a, tuple):
                w.add_tensor(name, a[0], raw_dtype=a[1])
                continue
        a = np.ascontiguousarray(a, dtype=np.float32)
        if reshape and name in reshape:
            a = a[: reshape[name]]
        if qtype is not None and a.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama_model(tok, seed=0, arch="llama", **config):
    """A LlamaForCausalLM (or Qwen2ForCausalLM) of `config` with random
    weights, its norms (and Qwen2's biases) away from their start."""
    kw = dict(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rope_theta=500000.0,
              rms_norm_eps=1e-5, tie_word_embeddings=False, attn_implementation="eager")
    kw.update(config)
    torch.manual_seed(seed)
    if arch == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw)).eval()
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def rope_params(config):
    """RoPE's base and scaling: transformers 5 keeps them in rope_parameters, 4 beside them."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def rope_theta(config):
    return rope_params(config)["rope_theta"]


def llama3_rope_factors(config, head_dim):
    """Llama 3.1's scaling as the converter stores it (rope_freqs.weight):
    LlamaModel.generate_extra_tensors' factors, in float32 as torch makes them."""
    import math
    p = rope_params(config)
    freqs = 1.0 / (p["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    orig, lo, hi, factor = p["original_max_position_embeddings"], p["low_freq_factor"], p["high_freq_factor"], p["factor"]
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < orig / hi:
            out.append(1)
        elif wavelen > orig / lo:
            out.append(factor)
        else:
            smooth = (orig / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def llama_gguf(model, path, tok, **kw):
    """The converter's llama (or qwen2) file of `model`."""
    c = model.config
    arch = c.model_type
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    tensors = {}
    if rope_params(c).get("rope_type") == "llama3":
        tensors["rope_freqs.weight"] = llama3_rope_factors(c, head_dim)
    for name, t in model.state_dict().items():
        a = t.float().numpy()
        if name == "model.embed_tokens.weight":
            tensors["token_embd.weight"] = a
        elif name == "model.norm.weight":
            tensors["output_norm.weight"] = a
        elif name == "lm_head.weight":
            if not c.tie_word_embeddings:
                tensors["output.weight"] = a
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            if arch == "llama" and module == "self_attn.q_proj":
                a = permute(a, c.num_attention_heads)
            elif arch == "llama" and module == "self_attn.k_proj":
                a = permute(a, c.num_key_value_heads)
            tensors[f"blk.{layer}.{names[module]}.{kind}"] = a
    metadata = {"context_length": c.max_position_embeddings, "embedding_length": c.hidden_size,
                "block_count": c.num_hidden_layers, "feed_forward_length": c.intermediate_size,
                "attention.head_count": c.num_attention_heads, "attention.head_count_kv": c.num_key_value_heads,
                "attention.layer_norm_rms_epsilon": float(c.rms_norm_eps),
                "rope.freq_base": float(rope_theta(c))}
    if arch == "llama":
        metadata.update({"rope.dimension_count": head_dim, "vocab_size": c.vocab_size})
    if head_dim * c.num_attention_heads != c.hidden_size:
        metadata.update({"attention.key_length": head_dim, "attention.value_length": head_dim})
    metadata.update(kw.pop("metadata", {}))
    pre = kw.pop("pre", "llama-bpe" if arch == "llama" else "qwen2")
    return write_gguf(path, arch, tensors, metadata, tok, pre, kw.pop("add_bos", arch == "llama"), **kw)


def gpt2_gguf(model, path, tok, **kw):
    """The converter's gpt2 file of `model`: Conv1D weights transposed to
    [out, in], the head written as a copy of token_embd."""
    c = model.config
    names = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    tensors = {}
    for name, t in model.state_dict().items():
        a = t.float().numpy()
        if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight":
            continue
        if name == "transformer.wte.weight":
            tensors["token_embd.weight"] = tensors["output.weight"] = a
        elif name == "transformer.wpe.weight":
            tensors["position_embd.weight"] = a
        elif name.startswith("transformer.ln_f."):
            tensors["output_norm." + name.rsplit(".", 1)[1]] = a
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            if kind == "weight" and module in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                a = a.T
            tensors[f"blk.{layer}.{names[module]}.{kind}"] = a
    metadata = {"context_length": c.n_positions, "embedding_length": c.n_embd, "block_count": c.n_layer,
                "feed_forward_length": 4 * c.n_embd, "attention.head_count": c.n_head,
                "attention.layer_norm_epsilon": float(c.layer_norm_epsilon)}
    return write_gguf(path, "gpt2", tensors, metadata, tok, "gpt-2", False, **kw)


def gpt2_model(tok, seed=0):
    torch.manual_seed(seed)
    eot = tok.token_to_id(EOT)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=eot, eos_token_id=eot, attn_implementation="eager")).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model



def hf_folder(model, tok, path, dtype="float32", bos=EOT, eos=EOT):
    """`model` saved as a Hugging Face folder (its weights in `dtype`) with
    `tok`, whose special tokens tokenizer_config.json names `bos` and `eos`."""
    import safetensors.torch as st
    model.save_pretrained(path, safe_serialization=True)
    tensors = {k: v.to(getattr(torch, dtype)) for k, v in st.load_file(path / "model.safetensors").items()}
    st.save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": bos, "eos_token": eos}))
    return path


