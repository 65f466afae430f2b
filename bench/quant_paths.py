#!/usr/bin/env python3
"""One qkv binary's SIMD paths on quantized GGUF files, alternated round by round.

For the quantized products' kernels (AVX2's against AVX512-VNNI's, picked by
QKV_ISA): each round runs, per file and per path, a greedy `qkv sample` of
--tokens tokens after a short prompt (decode), then a one-token sample after
the first --prompt-chars characters of --text (prefill). Prints each path's
median seconds per command and the ratio to the first path, from the one run.

    python3 bench/quant_paths.py build/release/qkv MODEL.q8_0.gguf MODEL.q4_k_m.gguf \\
        --isas avx2,avx512bf16
"""
import argparse
import os
import pathlib
import statistics
import sys
import time

from binding import bind_threads, run_on_all_cpus


def seconds(binary, isa, args):
    """Wall seconds of one `qkv sample` on the path `isa`."""
    start = time.perf_counter()
    run_on_all_cpus([binary, "sample", *args, "--temperature", "0"], check=True, capture_output=True,
                    env=dict(os.environ, QKV_ISA=isa))
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="the qkv binary")
    ap.add_argument("files", nargs="+", help="GGUF files")
    ap.add_argument("--isas", default="avx2,avx512bf16", help="comma-separated QKV_ISA paths, the baseline first")
    ap.add_argument("--tokens", type=int, default=128, help="tokens decoded after a short prompt")
    ap.add_argument("--text", default=str(pathlib.Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare.txt"),
                    help="text whose start is the prefill's prompt")
    ap.add_argument("--prompt-chars", type=int, default=2500, help="characters of --text in the prefill's prompt")
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds (>= 5)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.rounds < 5:
        sys.exit("quant_paths.py: --rounds: expected at least 5")
    isas = a.isas.split(",")
    prompt = pathlib.Path(a.text).read_text(encoding="utf-8")[: a.prompt_chars]
    bind_threads()
    work = {"decode": ["--prompt", "ROMEO:", "--tokens", str(a.tokens)], "prefill": ["--prompt", prompt, "--tokens", "1"]}
    times = {}
    for rnd in range(a.rounds):
        for f in a.files:
            for what, args in work.items():
                for isa in isas:
                    t = seconds(a.binary, isa, ["--model", f, "--threads", str(a.threads), *args])
                    times.setdefault((f, what, isa), []).append(t)
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)
    print(f"{'file':<40} {'work':<8} " + " ".join(f"{i + ' s':>14}" for i in isas) + "  ratios to " + isas[0])
    for f in a.files:
        for what in work:
            med = [statistics.median(times[(f, what, isa)]) for isa in isas]
            print(f"{pathlib.Path(f).name:<40} {what:<8} " + " ".join(f"{m:>14.3f}" for m in med) + "  " +
                  " ".join(f"{med[0] / m:.3f}x" for m in med[1:]))


if __name__ == "__main__":
    main()
