#!/usr/bin/env python3
"""Attention forward + backward, as a training step runs it: qkv (float32 and
bf16, through qkv.torch's autograd Function) against PyTorch SDPA (float32
and bf16), the contenders alternating round by round on the same shapes.

Each round times every shape once per contender, in an order that rotates
from round to round; each entry is the median over rounds of that round's
median over --reps runs, and ratios are taken of those medians (as
bench/compare.py does, and for the same reason). Every contender gets the
same inputs, made once per shape; each call runs the forward, then the
backward of sum(out * dout). GFLOP/s count 7 products of 2·N·S·D (Dv) flops
per head, forward 2 and backward 5 (the backward recomputes the scores), over
the visible pairs; the fp32 FMA peak is `qkv bench`'s probe. qkv's backward
alone (qkv.attention_backward, given the forward's out and lse) is timed in
the same rounds, counted as 5 products.

Runs under the venv that holds torch (--venv, default $QKV_VENV or
~/.cache/qkv/venv, where `bash scripts/python_env.sh --test` puts torch and
qkv). OpenMP threads are bound to cores unless OMP_PROC_BIND is set.

    python3 bench/backward.py                 # standard shapes, 5 rounds
    python3 bench/backward.py --rounds 7 --reps 3
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from binding import bind_threads, run_on_all_cpus  # bench/
from compare import cpu_model
import pytorch_sdpa  # bench/: VENV

ROOT = Path(__file__).resolve().parents[1]

# B, Hq, Hkv, N (= S), D, causal
STANDARD = [
    (1, 8, 8, 2048, 128, False),
    (1, 8, 8, 2048, 128, True),
    (1, 8, 8, 2048, 64, False),
    (1, 32, 8, 1024, 128, True),
    (12, 4, 4, 64, 32, True),  # the training recipe's attention
]
CONTENDERS = ["qkv fp32", "qkv bf16", "torch fp32", "torch bf16"]
# qkv's backward alone (qkv.attention_backward on the forward's out and lse;
# PyTorch has no public call for its backward alone).
BACKWARD_ONLY = ["qkv fp32 bwd", "qkv bf16 bwd"]
EVERYONE = CONTENDERS + BACKWARD_ONLY


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", default=os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"),
                   help="the qkv binary whose `bench` measures the FMA peak (default "
                        "build/release/qkv, or $QKV_BIN)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for every contender (default: all cores this process may use)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (at least 5)")
    p.add_argument("--reps", type=int, default=3, help="timed calls per contender per round")
    p.add_argument("--venv", type=Path, default=pytorch_sdpa.VENV,
                   help="virtual environment holding torch and qkv (not created or filled here)")
    a = p.parse_args()
    if a.rounds < 5:
        p.error("--rounds: at least 5 (fewer rounds do not average out a shared machine)")
    if a.reps < 1 or a.threads < 1:
        p.error("--reps and --threads: at least 1")
    return a


def enter_venv(a):
    """Re-runs this script under the venv's python unless torch and qkv import here."""
    try:
        import torch  # noqa: F401
        import qkv.torch  # noqa: F401
        return
    except ImportError:
        pass
    python = a.venv / "bin" / "python"
    if os.environ.get("QKV_BACKWARD_REEXEC") or not python.exists():
        sys.exit(f"bench/backward.py: needs torch and qkv; neither here nor in {a.venv} "
                 "(bash scripts/python_env.sh --test installs both)")
    os.environ["QKV_BACKWARD_REEXEC"] = "1"
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def fma_peak(a):
    """qkv bench's measured float32 FMA peak, GFLOP/s (and the isa it names)."""
    cmd = [str(a.qkv), "bench", "--json", "--threads", str(a.threads), "--reps", "1",
           "--heads", "1", "--n", "256", "--d", "64"]
    r = run_on_all_cpus(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qkv bench failed (exit {r.returncode}): {r.stderr.strip()}")
    row = json.loads(r.stdout.strip().splitlines()[-1])
    return row["peak_gflops"], row["isa"]


def flops(shape):
    b, hq, hkv, n, d, causal = shape
    pairs = n * (n + 1) // 2 if causal else n * n
    return 7 * 2 * b * hq * pairs * d


def name(shape):
    b, hq, hkv, n, d, causal = shape
    heads = f"H{hq}" if hq == hkv else f"H{hq}/{hkv}"
    return f"B{b} {heads} N=S={n} D{d}" + (" causal" if causal else "")


class Runner:
    """One shape's inputs per dtype, made once, and a timed forward + backward."""

    def __init__(self, threads):
        import torch
        import qkv.torch as qt
        self.torch, self.qt = torch, qt
        self.F = torch.nn.functional
        torch.set_num_threads(threads)
        self.inputs = {}

    def make(self, shape, dtype):
        torch = self.torch
        b, hq, hkv, n, d, causal = shape
        gen = torch.Generator().manual_seed(0)
        t = torch.bfloat16 if dtype == "bf16" else torch.float32
        q = torch.randn(b, hq, n, d, generator=gen).to(t)
        k = torch.randn(b, hkv, n, d, generator=gen).to(t)
        v = torch.randn(b, hkv, n, d, generator=gen).to(t)
        dout = torch.randn(b, hq, n, d, generator=gen).to(t)
        return [x.requires_grad_() for x in (q, k, v)], dout

    def time(self, shape, who, reps):
        lib, dtype = who.split()[:2]
        if (shape, dtype) not in self.inputs:
            self.inputs = {k: v for k, v in self.inputs.items() if k[0] == shape}
            self.inputs[(shape, dtype)] = self.make(shape, dtype)
        (q, k, v), dout = self.inputs[(shape, dtype)]
        kw = {"is_causal": shape[5], "enable_gqa": shape[1] != shape[2]}
        if who.endswith("bwd"):
            import qkv
            with self.torch.no_grad():
                out, lse = qkv.scaled_dot_product_attention(q, k, v, None, return_lse=True, **kw)

            def step():
                qkv.attention_backward(q, k, v, out, lse, dout, None, **kw)
        else:
            fn = self.qt.scaled_dot_product_attention if lib == "qkv" else \
                self.F.scaled_dot_product_attention

            def step():
                for x in (q, k, v):
                    x.grad = None
                fn(q, k, v, **kw).backward(dout)

        step()  # warm-up: buffers touched, threads started
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def main():
    a = parse_args()
    bind_threads()
    enter_venv(a)
    peak, isa = fma_peak(a)
    run = Runner(a.threads)
    times = {(w, s): [] for w in EVERYONE for s in STANDARD}
    for rnd in range(a.rounds):
        order = EVERYONE[rnd % len(EVERYONE):] + EVERYONE[:rnd % len(EVERYONE)]
        for shape in STANDARD:
            for who in order:
                times[(who, shape)].append(run.time(shape, who, a.reps))
            print(f"round {rnd + 1}/{a.rounds}: {name(shape)} done", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"CPU: {cpu_model()}; {a.threads} thread{'s' if a.threads != 1 else ''} "
          f"(OMP_PROC_BIND={os.environ['OMP_PROC_BIND']}); qkv isa {isa}; "
          f"measured FMA fp32 peak {peak:.1f} GFLOP/s")
    print(f"forward + backward; {a.rounds} alternating rounds x {a.reps} reps; ms = median over "
          "rounds of each round's median")
    width = max(len(name(s)) for s in STANDARD)
    print(f"{'case':<{width}}" + "".join(f" {w + ' ms':>14}" for w in CONTENDERS) +
          f" {'bf16/fp32 qkv':>14} {'torch/qkv fp32':>15} {'torch/qkv bf16':>15}")
    for s in STANDARD:
        m = {w: med[(w, s)] for w in CONTENDERS}
        print(f"{name(s):<{width}}" + "".join(f" {m[w]:>14.2f}" for w in CONTENDERS) +
              f" {m['qkv fp32'] / m['qkv bf16']:>13.2f}x"
              f" {m['torch fp32'] / m['qkv fp32']:>14.2f}x"
              f" {m['torch bf16'] / m['qkv bf16']:>14.2f}x")
    print(f"qkv backward alone: {'fp32 ms':>9} {'bf16 ms':>9} {'bf16/fp32':>9}")
    for s in STANDARD:
        f32, b16 = med[("qkv fp32 bwd", s)], med[("qkv bf16 bwd", s)]
        print(f"{name(s):<{width}} {f32:>9.2f} {b16:>9.2f} {f32 / b16:>8.2f}x")
    print("GFLOP/s (products over the visible pairs / median time; % of the fp32 FMA peak):")
    for s in STANDARD:
        def rate(w):
            gf = flops(s) * (5 if w.endswith("bwd") else 7) / 7 / (med[(w, s)] * 1e6)
            return f" {w}: {gf:.1f} ({gf / peak:.0%})"
        print(f"{name(s):<{width}}" + "".join(rate(w) for w in EVERYONE))

if __name__ == "__main__":
    main()
