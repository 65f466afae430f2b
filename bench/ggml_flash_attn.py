#!/usr/bin/env python3
"""qkv against ggml's CPU flash attention (ggml_flash_attn_ext), side by side.

Runs `qkv bench --json` for each shape, then the same shape as a one-node
ggml graph (ggml_flash_attn_ext, the kernel llama.cpp runs for attention on
the CPU) through ggml_graph_compute at the same thread count, and prints both
medians and their ratio.

ggml comes from the PyPI package ggml-python (ctypes bindings; its sdist
bundles ggml's source and builds it with CMake at install time), pinned and
built from source into this script's own virtual environment
(bench/.venv-ggml, created on first use; the build takes a few minutes).
It is built without -march=native but with the SIMD extensions this CPU has
(AVX2/FMA/F16C, and AVX-512 F/CD/VL/DQ/BW where present), as qkv picks its
widest path at run time.

    python3 bench/ggml_flash_attn.py                # the shapes below, all cores
    python3 bench/ggml_flash_attn.py --kv-type f16  # K/V as llama.cpp's default F16 cache
    python3 bench/ggml_flash_attn.py --case "--heads 8 --n 2048 --d 128 --causal top-left"
"""
import argparse
import ctypes
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_sdpa as sdpa  # noqa: E402  (qkv_command, run_qkv: how qkv bench is run)

ROOT = sdpa.ROOT
VENV = ROOT / "bench" / ".venv-ggml"
PACKAGE = "ggml-python==0.0.45"  # bundles ggml 0.15.3
STAMP = VENV / "ggml-build.txt"  # package and CMake flags of the build in VENV

CASES = [f"--heads 8 --n {n} --d {d}" + (" --causal top-left" if causal else "")
         for n in (1024, 4096) for d in (64, 128) for causal in (False, True)]
CASES += [f"--heads 32 --kv-heads 8 --n 1 --s {s} --d 128" for s in (4096, 32768)]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", default=os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"),
                   help="the qkv binary (default build/release/qkv, or $QKV_BIN)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for both (default: all cores this process may use)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per shape (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before them")
    p.add_argument("--case", metavar="ARGS", action="append",
                   help="a `qkv bench` case instead of the default shapes (repeatable), "
                        "e.g. \"--n 1024 --d 64\"")
    p.add_argument("--kv-type", choices=("f32", "f16"), default="f32",
                   help="ggml's K and V tensor type (default f32, as qkv; f16 halves K/V bytes)")
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    return p.parse_args()


def cmake_args():
    """GGML_NATIVE off (no -march=native); AVX2/FMA/F16C/BMI2 are then on by
    ggml's default; AVX-512 only where this CPU has what GGML_AVX512 compiles for."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    avx512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"} <= flags
    return ("-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF "
            f"-DGGML_AVX512={'ON' if avx512 else 'OFF'}")


def enter_venv():
    """Re-runs this script inside bench/.venv-ggml, creating it and building
    ggml-python there first if needed; returns only when already inside."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if not python.exists():
        print(f"creating {VENV} (first run only)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    want = f"{PACKAGE} {cmake_args()}"
    have = STAMP.read_text().strip() if STAMP.exists() else None
    if have != want:
        print(f"building {PACKAGE} from source into {VENV} with CMAKE_ARGS=\"{cmake_args()}\" "
              "(a few minutes, first run only)", file=sys.stderr, flush=True)
        env = dict(os.environ, CMAKE_ARGS=cmake_args(),
                   CMAKE_BUILD_PARALLEL_LEVEL=str(len(os.sched_getaffinity(0))))
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--force-reinstall", "--no-binary", "ggml-python", PACKAGE],
                       check=True, env=env)
        STAMP.write_text(want + "\n")
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def visible(np, n, s, causal, window):
    """[N, S] bool, True = may attend: the rule of qkv/attention.h (as pytorch_sdpa.visible_mask)."""
    i = np.arange(n)[:, None]
    j = np.arange(s)[None, :]
    diag = i + s - n if causal == "bottom-right" else i
    vis = np.ones((n, s), dtype=bool)
    if causal != "none" or window is not None:
        vis &= j <= diag
    if window is not None:
        vis &= j >= diag - window
    return vis


def time_ggml(row, a):
    """(median ms, max |ggml - float64 reference| over a few query rows) for one qkv JSON row."""
    import numpy as np
    import ggml
    from ggml import utils

    b, hq, hkv, n, s, d, dv = (row[key]
                               for key in ("batch", "heads", "kv_heads", "n", "s", "d", "dv"))
    kv_dtype = np.float32 if a.kv_type == "f32" else np.float16
    rng = np.random.default_rng(0)
    # numpy [B, H, L, D] row-major is ggml's [D, L, H, B] (ne[0] fastest): the layout
    # ggml_flash_attn_ext wants for q, k and v (v not transposed).
    q = rng.uniform(-1, 1, (b, hq, n, d)).astype(np.float32)
    k = rng.uniform(-1, 1, (b, hkv, s, d)).astype(kv_dtype)
    v = rng.uniform(-1, 1, (b, hkv, s, dv)).astype(kv_dtype)
    masked = row["causal"] != "none" or row["window"] is not None
    vis = visible(np, n, s, row["causal"], row["window"]) if masked else None
    # The mask is added to the scores: F16 [S, N] (numpy [N, S]), 0 or -inf,
    # broadcast over heads and batch. No mask at all when every pair is visible.
    mask = np.where(vis, 0.0, -np.inf).astype(np.float16) if masked else None

    out_bytes = b * n * hq * dv * 4
    mem = (q.nbytes + k.nbytes + v.nbytes + (mask.nbytes if masked else 0) + out_bytes
           + 8 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead() + (1 << 20))
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
    try:
        tq, tk, tv = (utils.from_numpy(x, ctx) for x in (q, k, v))
        tm = utils.from_numpy(mask, ctx) if masked else None
        out = ggml.ggml_flash_attn_ext(ctx, tq, tk, tv, tm, 1.0 / math.sqrt(d), 0.0, 0.0)
        gf = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(gf, out)
        plan = ggml.ggml_graph_plan(gf, a.threads, None)
        work = (ctypes.c_uint8 * max(plan.work_size, 1))()
        plan.work_data = ctypes.cast(work, ctypes.POINTER(ctypes.c_uint8))

        def run():
            status = ggml.ggml_graph_compute(gf, ctypes.byref(plan))
            if status != 0:
                raise RuntimeError(f"ggml_graph_compute returned {status}")

        for _ in range(a.warmup):
            run()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) * 1e3)

        # Check: the last head's last 4 query rows (under a causal mask they
        # see the most keys) against float64 arithmetic on the same inputs.
        # ggml [Dv, Hq, N, B] = numpy [B, N, Hq, Dv] (to_numpy drops trailing size-1 axes)
        res = utils.to_numpy(out).reshape(b, n, hq, dv)
        h = hq - 1
        hk = h // (hq // hkv)
        err = 0.0
        for i in range(max(0, n - 4), n):
            sc = k[0, hk].astype(np.float64) @ q[0, h, i].astype(np.float64) / math.sqrt(d)
            if masked:
                sc = np.where(vis[i], sc, -np.inf)
            p = np.exp(sc - sc.max())
            ref = (p / p.sum()) @ v[0, hk].astype(np.float64)
            err = max(err, float(np.abs(res[0, i, h].astype(np.float64) - ref).max()))
    finally:
        ggml.ggml_free(ctx)
    return statistics.median(times), err


def print_table(rows, results, a, header):
    width = max(len("case"), *(len(r["case"]) for r in rows))
    print(header)
    print(f"{a.threads} thread{'s' if a.threads != 1 else ''}, q and output float32, ggml K/V "
          f"{a.kv_type}; ms = median of {a.reps}; ggml/qkv > 1 means qkv is faster")
    print(f"{'case':<{width}} {'qkv ms':>10} {'qkv GFLOP/s':>11} {'ggml ms':>10} "
          f"{'ggml GFLOP/s':>12} {'ggml/qkv':>8} {'ggml max|err|':>13}")
    for row, (ggml_ms, err) in zip(rows, results):
        qkv_ms = row["median_ms"]
        print(f"{row['case']:<{width}} {qkv_ms:>10.3f} {row['gflops']:>11.1f} {ggml_ms:>10.3f} "
              f"{row['flops'] / (ggml_ms * 1e6):>12.1f} {ggml_ms / qkv_ms:>7.2f}x {err:>13.2e}",
              flush=True)


def main():
    a = parse_args()
    cases = a.case or CASES
    runs = [SimpleNamespace(qkv=a.qkv, threads=a.threads, reps=a.reps, warmup=a.warmup, case=c)
            for c in cases]
    if a.dry_run:
        for r in runs:
            print("would run:", shlex.join(sdpa.qkv_command(r)))
        state = "exists" if (VENV / "bin" / "python").exists() else "would be created"
        print(f"then, in {VENV} ({state}; {PACKAGE} built from source with "
              f"CMAKE_ARGS=\"{cmake_args()}\" if missing), each shape through "
              f"ggml_flash_attn_ext (K/V {a.kv_type}) with {a.threads} threads, "
              f"{a.warmup} warm-up and {a.reps} timed runs")
        return
    enter_venv()
    import ggml  # noqa: F401  (fail early, before the qkv runs)

    rows = []
    for r in runs:
        print("running", shlex.join(sdpa.qkv_command(r)), file=sys.stderr, flush=True)
        rows += sdpa.run_qkv(r)
    results = []
    for row in rows:
        print("ggml:", row["case"], file=sys.stderr, flush=True)
        results.append(time_ggml(row, a))
    stamp = STAMP.read_text().strip() if STAMP.exists() else PACKAGE
    print_table(rows, results, a, f"ggml: {stamp}")


if __name__ == "__main__":
    main()
