#!/usr/bin/env python3
"""The training recipe over several seeds: qkv train beside an independent
nanoGPT-style PyTorch run, each with its own random streams.

For each seed, alternating the two sides: `qkv train --seed S` with its
defaults (nanoGPT's CPU recipe for tiny Shakespeare: 4 layers, 4 heads, 128
wide, context 64, batch 12, 2000 steps, AdamW lr 1e-3 -> 1e-4, warm-up 100,
weight decay 0.1, betas 0.9/0.99, clip 1.0, exact GELU, no biases), then the
same recipe in PyTorch written the way nanoGPT writes it: its vocabulary (the
text's characters), torch.manual_seed(S), nanoGPT's initialisation, batches
from torch.randint, its learning-rate schedule and torch.optim.AdamW. Nothing
is shared but the text and the recipe: unlike bench/pytorch_train.py (a twin
fed qkv's weights and batches), this shows how far apart two honest
implementations land when only the seed changes.

Both final models are scored the same way: mean cross-entropy over every
position of the validation split (the last 10% of the text), cut into
consecutive windows of context + 1 characters: qkv's val_loss_full.

    python3 bench/recipe_seeds.py                  # seeds 1..5, 2 threads (~30 minutes)
    python3 bench/recipe_seeds.py --seeds 1 --iters 200   # a quick look
"""
import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytorch_sdpa  # bench/: the venv logic (QKV_VENV with torch and numpy)
import pytorch_train  # bench/: nanoGPT's architecture in PyTorch (build_model)

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    pytorch_train.add_common_arguments(p)
    p.add_argument("--seeds", type=int, default=5, help="seeds 1..N (default 5)")
    p.add_argument("--iters", type=int, default=2000, help="training steps (default 2000)")
    p.add_argument("--json", help="also write every run's figures to this file")
    a = p.parse_args()
    # The recipe: qkv train's defaults, which are nanoGPT's CPU recipe.
    a.layers, a.heads, a.kv_heads, a.embd, a.context, a.batch = 4, 4, 4, 128, 64, 12
    a.lr, a.min_lr, a.warmup, a.bias = 1e-3, 1e-4, min(100, a.iters // 10), False
    if a.seeds < 1 or a.iters < 1 or a.threads < 1:
        p.error("--seeds, --iters and --threads must be at least 1")
    return a


# ----------------------------------------------------------------- qkv --

def run_qkv(a, seed):
    """(val_loss_full, seconds) of `qkv train --seed seed` with its defaults."""
    with tempfile.TemporaryDirectory(prefix="qkv-seed-") as out:
        cmd = [str(a.qkv), "train", "--text", str(a.text), "--out", out, "--seed", str(seed),
               "--iters", str(a.iters), "--threads", str(a.threads), "--no-progress"]
        print("running", shlex.join(cmd), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"qkv train failed (exit {r.returncode}): {r.stderr.strip()}")
        full = [json.loads(l)["val_loss_full"] for l in open(Path(out) / "log.jsonl")
                if "val_loss_full" in l]
        if not full:
            sys.exit(f"qkv train: no val_loss_full in {out}/log.jsonl")
        return full[-1], seconds


# ------------------------------------------------------------- PyTorch --

class NanoGPTRun:
    """nanoGPT's train.py for shakespeare_char on the CPU, reduced to what the
    recipe uses (no dropout, no compile, no gradient accumulation)."""

    def __init__(self, a):
        import numpy as np
        import torch
        self.a, self.torch = a, torch
        torch.set_num_threads(a.threads)
        text = Path(a.text).read_bytes().decode("utf-8")
        chars = sorted(set(text))  # nanoGPT's prepare.py: no fallback id
        stoi = {c: i for i, c in enumerate(chars)}
        ids = torch.from_numpy(np.fromiter((stoi[c] for c in text), np.int64, len(text)))
        n = len(ids) * 9 // 10
        self.train_ids, self.val_ids, self.vocab = ids[:n], ids[n:], len(chars)

    def batch(self):
        torch, a = self.torch, self.a
        ix = torch.randint(len(self.train_ids) - a.context, (a.batch,))
        x = torch.stack([self.train_ids[i:i + a.context] for i in ix])
        y = torch.stack([self.train_ids[i + 1:i + 1 + a.context] for i in ix])
        return x, y

    def lr(self, it):  # nanoGPT's get_lr: linear warm-up, cosine to min_lr at max_iters
        a = self.a
        if it < a.warmup:
            return a.lr * (it + 1) / (a.warmup + 1)
        ratio = min(1.0, (it - a.warmup) / (a.iters - a.warmup))
        return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)

    def init(self, model):  # nanoGPT's _init_weights plus the scaled residual projections
        torch, nn = self.torch, self.torch.nn
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.a.layers))

    def val_loss_full(self, model):
        """Mean loss over consecutive (T + 1)-windows of the validation split."""
        torch, a = self.torch, self.a
        T, ids = a.context, self.val_ids
        windows = (len(ids) - 1) // T
        total = 0.0
        with torch.no_grad():
            for first in range(0, windows, a.batch):
                rows = range(first, min(windows, first + a.batch))
                x = torch.stack([ids[r * T:r * T + T] for r in rows])
                y = torch.stack([ids[r * T + 1:r * T + T + 1] for r in rows])
                total += model(x, y).item() * len(rows)
        return total / windows

    def run(self, seed):
        """(val_loss_full, seconds) of one training run from seed."""
        torch, a = self.torch, self.a
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        model = pytorch_train.build_model(torch, self.vocab, a)
        self.init(model)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=a.lr, betas=(0.9, 0.99))
        model.train()
        for it in range(a.iters):
            for g in opt.param_groups:
                g["lr"] = self.lr(it)
            x, y = self.batch()
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if not math.isfinite(loss.item()):
                sys.exit(f"torch: loss {loss.item()} at iteration {it} (seed {seed})")
        model.eval()
        return self.val_loss_full(model), time.perf_counter() - t0


# -------------------------------------------------------------- report --

def summary(values):
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, std


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    a = parse_args()
    if not Path(a.text).is_file():
        sys.exit(f"--text: {a.text} is not a file")
    if not Path(a.qkv).is_file():
        sys.exit(f"--qkv: {a.qkv} is not a file (build first: scripts/setup.sh)")
    pytorch_sdpa.__file__ = str(Path(__file__).resolve())  # enter_venv re-runs this script
    pytorch_sdpa.enter_venv()
    import torch
    nano = NanoGPTRun(a)
    runs = {"qkv": [], "torch": []}
    for seed in range(1, a.seeds + 1):  # alternating: load elsewhere hits both sides alike
        runs["qkv"].append(run_qkv(a, seed))
        print(f"torch: seed {seed}, {a.iters} steps", file=sys.stderr, flush=True)
        runs["torch"].append(nano.run(seed))
        print(f"seed {seed}: qkv {runs['qkv'][-1][0]:.4f}  torch {runs['torch'][-1][0]:.4f}",
              file=sys.stderr, flush=True)
    print(f"recipe: {a.layers} layers, {a.heads} heads, embd {a.embd}, context {a.context}, "
          f"batch {a.batch}, {a.iters} steps, {a.threads} threads; {cpu_model()}; "
          f"torch {torch.__version__}")
    print("validation loss over the whole split (consecutive windows), per seed:")
    print(f"  {'seed':>4} {'qkv':>8} {'PyTorch':>8}")
    for i in range(a.seeds):
        print(f"  {i + 1:>4} {runs['qkv'][i][0]:>8.4f} {runs['torch'][i][0]:>8.4f}")
    for label, name in (("qkv", "qkv train"), ("torch", "PyTorch nanoGPT-style")):
        mean, std = summary([r[0] for r in runs[label]])
        secs = statistics.median(r[1] for r in runs[label])
        print(f"  {name:<22} {mean:.4f} +- {std:.4f}  (median {secs:.0f} s per run)")
    if a.json:
        Path(a.json).write_text(json.dumps(
            {"cpu": cpu_model(), "torch": torch.__version__, "iters": a.iters,
             "threads": a.threads,
             "runs": {k: [{"seed": i + 1, "val_loss_full": v, "seconds": s}
                          for i, (v, s) in enumerate(r)] for k, r in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()
