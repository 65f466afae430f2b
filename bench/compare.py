#!/usr/bin/env python3
"""qkv (float32 and bf16) against PyTorch SDPA (float32 and bf16) and, where
installed, ggml: the contenders alternate round by round on the same shapes.

Every round times each shape once per contender, in an order that rotates
from round to round, so a noisy neighbour (another build on the same cores)
slows every contender alike instead of whichever ran during it; each entry
of the table is the median over rounds of that round's median over --reps
runs. Ratios are taken of those medians. Measured on this machine: running one
side's reps and then the other's, keeping the best, reported 1.47x where
alternating gave 1.03x.

qkv runs as `qkv bench --json` (one process per shape, dtype and round, so
its peak RSS and its measured FMA peak and read bandwidth come with it; the
table prints the best of those peaks). PyTorch runs in this process: the
script re-executes itself under the venv that holds torch (--venv, default
$QKV_VENV or ~/.cache/qkv/venv; nothing is installed). ggml runs through
bench/ggml_flash_attn.py's build in bench/.venv-ggml when that exists;
otherwise the table says it is not installed. OpenMP threads are bound to
cores for every contender (bind_threads) unless OMP_PROC_BIND is set.

    python3 bench/compare.py                        # standard shapes, 5 rounds, all cores
    python3 bench/compare.py --rounds 7 --reps 3
    python3 bench/compare.py --case "--heads 8 --n 1024 --d 64"
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytorch_sdpa  # bench/: VENV, the venv that holds torch ($QKV_VENV)
from binding import bind_threads, run_on_all_cpus  # bench/

ROOT = Path(__file__).resolve().parents[1]
GGML_VENV = ROOT / "bench" / ".venv-ggml"

# bf16's speed-ups over float32 are quoted at the first (prefill) and the last (decode) shape.
STANDARD = [
    "--heads 8 --n 4096 --d 128",
    "--heads 8 --n 4096 --d 128 --causal top-left",
    "--heads 8 --n 2048 --d 64",
    "--heads 32 --kv-heads 8 --n 2048 --d 128",
    "--heads 32 --kv-heads 8 --n 1 --s 4096 --d 128",
    "--heads 32 --kv-heads 8 --n 1 --s 32768 --d 128",
]
CONTENDERS = ["qkv fp32", "qkv bf16", "torch fp32", "torch bf16", "ggml fp32"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", default=os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"),
                   help="the qkv binary (default build/release/qkv, or $QKV_BIN)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for every contender (default: all cores this process may use)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (at least 5)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per contender per round")
    p.add_argument("--case", metavar="ARGS", action="append",
                   help="a `qkv bench` case instead of the standard shapes (repeatable)")
    p.add_argument("--venv", type=Path, default=pytorch_sdpa.VENV,
                   help="virtual environment holding torch (not created or filled here)")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--json-out", type=Path, help="also write every measurement here")
    a = p.parse_args()
    if a.rounds < 5:
        p.error("--rounds: at least 5 (fewer rounds do not average out a shared machine)")
    return a


def enter_venv(a):
    """Re-runs this script under the venv's python when torch is there and
    this interpreter lacks it; returns when torch is importable or absent."""
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        pass
    python = a.venv / "bin" / "python"
    if os.environ.get("QKV_COMPARE_REEXEC") or not python.exists():
        return False
    ok = subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode == 0
    if not ok:
        return False
    os.environ["QKV_COMPARE_REEXEC"] = "1"
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
    return False  # not reached


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def run_qkv(a, case, dtype):
    cmd = [str(a.qkv), "bench", "--json", "--threads", str(a.threads), "--reps", str(a.reps),
           "--warmup", "1", "--dtype", dtype, *shlex.split(case)]
    r = run_on_all_cpus(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qkv bench failed (exit {r.returncode}): {shlex.join(cmd)}\n{r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


class Torch:
    """PyTorch SDPA on one shape, inputs made once per (shape, dtype)."""

    def __init__(self, threads):
        import torch
        self.torch = torch
        self.F = torch.nn.functional
        torch.set_num_threads(threads)
        self.inputs = {}

    def time(self, row, dtype, reps):
        torch, F = self.torch, self.F
        key = (row["case"].replace(" bf16", ""), dtype)
        if key not in self.inputs:
            self.inputs.clear()  # one shape's tensors at a time (decode K/V are large)
            b, hq, hkv, n, s, d, dv = (row[k] for k in
                                       ("batch", "heads", "kv_heads", "n", "s", "d", "dv"))
            gen = torch.Generator().manual_seed(0)
            t = torch.bfloat16 if dtype == "bf16" else torch.float32
            q = (torch.rand(b, hq, n, d, generator=gen) * 2 - 1).to(t)
            k = (torch.rand(b, hkv, s, d, generator=gen) * 2 - 1).to(t)
            v = (torch.rand(b, hkv, s, dv, generator=gen) * 2 - 1).to(t)
            kw = {"is_causal": row["causal"] == "top-left", "enable_gqa": hq != hkv}
            self.inputs[key] = (q, k, v, kw)
        q, k, v, kw = self.inputs[key]
        with torch.inference_mode():
            F.scaled_dot_product_attention(q, k, v, **kw)  # warm-up
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, **kw)
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def run_ggml(a, row):
    """ggml's median ms for the shape of qkv JSON `row` (K/V float32), timed by
    bench/ggml_flash_attn.py's time_ggml in its own venv, or None."""
    python = GGML_VENV / "bin" / "python"
    if not python.exists():
        return None
    code = ("import json, sys, types; sys.path.insert(0, sys.argv[1]); import ggml_flash_attn as g; "
            "a = types.SimpleNamespace(threads=int(sys.argv[2]), reps=int(sys.argv[3]), warmup=1, "
            "kv_type='f32'); print(g.time_ggml(json.loads(sys.stdin.read()), a)[0])")
    r = run_on_all_cpus([str(python), "-c", code, str(ROOT / "bench"), str(a.threads), str(a.reps)],
                        input=json.dumps(row), capture_output=True, text=True)
    if r.returncode != 0:
        print(f"ggml failed on {row['case']}: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return float(r.stdout.strip().splitlines()[-1])


def main():
    a = parse_args()
    bind_threads()
    have_torch = not a.no_torch and enter_venv(a)
    torch = Torch(a.threads) if have_torch else None
    have_ggml = (GGML_VENV / "bin" / "python").exists()
    cases = a.case or STANDARD
    active = [c for c in CONTENDERS
              if c.startswith("qkv") or (c.startswith("torch") and torch) or
              (c.startswith("ggml") and have_ggml)]
    times = {(c, s): [] for c in active for s in cases}   # per-round medians, ms
    rows = {}          # case -> the fp32 qkv JSON row (shape, flops)
    peaks = {"fma": 0.0, "mem": 0.0, "isa": "?"}
    for rnd in range(a.rounds):
        order = active[rnd % len(active):] + active[:rnd % len(active)]
        for case in cases:
            for who in order:
                if who.startswith("qkv"):
                    row = run_qkv(a, case, "bf16" if who.endswith("bf16") else "float32")
                    ms = row["median_ms"]
                    if who == "qkv fp32":
                        rows[case] = row
                    peaks["fma"] = max(peaks["fma"], row["peak_gflops"])
                    peaks["mem"] = max(peaks["mem"], row["mem_gbps"] or 0.0)
                    peaks["isa"] = row["isa"]
                elif who.startswith("torch"):
                    if case not in rows:
                        rows[case] = run_qkv(a, case, "float32")
                    ms = torch.time(rows[case], "bf16" if who.endswith("bf16") else "fp32", a.reps)
                else:
                    if case not in rows:
                        rows[case] = run_qkv(a, case, "float32")
                    ms = run_ggml(a, rows[case])
                if ms is not None:
                    times[(who, case)].append(ms)
            print(f"round {rnd + 1}/{a.rounds}: {case} done", file=sys.stderr, flush=True)

    med = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"CPU: {cpu_model()}; {a.threads} thread{'s' if a.threads != 1 else ''} "
          f"(OMP_PROC_BIND={os.environ['OMP_PROC_BIND']}); qkv isa "
          f"{peaks['isa']}; measured peaks (best of the rounds): FMA fp32 {peaks['fma']:.1f} "
          f"GFLOP/s, " + (f"memory read {peaks['mem']:.1f} GB/s" if peaks["mem"] > 0 else
                          "memory read not measured (qkv bench probes it for decode shapes only)"))
    print(f"{a.rounds} alternating rounds x {a.reps} reps; ms = median over rounds of each "
          "round's median; GFLOP/s over visible pairs")
    if not torch:
        print("PyTorch: not run (" + ("--no-torch" if a.no_torch else
                                      f"torch not importable here nor in {a.venv}") + ")")
    if not have_ggml:
        print(f"ggml: not installed ({GGML_VENV} absent; bench/ggml_flash_attn.py builds it)")
    width = max(len(rows[c]["case"]) for c in cases)
    head = f"{'case':<{width}}" + "".join(f" {w + ' ms':>14}" for w in active)
    head += f" {'bf16/fp32 qkv':>14}"
    if torch:
        head += f" {'torch/qkv fp32':>15} {'torch/qkv bf16':>15}"
    print(head)
    for case in cases:
        line = f"{rows[case]['case']:<{width}}"
        for who in active:
            ms = med.get((who, case))
            line += f" {ms:>14.3f}" if ms is not None else f" {'-':>14}"
        line += f" {med[('qkv fp32', case)] / med[('qkv bf16', case)]:>13.2f}x"
        if torch:
            line += f" {med[('torch fp32', case)] / med[('qkv fp32', case)]:>14.2f}x"
            line += f" {med[('torch bf16', case)] / med[('qkv bf16', case)]:>14.2f}x"
        print(line)
    print("GFLOP/s (flops of the visible pairs / median time):")
    for case in cases:
        f = rows[case]["flops"]
        print(f"{rows[case]['case']:<{width}}" +
              "".join(f" {who}: {f / (med[(who, case)] * 1e6):.1f}" for who in active
                      if (who, case) in med))
    if a.json_out:
        a.json_out.write_text(json.dumps(
            {"cpu": cpu_model(), "threads": a.threads, "rounds": a.rounds, "reps": a.reps,
             "peaks": peaks, "times_ms": {f"{w} | {c}": v for (w, c), v in times.items()}},
            indent=1))


if __name__ == "__main__":
    main()
