#!/usr/bin/env python3
"""The cost of calling qkv from Python: qkv.scaled_dot_product_attention on NumPy
arrays against the same problem timed inside C++ by `qkv bench`, and PyTorch's own
CPU SDPA on the same tensors.

Cases: decode (N=1, S=4096, Hq=32, Hkv=8, D=128) and a causal prefill
(N=S=1024, Hq=Hkv=8, D=64), float32, the fast kernel, all cores, NaN/Inf check on
in both (the library's default; `qkv bench --check-finite`). Each round runs the
C++ bench (a median of --reps calls in its own process) and then the Python
median of as many calls, alternating round by round so that drift on a shared
machine hits both (PyTorch's rounds come after, apart); the report is the median over rounds and the ratio
Python / C++ (the issue's bar: decode within 10 %, prefill within 2 %). Threads
are bound to cores (bench/binding.py) unless OMP_PROC_BIND is set.

    ~/.cache/qkv/venv/bin/python bench/python_overhead.py [--rounds 7] [--reps 50]
        [--qkv build/release/qkv] [--json out.json]
"""

import argparse
import json
import os
import statistics
import sys
import time

from binding import bind_threads, run_on_all_cpus  # bench/

bind_threads()  # before qkv (and torch) load libgomp, which reads it once
import numpy as np  # noqa: E402

import qkv  # noqa: E402

CASES = {
    "decode": dict(batch=1, heads=32, kv_heads=8, n=1, s=4096, d=128, causal="none"),
    "prefill": dict(batch=1, heads=8, kv_heads=8, n=1024, s=1024, d=64, causal="top-left"),
}


def cpp_median_ms(binary, c, reps, warmup, threads):
    cmd = [binary, "bench", "--json", "--check-finite", "--kernel", "fast",
           "--threads", str(threads), "--reps", str(reps), "--warmup", str(warmup),
           "--batch", str(c["batch"]), "--heads", str(c["heads"]),
           "--kv-heads", str(c["kv_heads"]), "--n", str(c["n"]), "--s", str(c["s"]),
           "--d", str(c["d"]), "--causal", c["causal"]]
    # With all cores: libgomp has bound this thread to one, and children inherit that.
    out = run_on_all_cpus(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_ms"]


def median_ms(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def tensors(c):
    r = np.random.default_rng(0)
    q = r.standard_normal((c["batch"], c["heads"], c["n"], c["d"]), dtype=np.float32)
    k = r.standard_normal((c["batch"], c["kv_heads"], c["s"], c["d"]), dtype=np.float32)
    v = r.standard_normal((c["batch"], c["kv_heads"], c["s"], c["d"]), dtype=np.float32)
    return q, k, v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=0, help="calls per round (default per case)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--qkv", default=os.environ.get("QKV_BIN", "build/release/qkv"))
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    torch = None
    if not a.no_torch:
        import torch  # noqa: F811 (optional)
        import torch.nn.functional as F
    report = {}
    for name, c in CASES.items():
        reps = a.reps or (200 if name == "decode" else 15)
        q, k, v = tensors(c)
        causal = c["causal"] != "none"
        py = lambda: qkv.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True,
                                                      kernel="fast", threads=a.threads)
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
            th = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal,
                                                        enable_gqa=True)
        # C++ and Python alternate; PyTorch runs after them, on its own, so its
        # OpenMP workers (a second runtime in this process, spinning after each
        # call) never share the cores with a qkv timing.
        rows = []
        for i in range(a.rounds):
            cpp = cpp_median_ms(a.qkv, c, reps, a.warmup, a.threads)
            pyt = median_ms(py, reps, a.warmup)
            rows.append([cpp, pyt])
            print(f"{name} round {i + 1}: C++ {cpp:.4f} ms  Python {pyt:.4f} ms", file=sys.stderr)
        for i, row in enumerate(rows):
            tor = median_ms(th, reps, a.warmup) if torch is not None else float("nan")
            row.append(tor)
            print(f"{name} PyTorch round {i + 1}: {tor:.4f} ms", file=sys.stderr)
        cpp, pyt, tor = (statistics.median(r[j] for r in rows) for j in range(3))
        ratios = [r[1] / r[0] for r in rows]
        report[name] = dict(case=c, reps=reps, rounds=a.rounds, cpp_ms=cpp, python_ms=pyt,
                            torch_ms=tor, ratio=pyt / cpp,
                            ratio_median_of_rounds=statistics.median(ratios),
                            torch_threads=torch.get_num_threads() if torch is not None else None)
        print(f"{name:8s} C++ {cpp:9.4f} ms | Python {pyt:9.4f} ms | ratio {pyt / cpp:.3f} "
              f"(median of per-round ratios {statistics.median(ratios):.3f}) | "
              f"PyTorch SDPA {tor:9.4f} ms")
    # The fixed cost of a call (argument handling, views, GIL, wrapping the
    # result) on a problem with nothing to compute: a bound on the overhead that
    # the noise of a shared machine cannot hide.
    tiny = np.ones((1, 1, 1), np.float32)
    fixed_us = 1e3 * median_ms(lambda: qkv.scaled_dot_product_attention(tiny, tiny, tiny), 2000, 100)
    report["fixed_call_us"] = fixed_us
    print(f"fixed cost of a Python call (1x1x1 problem): {fixed_us:.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
