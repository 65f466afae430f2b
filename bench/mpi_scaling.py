#!/usr/bin/env python3
"""Ring attention past one process: measured at P = 1, 2, ... ranks on this
machine, then modelled for P = 8..64 ranks on a 100 Gb/s network.

Runs build/release/ring_bench under mpirun for each P in turn, round by round
(P=1, P=2, P=1, P=2, ...: the contenders alternate, so a slow moment of the
machine hits both), and reports medians over the rounds: time per call,
GFLOP/s in all and per rank, the compute time and the communication the
compute did not hide (time blocked in MPI), and bytes sent per rank.

The model then asks, for a sequence of --model-length tokens (default 1M)
split over P ranks: does a key/value block cross the network while the rank
computes on the previous one? Per ring step a rank sends 2 * (L/P) * Hkv * D *
4 bytes and computes 2 chunk blocks of (L/2P)^2 pairs (causal; 4 (L/2P)^2
non-causal) at 4 * D * Hq flops a pair, at the per-rank rate measured here.
The same for data-parallel training of the nanoGPT recipe: a step all-reduces
every gradient (a ring all-reduce sends 2 (P-1)/P of them per rank) while its
compute shrinks by 1/P.

    python3 bench/mpi_scaling.py                       # L=16384, causal, 5 rounds
    python3 bench/mpi_scaling.py --ranks 1 2 --rounds 7 --length 8192
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default=ROOT / "build" / "release" / "ring_bench")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--length", type=int, default=16384)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--non-causal", action="store_true")
    p.add_argument("--reps", type=int, default=3, help="timed calls per run (median)")
    p.add_argument("--network-gbps", type=float, default=100.0, help="link speed, Gbit/s")
    p.add_argument("--model-length", type=int, default=1 << 20)
    p.add_argument("--train-step-ms", type=float, default=27.0,
                   help="one nanoGPT-recipe step on one machine (README's training figures)")
    p.add_argument("--train-params", type=int, default=804_224,
                   help="parameters of the recipe's model (qkv size --layers 4 --embd 128 "
                        "--heads 4 --vocab 66 --context 64 --no-bias)")
    return p.parse_args()


def run(a, ranks):
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    threads = max(1, len(os.sched_getaffinity(0)) // ranks)
    cmd = [shutil.which("mpirun"), "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
           str(a.bench), "--length", str(a.length), "--heads", str(a.heads), "--kv-heads",
           str(a.kv_heads), "--dim", str(a.dim), "--reps", str(a.reps), "--threads", str(threads)]
    if not a.non_causal:
        cmd.append("--causal")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    a = parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    runs = {p: [] for p in a.ranks}
    for _ in range(a.rounds):
        for p in a.ranks:
            runs[p].append(run(a, p))
    print(f"CPU: {cpu}, {len(os.sched_getaffinity(0))} cores; L={a.length} Hq={a.heads} "
          f"Hkv={a.kv_heads} D={a.dim} {'non-causal' if a.non_causal else 'causal'}, "
          f"{a.rounds} alternating rounds, medians")
    print(f"{'ranks':>5} {'thr/rank':>8} {'ms/call':>9} {'GFLOP/s':>8} {'per rank':>8} "
          f"{'compute ms':>10} {'unhidden comm ms':>16} {'comm share':>10} {'MB sent/rank':>12}")
    base = None
    med = lambda p, key: statistics.median(r[key] for r in runs[p])
    for p in a.ranks:
        ms, gf = med(p, "median_ms"), med(p, "gflops")
        base = base or ms
        print(f"{p:>5} {runs[p][0]['threads_per_rank']:>8} {ms:>9.1f} {gf:>8.1f} {gf / p:>8.1f} "
              f"{med(p, 'compute_ms'):>10.1f} {med(p, 'wait_ms'):>16.2f} "
              f"{med(p, 'wait_ms') / ms:>10.1%} {med(p, 'bytes_sent_per_rank') / 1e6:>12.1f}")

    # The model, from the slowest-per-rank compute rate measured above.
    p_max = a.ranks[-1]
    rate = med(p_max, "gflops") / p_max * 1e9  # flops/s one rank sustains
    link = a.network_gbps * 1e9 / 8  # bytes/s
    L, H, G, D = a.model_length, a.heads, a.kv_heads, a.dim
    print(f"\nModel: ring attention at L={L} tokens (Hq={H}, Hkv={G}, D={D}), "
          f"{rate / 1e9:.1f} GFLOP/s per rank (measured), {a.network_gbps:g} Gb/s links")
    print(f"{'ranks':>5} {'compute/step ms':>15} {'send/step ms':>12} {'hidden?':>8} {'call s':>8}")
    for p in (8, 16, 32, 64):
        chunk = L / (2 * p)
        pairs = (2 if not a.non_causal else 4) * chunk * chunk
        compute = pairs * 4 * D * H / rate
        send = 2 * (L / p) * G * D * 4 / link
        step = max(compute, send)
        print(f"{p:>5} {compute * 1e3:>15.1f} {send * 1e3:>12.2f} {'yes' if send <= compute else 'no':>8} "
              f"{p * step:>8.1f}")
    print(f"\nModel: data-parallel nanoGPT recipe ({a.train_params} parameters, one step "
          f"{a.train_step_ms:g} ms on one machine)")
    print(f"{'ranks':>5} {'compute ms':>10} {'all-reduce ms':>13} {'speed-up':>8}")
    for p in (8, 16, 32, 64):
        compute = a.train_step_ms / p
        allreduce = 2 * (p - 1) / p * a.train_params * 4 / link * 1e3
        print(f"{p:>5} {compute:>10.2f} {allreduce:>13.3f} {a.train_step_ms / (compute + allreduce):>8.1f}")


if __name__ == "__main__":
    main()
