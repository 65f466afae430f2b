#!/usr/bin/env python3
"""Two builds of qkv, the same model work, alternated round by round.

For a change that must not slow the model down: `qkv train` (training steps
per second, from the run's own log, so start-up and checkpoints are left out)
and `qkv sample` (greedy generation with the KV cache, tokens per second of
the whole command) run with binary A, then B, then A, ... for --rounds rounds.
Prints each contender's median and B/A, all from the one run.

    python3 bench/model_ab.py OLD/qkv NEW/qkv --text ../shared/data/tinyshakespeare.txt
"""
import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

from binding import bind_threads, run_on_all_cpus

TRAIN = ["--iters", "60", "--eval-interval", "60", "--eval-iters", "1", "--log-interval", "10",
         "--layers", "4", "--embd", "128", "--context", "64", "--batch", "12", "--no-progress"]
SAMPLE_TOKENS = 400


def train_rate(binary, text, out, dtype, threads):
    """Training steps per second between the log lines of iterations 10 and 50."""
    run_on_all_cpus([binary, "train", "--text", text, "--out", out, "--force", "--dtype", dtype,
                    "--threads", str(threads), *TRAIN], check=True, capture_output=True)
    rows = [json.loads(line) for line in pathlib.Path(out, "log.jsonl").read_text().splitlines()]
    at = {r["iter"]: r["elapsed_s"] for r in rows if "elapsed_s" in r}
    return 40 / (at[50] - at[10])


def sample_rate(binary, model, threads):
    """Generated tokens per second of a whole greedy `qkv sample`."""
    start = time.perf_counter()
    run_on_all_cpus([binary, "sample", "--model", model, "--tokens", str(SAMPLE_TOKENS),
                    "--temperature", "0", "--threads", str(threads)], check=True,
                   capture_output=True)
    return SAMPLE_TOKENS / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="binary A (the baseline)")
    ap.add_argument("b", help="binary B (the change)")
    ap.add_argument("--text", required=True, help="training text")
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds (>= 5)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    bind_threads()  # unbound, an idle worker woken late can cost a 4 ms scheduler tick
    if args.rounds < 5:
        sys.exit("model_ab.py: --rounds: expected at least 5")
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for rnd in range(args.rounds):
            for name, binary in (("A", args.a), ("B", args.b)):
                for dtype in ("float32", "bf16"):
                    out = f"{tmp}/{name}_{dtype}"
                    r = train_rate(binary, args.text, out, dtype, args.threads)
                    results.setdefault(("train steps/s", dtype, name), []).append(r)
                # Both binaries sample from the float32 model A trained this round.
                s = sample_rate(binary, f"{tmp}/A_float32", args.threads)
                results.setdefault(("sample tokens/s", "float32", name), []).append(s)
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{'what':<16} {'dtype':<8} {'A median':>10} {'B median':>10} {'B/A':>6}")
    for what, dtype in sorted({(w, d) for w, d, _ in results}):
        a = statistics.median(results[(what, dtype, "A")])
        b = statistics.median(results[(what, dtype, "B")])
        print(f"{what:<16} {dtype:<8} {a:>10.2f} {b:>10.2f} {b / a:>6.3f}")


if __name__ == "__main__":
    main()
