#!/usr/bin/env python3
"""What quantization costs in perplexity: qkv and llama.cpp on the same GGUF
files of one small trained model.

The model: GPT-2-shaped (--layers, --embd, 4 heads, 256 positions, a
byte-level BPE tokenizer of --vocab tokens trained on the text), trained by
transformers for --train-seconds on the first 90% of tiny Shakespeare, made
once into --cache. llama.cpp's converter makes its F32 GGUF, llama-quantize
the Q8_0, Q4_0 and Q4_K_M files. Perplexity on the last 10% (the validation
text), as llama-perplexity measures it: the tokens cut into chunks of --ctx,
each chunk's second half scored given what precedes it in the chunk.
qkv: Model.load(file).logits(chunk); llama.cpp: llama-perplexity -c CTX.
Each tool's increase over its own F32 figure is the cost of each type.
(A 256-token chunk runs qkv's long-prompt path: the float32 GEMM on the
weights dequantized exactly; decoding runs the int8 dot products.)
Run it with the Python of qkv's venv (torch, transformers, tokenizers, qkv).

    python3 bench/perplexity.py --llama-perplexity LLAMA.CPP/build/bin/llama-perplexity \\
        --llama-convert LLAMA.CPP/convert_hf_to_gguf.py --llama-quantize LLAMA.CPP/build/bin/llama-quantize
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from compare import cpu_model  # noqa: E402  (bench/)
import generate  # noqa: E402  (bench/: the tokenizer trainer, the converter's GPT-2 hook)

TYPES = ["Q8_0", "Q4_0", "Q4_K_M"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", type=Path, default=ROOT.parent / "shared" / "data" / "tinyshakespeare.txt")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "qkv" / "perplexity")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--embd", type=int, default=256, help="a multiple of 256 (the K-quants' block)")
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--train-seconds", type=float, default=240)
    p.add_argument("--threads", type=int, default=2)
    for tool in ("perplexity", "convert", "quantize"):
        p.add_argument(f"--llama-{tool}", type=Path, required=True)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    if a.embd % 256:
        p.error("--embd: a multiple of 256")
    return a


def train(a, folder):
    """The model folder: transformers' GPT-2 trained for --train-seconds."""
    import torch
    import transformers
    text = a.text.read_text(encoding="utf-8")
    train_text = text[: int(len(text) * 0.9)]
    tok = generate.train_tokenizer("gpt2", a.vocab, train_text)
    eot = tok.token_to_id("<|endoftext|>")
    ids = torch.tensor(tok.encode(train_text).ids)
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    cfg = transformers.GPT2Config(vocab_size=a.vocab, n_positions=a.ctx, n_ctx=a.ctx, n_embd=a.embd, n_layer=a.layers,
                                  n_head=4, bos_token_id=eot, eos_token_id=eot)
    model = transformers.GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    t0, step = time.time(), 0
    while time.time() - t0 < a.train_seconds:
        at = torch.randint(0, len(ids) - a.ctx - 1, (16,))
        x = torch.stack([ids[i:i + a.ctx] for i in at])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.3f}", file=sys.stderr, flush=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))


def gguf_files(a, folder):
    """F32 by llama.cpp's converter, then each of TYPES by llama-quantize."""
    f32 = folder.with_name(folder.name + ".F32.gguf")
    if not f32.is_file():
        env = dict(os.environ, PYTHONPATH=str(a.llama_convert.parent / "gguf-py"))
        subprocess.run([sys.executable, "-c", generate.CONVERT, generate.CONVERT_PRE["gpt2"], str(a.llama_convert), str(folder),
                        "--outtype", "f32", "--outfile", str(f32)], env=env, check=True, capture_output=True)
    files = {"F32": f32}
    for t in TYPES:
        files[t] = folder.with_name(f"{folder.name}.{t}.gguf")
        if not files[t].is_file():
            subprocess.run([str(a.llama_quantize), str(f32), str(files[t]), t], check=True, capture_output=True)
    return files


def qkv_perplexity(path, text, ctx, threads):
    """llama-perplexity's measure: chunks of ctx tokens, the second half scored."""
    import numpy as np
    import qkv
    m = qkv.Model.load(str(path))
    m.set_threads(threads)
    ids = m.tokenize(text)
    nll, n = 0.0, 0
    for c in range(len(ids) // ctx):
        chunk = ids[c * ctx:(c + 1) * ctx]
        logits = m.logits(chunk).astype(np.float64)
        for t in range(ctx // 2 + 1, ctx):  # logits t - 1 predict token t, as llama-perplexity scores
            row = logits[t - 1]
            top = row.max()
            nll += top + math.log(np.exp(row - top).sum()) - row[chunk[t]]
            n += 1
    return math.exp(nll / n)


def llama_perplexity(a, path, text_file):
    r = subprocess.run([str(a.llama_perplexity), "-m", str(path), "-f", str(text_file), "-c", str(a.ctx),
                        "-b", str(a.ctx), "-t", str(a.threads)], capture_output=True, text=True)
    found = re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout + r.stderr)
    if r.returncode != 0 or not found:
        sys.exit(f"bench/perplexity.py: llama-perplexity failed on {path}:\n{(r.stdout + r.stderr)[-3000:]}")
    return float(found.group(1))


def main():
    a = parse_args()
    folder = a.cache / f"gpt2-{a.layers}x{a.embd}-v{a.vocab}-{int(a.train_seconds)}s"
    if not (folder / "config.json").is_file():
        a.cache.mkdir(parents=True, exist_ok=True)
        print(f"training {folder} ...", file=sys.stderr, flush=True)
        train(a, folder)
    files = gguf_files(a, folder)
    text = a.text.read_text(encoding="utf-8")
    val = text[int(len(text) * 0.9):]
    val_file = a.cache / "validation.txt"
    val_file.write_text(val, encoding="utf-8")
    rows = []
    for t, path in files.items():
        rows.append({"type": t, "bytes": path.stat().st_size, "qkv": qkv_perplexity(path, val, a.ctx, a.threads),
                     "llama.cpp": llama_perplexity(a, path, val_file)})
    base = rows[0]
    print(f"CPU: {cpu_model()}; GPT-2-shaped {a.layers} layers x {a.embd}, vocabulary {a.vocab}, trained "
          f"{a.train_seconds:.0f} s; perplexity of the validation text, chunks of {a.ctx}, second halves scored")
    print(f"{'type':8} {'MB':>7} {'qkv':>9} {'qkv +%':>8} {'llama.cpp':>10} {'llama.cpp +%':>13}")
    for r in rows:
        dq = 100 * (r["qkv"] / base["qkv"] - 1)
        dl = 100 * (r["llama.cpp"] / base["llama.cpp"] - 1)
        print(f"{r['type']:8} {r['bytes'] / 1e6:7.1f} {r['qkv']:9.4f} {dq:8.3f} {r['llama.cpp']:10.4f} {dl:13.3f}")
    if a.json:
        a.json.write_text(json.dumps({"cpu": cpu_model(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
