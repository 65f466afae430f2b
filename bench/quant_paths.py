#!/usr/bin/env python3
"""One qkv binary's kernels on quantized GGUF files, alternated round by round.

For the quantized products' kernels: each contender is a setting of the
environment (QKV_ISA picks a path, QKV_DISABLE=avx512_vnni turns the VNNI
kernels off on it). Each round runs, per file and per contender, a greedy
`qkv sample` of --tokens tokens after a short prompt (decode), then a
one-token sample after the first --prompt-chars characters of --text
(prefill). Prints each contender's median seconds per command and the first
one's over it, from the one run.

    python3 bench/quant_paths.py build/release/qkv MODEL.q8_0.gguf MODEL.q4_k_m.gguf
"""
import argparse
import os
import pathlib
import statistics
import sys
import time

from binding import bind_threads, run_on_all_cpus


def seconds(binary, setting, args):
    """Wall seconds of one `qkv sample` with the environment `setting`."""
    env = dict(os.environ)
    for pair in setting.split():
        name, _, value = pair.partition("=")
        env[name] = value
    start = time.perf_counter()
    run_on_all_cpus([binary, "sample", *args, "--temperature", "0"], check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="the qkv binary")
    ap.add_argument("files", nargs="+", help="GGUF files")
    ap.add_argument("--contenders", default="QKV_ISA=avx512 QKV_DISABLE=avx512_vnni;QKV_ISA=avx512",
                    help="';'-separated settings of the environment, the baseline first")
    ap.add_argument("--tokens", type=int, default=128, help="tokens decoded after a short prompt")
    ap.add_argument("--text", default=str(pathlib.Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare.txt"),
                    help="text whose start is the prefill's prompt")
    ap.add_argument("--prompt-chars", type=int, default=2500, help="characters of --text in the prefill's prompt")
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds (>= 5)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.rounds < 5:
        sys.exit("quant_paths.py: --rounds: expected at least 5")
    contenders = a.contenders.split(";")
    prompt = pathlib.Path(a.text).read_text(encoding="utf-8")[: a.prompt_chars]
    bind_threads()
    work = {"decode": ["--prompt", "ROMEO:", "--tokens", str(a.tokens)], "prefill": ["--prompt", prompt, "--tokens", "1"]}
    times = {}
    for rnd in range(a.rounds):
        for f in a.files:
            for what, args in work.items():
                for c in contenders:
                    t = seconds(a.binary, c, ["--model", f, "--threads", str(a.threads), *args])
                    times.setdefault((f, what, c), []).append(t)
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)
    for n, c in enumerate(contenders):
        print(f"contender {n}: {c}")
    print(f"{'file':<36} {'work':<8} " + " ".join(f"{'s, ' + str(n):>8}" for n in range(len(contenders))) + "  0's s over each")
    for f in a.files:
        for what in work:
            med = [statistics.median(times[(f, what, c)]) for c in contenders]
            print(f"{pathlib.Path(f).name:<36} {what:<8} " + " ".join(f"{m:>8.3f}" for m in med) + "  " +
                  " ".join(f"{med[0] / m:.3f}x" for m in med[1:]))


if __name__ == "__main__":
    main()
