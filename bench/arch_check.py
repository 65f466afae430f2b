#!/usr/bin/env python3
"""qkv against llama.cpp on the architectures and scalings beyond GPT-2 and
plain Llama that llama.cpp's files carry: small random-weight folders made
by transformers (Qwen2 with heads of 96, so that attn_output's rows of 384
are not whole K-quant super-blocks; Llama with Llama 3.1's RoPE scaling;
SmolLM's layout: a tied head, digits split one a piece),
each converted by llama.cpp's convert_hf_to_gguf.py to an F32 GGUF file.

For each folder and mix: `qkv quantize` against `llama-quantize` on the
converter's file, tensor by tensor (type and bytes); `qkv tokenize` against
`llama-tokenize` on the converter's file; and qkv's logits on that file
against transformers' on the folder. Then a Llama folder with a
SentencePiece tokenizer.json (as transformers converts Llama 2's): the
file `qkv quantize` writes of it tokenized by `llama-tokenize` as the
folder's tokenizer does. Nothing is timed.

    python3 bench/arch_check.py --llama-convert .../convert_hf_to_gguf.py \\
        --llama-quantize .../llama-quantize --llama-tokenize .../llama-tokenize
Needs torch, transformers, tokenizers and gguf (the test venv).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
from quantize_check import compare  # noqa: E402

MIXES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M", "q6_k": "Q6_K"}
TEXTS = ["ROMEO: the king's 1234567 men", "  thou art 12 <|endoftext|> my lord's!",
         "Héllo, 世界! 👍🏽  spaces   and\ttabs 12345", "First Citizen: Before we proceed  any further"]
# Runs convert_hf_to_gguf.py (argv[2]) on argv[3:], its pre-tokenizer named
# argv[1] (the converter knows tokenizers by a hash of their output on a
# fixed text; these are trained here).
CONVERT = """import os, runpy, sys
pre, convert = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(convert))
sys.argv = [convert] + sys.argv[3:]
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
runpy.run_path(convert, run_name="__main__")
"""


def folders(tmp):
    """(name, folder, pre-tokenizer name, transformers model) of each case."""
    from gguf_files import hf_folder, llama3_tokenizer, llama_model
    from gpt2_folders import gpt2_tokenizer, qwen2_tokenizer, smollm_tokenizer
    base = gpt2_tokenizer(vocab_size=2000)
    shape = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256)
    cases = []
    tok = qwen2_tokenizer(base)
    model = llama_model(tok, arch="qwen2", head_dim=96, **shape)
    cases.append(("qwen2-heads-96", hf_folder(model, tok, tmp / "qwen2"), "qwen2", model, tok))
    tok = llama3_tokenizer(base)
    scaling = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64)
    model = llama_model(tok, rope_scaling=scaling, **shape)
    cases.append(("llama-3.1-scaling", hf_folder(model, tok, tmp / "llama31"), "llama-bpe", model, tok))
    tok = smollm_tokenizer(base)
    model = llama_model(tok, tie_word_embeddings=True, **shape)
    cases.append(("smollm-tied", hf_folder(model, tok, tmp / "smollm"), "smollm", model, tok))
    return cases


def sentencepiece_check(a, tmp):
    """llama-tokenize's ids on qkv's GGUF file of a SentencePiece folder
    against the folder's tokenizer (the tokenizers library), its spaces made
    "▁" by the normalizer (as Llama 2's and TinyLlama's tokenizer.json) or by
    a Metaspace pre-tokenizer (newer conversions, which put no "▁" in front
    of a text that starts with a space, where SentencePiece and GGUF's
    add_space_prefix always do: there SentencePiece's ids are expected)."""
    from gguf_files import SpmVocab, hf_folder, llama_model
    text = (ROOT.parent / "shared" / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:200_000]
    vocab = SpmVocab(text, size=1000)
    ok = True
    for metaspace in (False, True):
        tok = vocab.hf_tokenizer(metaspace=metaspace)
        folder = hf_folder(llama_model(vocab), tok, tmp / f"spm{int(metaspace)}", bos="<s>", eos="</s>")
        ours = tmp / f"spm{int(metaspace)}.q8_0.qkv.gguf"
        run([a.qkv, "quantize", "--model", folder, "--type", "q8_0", "-o", ours, "--quiet"])
        same = 0
        for t in TEXTS:
            want = vocab.encode(t) if metaspace and t.startswith(" ") else tok.encode(t).ids
            theirs = json.loads(run([a.llama_tokenize, "-m", ours, "-p", t, "--ids", "--log-disable"]).strip()
                                .splitlines()[-1])
            same += theirs == want
            if theirs != want:
                print(f"  sentencepiece: {t!r}: llama.cpp {theirs}, expected {want}")
        form = "a Metaspace pre-tokenizer" if metaspace else "the normalizer"
        print(f"sentencepiece ({form}): llama-tokenize on qkv's file gives the folder's ids on {same} of "
              f"{len(TEXTS)} texts")
        ok = ok and same == len(TEXTS)
    return ok


def run(args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"bench/arch_check.py: {args[0]} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", type=Path, default=ROOT / "build" / "release" / "qkv", help="the qkv binary")
    p.add_argument("--llama-convert", type=Path, default=os.environ.get("LLAMA_CONVERT"))
    p.add_argument("--llama-quantize", type=Path, default=os.environ.get("LLAMA_QUANTIZE"))
    p.add_argument("--llama-tokenize", type=Path, default=os.environ.get("LLAMA_TOKENIZE"))
    a = p.parse_args()
    for flag in ("qkv", "llama_convert", "llama_quantize", "llama_tokenize"):
        path = getattr(a, flag)
        if path is None or not Path(path).is_file():
            p.error(f"--{flag.replace('_', '-')}: no such file: {path}")
    import torch
    import qkv
    ok = True
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, folder, pre, model, tok in folders(tmp):
            f32 = tmp / f"{name}.f32.gguf"
            run([sys.executable, "-c", CONVERT, pre, a.llama_convert, folder, "--outtype", "f32", "--outfile", f32],
                env=dict(os.environ, PYTHONPATH=str(a.llama_convert.parent / "gguf-py")))
            for mix, theirs_type in MIXES.items():
                theirs, ours = tmp / f"{name}.{mix}.lc.gguf", tmp / f"{name}.{mix}.qkv.gguf"
                run([a.llama_quantize, f32, theirs, theirs_type])
                run([a.qkv, "quantize", "--model", folder, "--type", mix, "-o", ours, "--quiet"])
                n, same_type, same_bytes, differ = compare(ours, theirs)
                rows.append((name, mix, n, same_type, same_bytes))
                ok = ok and n == same_type == same_bytes
                for d in differ[:10]:
                    print(f"  {name} {mix}: differs: {d}")
            same = 0
            for text in TEXTS:
                # both put the beginning-of-text token in front where the file's add_bos_token says
                theirs = json.loads(run([a.llama_tokenize, "-m", f32, "-p", text, "--ids",
                                         "--log-disable"]).strip().splitlines()[-1])
                ours = [int(x) for x in run([a.qkv, "tokenize", "--model", f32, "--input", "-"],
                                            input=text + "\n").split()]
                same += ours == theirs
                if ours != theirs:
                    print(f"  {name}: {text!r}: qkv {ours}, llama.cpp {theirs}")
            ok = ok and same == len(TEXTS)
            m = qkv.Model.load(f32)
            ids = m.tokenize(" ".join(TEXTS) * 3)
            with torch.no_grad():
                want = model(torch.tensor([ids])).logits[0].numpy()
            diff = float(np.abs(m.logits(ids) - want).max())
            ok = ok and diff < 1e-4
            print(f"{name}: llama-tokenize's ids on {same} of {len(TEXTS)} texts; logits of the converter's F32 "
                  f"file against transformers over {len(ids)} tokens: max |diff| {diff:.2e}")
        ok = sentencepiece_check(a, tmp) and ok
    print("| model | mix | tensors | same type | same bytes |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print("| {} | {} | {} | {} | {} |".format(*row))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
