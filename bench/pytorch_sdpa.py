#!/usr/bin/env python3
"""qkv against PyTorch's scaled_dot_product_attention, side by side.

Runs `qkv bench --suite --json` (or one case with --case), then the same
shapes through torch.nn.functional.scaled_dot_product_attention on the CPU,
float32, at the same thread count, and prints both medians and their ratio.

PyTorch from PyPI is a large download, so it lives in this script's own
virtual environment ($QKV_VENV, default ~/.cache/qkv/venv, the one scripts/setup.sh fills; created and filled on first use), never in
the test command or CI. --qkv-only runs qkv without PyTorch; --dry-run only
says what it would do.

    python3 bench/pytorch_sdpa.py                   # the standard suite, all cores
    python3 bench/pytorch_sdpa.py --threads 1 --reps 3
    python3 bench/pytorch_sdpa.py --case "--n 2048 --d 128 --causal top-left"
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

ROOT = Path(__file__).resolve().parents[1]
# The venv scripts/setup.sh fills (torch, numpy): one 5 GB install for tests and benchmarks.
VENV = Path(os.environ.get("QKV_VENV", Path.home() / ".cache" / "qkv" / "venv"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", default=os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"),
                   help="the qkv binary (default build/release/qkv, or $QKV_BIN)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for both (default: all cores this process may use)")
    p.add_argument("--reps", type=int, default=5, help="timed runs per shape (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before them")
    p.add_argument("--case", metavar="ARGS",
                   help="one `qkv bench` case instead of the suite, e.g. \"--n 1024 --d 64\"")
    p.add_argument("--max-scores-gib", type=float, default=4.0,
                   help="skip a shape when PyTorch would take its math path and materialise "
                        "more than this many GiB of B*Hq*N*S float32 scores (default 4)")
    p.add_argument("--qkv-only", action="store_true", help="run qkv only; no PyTorch, no venv")
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    return p.parse_args()


def qkv_command(a):
    cmd = [str(a.qkv), "bench", "--json", "--threads", str(a.threads), "--reps", str(a.reps),
           "--warmup", str(a.warmup)]
    return cmd + (shlex.split(a.case) if a.case else ["--suite"])


def enter_venv():
    """Re-runs this script inside VENV, creating it and installing
    torch there first if needed; returns only when already inside."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if not python.exists():
        print(f"creating {VENV} (first run only)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    # NumPy too: torch warns on import without it.
    has_torch = subprocess.run([str(python), "-c", "import torch, numpy"],
                               capture_output=True).returncode == 0
    if not has_torch:
        print(f"installing torch into {VENV} from PyPI (large download, first run only)",
              file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "torch", "numpy"], check=True)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def run_qkv(a):
    r = subprocess.run(qkv_command(a), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qkv bench failed (exit {r.returncode}): {r.stderr.strip()}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def visible_mask(torch, n, s, causal, window):
    """[N, S] bool, True = may attend: the rule of qkv/attention.h."""
    i = torch.arange(n)[:, None]
    j = torch.arange(s)[None, :]
    diag = i + s - n if causal == "bottom-right" else i
    visible = torch.ones(n, s, dtype=torch.bool)
    if causal != "none" or window is not None:
        visible &= j <= diag
    if window is not None:
        visible &= j >= diag - window
    return visible


def sdpa_backend(torch, q, k, v, mask, is_causal, gqa):
    """The kernel SDPA will pick ("FLASH_ATTENTION", "MATH", ...), or
    "unknown" where this PyTorch does not say (private API)."""
    try:
        extra = {"enable_gqa": True} if gqa else {}
        choice = torch._fused_sdp_choice(q, k, v, attn_mask=mask, dropout_p=0.0,
                                         is_causal=is_causal, **extra)
        return torch.nn.attention.SDPBackend(choice).name
    except Exception:  # noqa: BLE001 - any failure just means "cannot tell"
        return "unknown"


def time_torch(row, a):
    """(median ms, SDPA backend) for one qkv JSON row, or (None, why skipped)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    b, hq, hkv, n, s, d, dv = (row[key]
                               for key in ("batch", "heads", "kv_heads", "n", "s", "d", "dv"))
    gen = torch.Generator().manual_seed(0)
    q = torch.rand(b, hq, n, d, generator=gen) * 2 - 1
    k = torch.rand(b, hkv, s, d, generator=gen) * 2 - 1
    v = torch.rand(b, hkv, s, dv, generator=gen) * 2 - 1
    is_causal = row["causal"] == "top-left" and row["window"] is None
    mask = None
    if not is_causal and (row["causal"] != "none" or row["window"] is not None):
        mask = visible_mask(torch, n, s, row["causal"], row["window"])
    kwargs = {"attn_mask": mask, "is_causal": is_causal}
    gqa = hq != hkv
    if gqa:
        try:  # PyTorch >= 2.5 reads shared K/V heads in place
            F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], enable_gqa=True)
            kwargs["enable_gqa"] = True
        except TypeError:  # older: copy each K/V head to its query heads, outside the timing
            k = k.repeat_interleave(hq // hkv, dim=1)
            v = v.repeat_interleave(hq // hkv, dim=1)
            gqa = False
    backend = sdpa_backend(torch, q, k, v, mask, is_causal, gqa)
    scores_gib = b * hq * n * s * 4 / 2**30
    if backend != "FLASH_ATTENTION" and scores_gib > a.max_scores_gib:
        return None, f"skipped: {backend} path would hold {scores_gib:.3g} GiB of scores"
    with torch.inference_mode():
        for _ in range(a.warmup):
            F.scaled_dot_product_attention(q, k, v, **kwargs)
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, **kwargs)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), backend.lower()


def print_table(rows, torch_results, threads):
    width = max(len("case"), *(len(r["case"]) for r in rows))
    print(f"{threads} thread{'s' if threads != 1 else ''}, float32; ms = median; "
          "torch/qkv > 1 means qkv is faster")
    print(f"{'case':<{width}} {'qkv ms':>10} {'qkv GFLOP/s':>11} {'torch ms':>10} "
          f"{'torch GFLOP/s':>13} {'torch/qkv':>9}  torch kernel")
    for row, (torch_ms, note) in zip(rows, torch_results):
        qkv_ms = row["median_ms"]
        line = f"{row['case']:<{width}} {qkv_ms:>10.3f} {row['gflops']:>11.1f} "
        if torch_ms is None:
            line += f"{'-':>10} {'-':>13} {'-':>9}  {note}"
        else:
            torch_gflops = row["flops"] / (torch_ms * 1e6)
            line += f"{torch_ms:>10.3f} {torch_gflops:>13.1f} {torch_ms / qkv_ms:>8.2f}x  {note}"
        print(line, flush=True)


def main():
    a = parse_args()
    if a.dry_run:
        print("would run:", shlex.join(qkv_command(a)))
        if not a.qkv_only:
            state = "exists" if (VENV / "bin" / "python").exists() else "would be created"
            print(f"then, in {VENV} ({state}; torch from PyPI if missing), every shape through "
                  f"torch.nn.functional.scaled_dot_product_attention with {a.threads} threads, "
                  f"{a.warmup} warm-up and {a.reps} timed runs")
        return
    if not a.qkv_only:
        enter_venv()
    print("running", shlex.join(qkv_command(a)), file=sys.stderr, flush=True)
    rows = run_qkv(a)
    if a.qkv_only:
        results = [(None, "not run (--qkv-only)")] * len(rows)
    else:
        results = []
        for row in rows:
            print("torch:", row["case"], file=sys.stderr, flush=True)
            results.append(time_torch(row, a))
    print_table(rows, results, a.threads)


if __name__ == "__main__":
    main()
