#!/usr/bin/env python3
"""`qkv quantize` against llama.cpp's own route to the same file: the float32
folders of bench/generate.py (random weights of GPT-2 124M's and TinyLlama
1.1B's shapes, made there and kept in its --cache) written by qkv quantize,
and by llama.cpp's converter (to F32 GGUF) then llama-quantize (no
importance matrix). For each mix, every tensor's type and bytes are
compared; a tensor that differs is named. Nothing is timed.

    python3 bench/quantize_check.py --llama-convert .../convert_hf_to_gguf.py \\
        --llama-quantize .../llama-quantize --models gpt2-124m,tinyllama-bpe --types q8_0,q4_k_m
Run bench/generate.py once first for the folders (its --cache).
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402  (its folders, its llama.cpp conversion)

ROOT = Path(__file__).resolve().parents[1]


def compare(ours, theirs):
    """(tensors, same type, same bytes, the names that differ) of two GGUF files."""
    from gguf import GGUFReader
    a = {t.name: t for t in GGUFReader(ours).tensors}
    b = {t.name: t for t in GGUFReader(theirs).tensors}
    differ = sorted(set(a) ^ set(b))
    same_type = same_bytes = 0
    for name in sorted(set(a) & set(b)):
        if a[name].tensor_type != b[name].tensor_type:
            differ.append(f"{name} ({a[name].tensor_type.name} / {b[name].tensor_type.name})")
            continue
        same_type += 1
        if np.array_equal(np.asarray(a[name].data).view(np.uint8), np.asarray(b[name].data).view(np.uint8)):
            same_bytes += 1
        else:
            differ.append(f"{name} (bytes)")
    return len(a), same_type, same_bytes, differ


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gpt2-124m,tinyllama-bpe",
                   help="comma-separated: gpt2-124m, tinyllama-bpe, llama3-8b")
    p.add_argument("--types", default="q8_0,q4_0,q4_k_m,q5_k_m,q6_k", help="comma-separated mixes")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "qkv" / "generate",
                   help="bench/generate.py's --cache, where the float32 folders are")
    p.add_argument("--qkv", type=Path, default=ROOT / "build" / "release" / "qkv", help="the qkv binary")
    p.add_argument("--llama-convert", type=Path, default=os.environ.get("LLAMA_CONVERT"), required=False)
    p.add_argument("--llama-quantize", type=Path, default=os.environ.get("LLAMA_QUANTIZE"), required=False)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    for flag, path in (("--llama-convert", a.llama_convert), ("--llama-quantize", a.llama_quantize), ("--qkv", a.qkv)):
        if path is None or not Path(path).is_file():
            p.error(f"{flag}: no such file: {path}")
    rows = []
    for model in a.models.split(","):
        if model not in ("gpt2-124m", "tinyllama-bpe", "llama3-8b"):
            p.error(f"--models: gpt2-124m, tinyllama-bpe or llama3-8b, found {model!r}")
        shape = generate.SHAPES[model]
        base = "bf16" if shape.get("big") else "float32"  # as bench/generate.py makes its quantized files
        folder = a.cache / f"{model}-{base}"
        if not (folder / "config.json").is_file():
            sys.exit(f"bench/quantize_check.py: no folder {folder}; run bench/generate.py --models {model} first")
        tokenizer = shape.get("tokenizer", shape["family"])
        for mix in a.types.split(","):
            if mix not in generate.QUANTIZED:
                p.error(f"--types: expected from {', '.join(generate.QUANTIZED)}, found {mix!r}")
            theirs = generate.quantized_file(a, folder, base, mix, tokenizer)
            ours = folder.with_name(f"{folder.name}.{mix}.qkv.gguf")
            r = subprocess.run([str(a.qkv), "quantize", "--model", str(folder), "--type", mix, "-o", str(ours),
                                "--threads", str(a.threads), "--quiet"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"bench/quantize_check.py: qkv quantize failed:\n{r.stderr}")
            n, same_type, same_bytes, differ = compare(ours, theirs)
            rows.append((model, mix, n, same_type, same_bytes))
            for d in differ[:10]:
                print(f"  {model} {mix}: differs: {d}")
            ours.unlink()
    print("| model | mix | tensors | same type | same bytes |")
    print("|---|---|---:|---:|---:|")
    for model, mix, n, same_type, same_bytes in rows:
        print(f"| {model} | {mix} | {n} | {same_type} | {same_bytes} |")
    sys.exit(0 if all(r[2] == r[3] == r[4] for r in rows) else 1)


if __name__ == "__main__":
    main()
