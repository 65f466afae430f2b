"""Generated text as a user reads it, on folders made by transformers with
random weights: the streamed pieces are exactly the decoded ids (byte-level
BPE, and SentencePiece's byte-fallback BPE, where a later byte token changes
how earlier ones decode), in the Python API and in `qkv sample`; the
end-of-text token is not text; ids past the tokenizer's vocabulary are never
drawn; and the context limit is never silent."""
import json
import warnings

import pytest

import qkv

from gpt2_folders import EOT, gpt2_folder, gpt2_tokenizer, run_qkv, training_lines

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tk = pytest.importorskip("tokenizers")

PROMPT = "Héllo, wörld"


def llama2_tokenizer(tmp):
    """Llama 2's layout: "▁" for spaces, the 256 <0xNN> byte tokens that spell
    any character the (small) vocabulary lacks, and its decoder."""
    tok = tk.Tokenizer(tk.models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = tk.trainers.BpeTrainer(vocab_size=300, limit_alphabet=60, show_progress=False,
                                     special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(training_lines(), trainer)
    tok.normalizer = tk.normalizers.Sequence([tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = tk.decoders.Sequence([tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(),
                                        tk.decoders.Fuse(), tk.decoders.Strip(" ", 1, 0)])
    tok.post_processor = tk.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    path = tmp / "llama2-tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return tk.Tokenizer.from_file(str(path))


def llama_folder(path, tok, eos, vocab_pad=0, context=64, rig=None):
    """A LlamaForCausalLM with random weights and `tok`; `rig(lm_head)` may
    change the head's rows before it is saved."""
    kw = dict(vocab_size=tok.get_vocab_size() + vocab_pad, hidden_size=32, intermediate_size=56,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=context, bos_token_id=tok.token_to_id("<s>") or 0,
              eos_token_id=tok.token_to_id(eos), tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
    if rig is not None:
        with torch.no_grad():
            rig(model.lm_head.weight)
    model.save_pretrained(path, safe_serialization=True)
    tok.save(str(path / "tokenizer.json"))
    bos = "<s>" if tok.token_to_id("<s>") is not None else eos
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": bos, "eos_token": eos}))
    return model


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (folder, tokenizer, eos): byte-level (GPT-2) and byte-fallback (Llama 2)."""
    tmp = tmp_path_factory.mktemp("generation")
    gpt2_tok = gpt2_tokenizer(vocab_size=400)
    gpt2_folder(tmp / "gpt2", gpt2_tok)
    llama_tok = llama2_tokenizer(tmp)
    llama_folder(tmp / "llama2", llama_tok, "</s>")
    return {"gpt2": (tmp / "gpt2", gpt2_tok, EOT), "llama2": (tmp / "llama2", llama_tok, "</s>")}


def generate(m, prompt, tokens, seed, special_tokens=False, temperature=1.0):
    """The binding's generate: its ids, text and stop reason, and the pieces it streamed."""
    pieces = []
    g = m._m.generate(prompt, tokens, temperature, 0, seed, True, None, None, False, special_tokens,
                      pieces.append)
    return g, pieces


@pytest.mark.parametrize("name", ["gpt2", "llama2"])
def test_streamed_pieces_are_exactly_the_decoded_ids(folders, name):
    path, tok, _ = folders[name]
    m = qkv.Model.load(path)
    byte_runs = 0
    for seed in range(12):
        for special in (False, True):
            g, pieces = generate(m, PROMPT, 48, seed, special_tokens=special)
            assert b"".join(pieces) == g["text"]
            for p in pieces:
                p.decode("utf-8")  # whole characters: never half of one
            assert g["text"].decode("utf-8") == tok.decode(g["ids"], skip_special_tokens=not special)
        byte_runs += any(tok.id_to_token(a).startswith("<0x") and tok.id_to_token(b).startswith("<0x")
                         for a, b in zip(g["ids"], g["ids"][1:])) if name == "llama2" else 0
    if name == "llama2":
        assert byte_runs >= 3, "the draws should hold runs of byte tokens"
    # The Python API and the command give the same text, valid UTF-8, as a whole.
    text = m.generate(PROMPT, tokens=48, seed=5)
    g, _ = generate(m, PROMPT, 48, 5)
    assert text == g["text"].decode("utf-8")
    assert "".join(m.stream(PROMPT, tokens=48, seed=5)) == text
    r = run_qkv("sample", "--model", path, "--prompt", PROMPT, "--tokens", 48, "--seed", 5)
    assert r.returncode == 0, r.stderr
    assert r.stdout == PROMPT + text + "\n"


@pytest.fixture(scope="module")
def eos_folder(tmp_path_factory, folders):
    """A Llama-2 folder whose greedy run says two tokens, then </s>: the
    head's row of the third greedy token swapped with </s>'s."""
    path, tok, _ = folders["llama2"]
    m = qkv.Model.load(path)
    first, _ = generate(m, PROMPT, 3, 0, temperature=0.0)
    ids, eos = first["ids"], tok.token_to_id("</s>")
    assert eos not in ids and len(set(ids)) == 3

    def swap(head):
        head[[ids[2], eos]] = head[[eos, ids[2]]]

    rigged = tmp_path_factory.mktemp("eos") / "llama2"
    model = llama_folder(rigged, tok, "</s>", rig=swap)
    return rigged, model, tok, ids[:2] + [eos]


def test_the_end_of_text_token_is_not_text(eos_folder):
    path, model, tok, want = eos_folder
    m = qkv.Model.load(path)
    g, _ = generate(m, PROMPT, 10, 0, temperature=0.0)
    assert g["ids"] == want and g["stop"] == "end_of_text"
    text = m.generate(PROMPT, tokens=10, temperature=0.0)
    assert "</s>" not in text and text == tok.decode(want, skip_special_tokens=True)
    # As transformers' generate + decode(skip_special_tokens=True) gives it.
    ids = tok.encode(PROMPT).ids
    out = model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False)[0, len(ids):].tolist()
    assert out == want and tok.decode(out, skip_special_tokens=True) == text
    assert m.decode(want, skip_special_tokens=True) == text
    # Asked for, the token is printed.
    assert m.generate(PROMPT, tokens=10, temperature=0.0, special_tokens=True) == text + "</s>"
    r = run_qkv("sample", "--model", path, "--prompt", PROMPT, "--tokens", 10, "--temperature", 0)
    assert r.returncode == 0 and r.stdout == PROMPT + text + "\n", r.stderr
    r = run_qkv("sample", "--model", path, "--prompt", PROMPT, "--tokens", 10, "--temperature", 0, "--special")
    assert r.returncode == 0 and r.stdout == PROMPT + text + "</s>\n", r.stderr


def test_ids_past_the_tokenizer_are_never_drawn(tmp_path, folders):
    """A vocab_size padded past the tokenizer's (as GPT-2's 50304 for 50257),
    the padding's logits made the largest: no id without text is drawn."""
    _, tok, _ = folders["llama2"]
    n = tok.get_vocab_size()

    def favour_padding(head):
        head[n:] = head[:n].abs().max() * 50 * torch.sign(head[:40].sum(0))

    llama_folder(tmp_path / "padded", tok, "</s>", vocab_pad=40, rig=favour_padding)
    m = qkv.Model.load(tmp_path / "padded")
    assert m.logits(PROMPT)[-1].argmax() >= n  # the model does favour them
    for temperature in (0.0, 1.0):
        g, _ = generate(m, PROMPT, 20, 1, temperature=temperature)
        assert len(g["ids"]) == 20 and max(g["ids"]) < n
    r = run_qkv("sample", "--model", tmp_path / "padded", "--prompt", PROMPT, "--tokens", 20)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def short_context(tmp_path_factory, folders):
    """A GPT-2 folder whose positions end at 16."""
    _, tok, _ = folders["gpt2"]
    path = tmp_path_factory.mktemp("short") / "gpt2"
    gpt2_folder(path, tok, n_positions=16)
    return path, tok


def test_generation_stops_at_the_context_and_says_so(short_context):
    path, tok = short_context
    m = qkv.Model.load(path)
    n = len(tok.encode("Hello").ids)
    with pytest.warns(RuntimeWarning, match=r"stopped after \d+ of 50 tokens: the model's context of 16 tokens "
                                            r"is full \(sliding_window=True goes on"):
        text = m.generate("Hello", tokens=50, seed=1)
    g, _ = generate(m, "Hello", 50, 1)
    assert g["stop"] == "context" and len(g["ids"]) == 16 + 1 - n
    assert text == g["text"].decode("utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.generate("Hello", tokens=16 + 1 - n, seed=1)  # exactly what fits: no warning
        assert len(tok.encode(m.generate("Hello", tokens=50, seed=1, sliding_window=True)).ids) > 30
    r = run_qkv("sample", "--model", path, "--prompt", "Hello", "--tokens", 50, "--seed", 1)
    assert r.returncode == 0
    assert r.stdout == "Hello" + text + "\n"
    assert f"qkv sample: stopped after {16 + 1 - n} of 50 tokens: the model's context of 16 tokens is full" in r.stderr
    r = run_qkv("sample", "--model", path, "--prompt", "Hello", "--tokens", 50, "--seed", 1, "--sliding-window")
    assert r.returncode == 0 and r.stderr == ""


def test_a_prompt_past_the_context_is_refused_everywhere(short_context):
    path, tok = short_context
    long = "the king shall not " * 8
    n = len(tok.encode(long).ids)
    assert n > 16
    m = qkv.Model.load(path)
    with pytest.raises(ValueError, match=f"prompt: {n} tokens, more than the model's context of 16"):
        m.generate(long, tokens=5)
    with pytest.raises(ValueError, match="context"):
        m.logits(long)
    assert len(m.generate(long, tokens=5, sliding_window=True)) > 0
    want = f"--prompt: expected at most the model's context of 16 tokens, found {n}"
    for args in (["sample", "--tokens", 5], ["logits", "-o", path.parent / "l.npy"], ["explain"]):
        r = run_qkv(args[0], "--model", path, "--prompt", long, *args[1:])
        assert r.returncode == 2 and want in r.stderr, (args, r.stderr)
    r = run_qkv("sample", "--model", path, "--prompt", long, "--tokens", 5, "--sliding-window")
    assert r.returncode == 0, r.stderr
