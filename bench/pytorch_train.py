#!/usr/bin/env python3
"""qkv train against PyTorch, side by side: the same GPT, the same steps.

Runs `qkv train` for a fixed number of iterations, then trains the same
model in PyTorch (nanoGPT's architecture: learned positions, biases
everywhere, GELU (exact, as qkv train's models), tied LM head) on the CPU, float32, at the same
thread count, with qkv's initialisation (NumPy's default_rng(seed), drawn in
parameter order), qkv's batches (one default_rng per iteration) and qkv's
optimiser (AdamW, betas 0.9/0.99, weight decay 0.1 on matrices, gradient
clipping at 1.0, warm-up then cosine decay); --rounds times, alternating.
Prints ms/iteration for both, their ratio, and both sides' training loss at
the first iterations: the same weights and batches give the same loss at
iteration 0 up to float32 rounding, which checks that the two models are the
same model. --dtype bf16 (or both) also runs the mixed-precision contenders:
`qkv train --dtype bf16`, and PyTorch under torch.autocast("cpu", bfloat16)
(its Linear layers and SDPA in bf16, float32 weights and optimiser), the
usual way to train in bf16 on a CPU. Both sides' OpenMP threads are bound to
cores (bench/binding.py) unless OMP_PROC_BIND is set.

PyTorch lives in $QKV_VENV (default ~/.cache/qkv/venv, filled by
scripts/setup.sh; created on first use otherwise, as pytorch_sdpa.py does). --qkv-only runs qkv alone (no PyTorch, no venv),
--torch-only PyTorch alone; --dry-run only says what it would do.

    python3 bench/pytorch_train.py                     # 4x4x128, context 64, batch 12, 50 iters, 2 threads
    python3 bench/pytorch_train.py --iters 200 --threads 1
    python3 bench/pytorch_train.py --torch-only --iters 10
    python3 bench/pytorch_train.py --dtype both        # qkv, qkv bf16, torch, torch bf16
"""
import argparse
import json
import math
import os
import shlex
import statistics
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytorch_sdpa  # bench/: the venv logic (QKV_VENV with torch and numpy)
from binding import bind_threads, run_on_all_cpus  # bench/

ROOT = Path(__file__).resolve().parents[1]


def add_common_arguments(p):
    """--qkv, --text and --threads, as this script and recipe_seeds.py take them."""
    p.add_argument("--qkv", default=os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"),
                   help="the qkv binary (default build/release/qkv, or $QKV_BIN)")
    p.add_argument("--text", default=ROOT.parent / "shared" / "data" / "tinyshakespeare.txt",
                   help="UTF-8 training text (default ../shared/data/tinyshakespeare.txt "
                        "from the repository root)")
    p.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(p)
    p.add_argument("--iters", type=int, default=50, help="training iterations (default 50)")
    p.add_argument("--rounds", type=int, default=5,
                   help="run both sides this many times, alternating (qkv, torch, qkv, ...), and "
                        "report the median round of each side and the median of the per-round "
                        "ratios (default 5)")
    p.add_argument("--skip", type=int, default=5,
                   help="first iterations left out of the median ms/iteration (default 5)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    p.add_argument("--bias", action="store_true",
                   help="biases in Linear and LayerNorm (qkv train --bias); off, as in nanoGPT")
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=10,
                   help="linear warm-up iterations, then cosine decay to --min-lr at --iters "
                        "(default 10, so a short run goes through both)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--show", type=int, default=5,
                   help="iterations whose losses are printed side by side (the first N, and the "
                        "last; default 5)")
    p.add_argument("--dtype", choices=["float32", "bf16", "both"], default="float32",
                   help="float32 (default), bf16 (qkv train --dtype bf16; PyTorch under "
                        "bf16 autocast), or both: four contenders per round")
    p.add_argument("--out", help="keep qkv's output directory here (default: a temporary one)")
    p.add_argument("--check-init", action="store_true",
                   help="also run `qkv train --stop-at 0` and compare its initial weights "
                        "(model.safetensors) with PyTorch's, tensor by tensor")
    side = p.add_mutually_exclusive_group()
    side.add_argument("--qkv-only", action="store_true", help="run qkv only; no PyTorch, no venv")
    side.add_argument("--torch-only", action="store_true", help="run PyTorch only; no qkv")
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    a = p.parse_args()
    if a.kv_heads is None:
        a.kv_heads = a.heads
    if a.iters < 1 or a.threads < 1 or a.rounds < 1 or a.skip < 0:
        p.error("--iters, --threads and --rounds must be positive, --skip non-negative")
    if a.heads < 1 or a.kv_heads < 1 or a.embd % a.heads or a.heads % a.kv_heads:
        p.error("--heads must divide --embd, and --kv-heads must divide --heads")
    return a


def qkv_command(a, out_dir, stop_at_0=False, dtype="float32"):
    """`qkv train` with this run's options. Evaluation (and the checkpoint
    it writes) happens only at iteration 0 and at the end, on one batch."""
    cmd = [str(a.qkv), "train", "--text", str(a.text), "--out", str(out_dir),
           "--layers", str(a.layers), "--heads", str(a.heads), "--kv-heads", str(a.kv_heads),
           "--embd", str(a.embd), "--context", str(a.context), "--batch", str(a.batch),
           "--iters", str(a.iters), "--lr", repr(a.lr), "--min-lr", repr(a.min_lr),
           "--warmup", str(a.warmup), "--seed", str(a.seed), "--threads", str(a.threads),
           "--eval-interval", str(a.iters + 1), "--eval-iters", "1", "--log-interval", "1",
           "--no-progress"] + (["--bias"] if a.bias else [])
    cmd += ["--dtype", dtype] if dtype != "float32" else []
    return cmd + (["--stop-at", "0"] if stop_at_0 else [])


def run_qkv(a, out_dir, dtype):
    """(step ms per iteration, train loss per iteration) from DIR/log.jsonl."""
    cmd = qkv_command(a, out_dir, dtype=dtype)
    print("running", shlex.join(cmd), file=sys.stderr, flush=True)
    r = run_on_all_cpus(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qkv train failed (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    ms, losses = {}, {}
    with open(Path(out_dir) / "log.jsonl") as f:
        for line in f:
            j = json.loads(line)
            if "train_loss" in j and "tokens_per_s" in j:
                # The step's own time (batch, forward, backward, clip, AdamW),
                # without the evaluation and checkpoint of iteration 0.
                ms[j["iter"]] = a.batch * a.context / j["tokens_per_s"] * 1e3
                losses[j["iter"]] = j["train_loss"]
    missing = [i for i in range(a.iters) if i not in ms]
    if missing:
        sys.exit(f"qkv train: {Path(out_dir) / 'log.jsonl'} has no train_loss/tokens_per_s for "
                 f"iterations {missing[:5]}{'...' if len(missing) > 5 else ''}")
    return [ms[i] for i in range(a.iters)], [losses[i] for i in range(a.iters)]


# ----------------------------------------------------- machine load --

class OtherLoad:
    """How many cores other processes kept busy while a block ran: the
    machine's busy CPU time (/proc/stat) minus this process's and its
    children's, over the wall time. None where /proc/stat is unreadable."""

    def __enter__(self):
        self.t0, self.busy0, self.own0 = time.perf_counter(), self.busy(), self.own()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        busy = self.busy()
        self.cores = (None if busy is None or self.busy0 is None or wall <= 0 else
                      max(0.0, (busy - self.busy0) - (self.own() - self.own0)) / wall)

    @staticmethod
    def busy():
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        # user nice system idle iowait irq softirq steal: all but idle and iowait.
        return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def own():
        return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
                   for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


# ---------------------------------------------------------------- data --

def load_data(np, path):
    """ids of the first 90% (train) as int64, and the vocabulary size: the
    text's distinct characters in code-point order, plus qkv's fallback id
    for unseen characters at the end."""
    text = Path(path).read_bytes().decode("utf-8")  # bytes: no newline translation
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((stoi[c] for c in text), dtype=np.int64, count=len(text))
    return ids[: len(ids) * 9 // 10], len(chars) + 1


def get_batch(np, train, it, a):
    """qkv's training batch of iteration `it`: x, y [B, T] (y = x shifted)."""
    stream, index = 0, it
    g = np.random.default_rng((a.seed * 1000003 + stream * 0x9E3779B97F4A7C15 + index) % 2**64)
    span = len(train) - a.context
    offs = [int(g.random() * span) for _ in range(a.batch)]
    x = np.stack([train[o: o + a.context] for o in offs])
    y = np.stack([train[o + 1: o + a.context + 1] for o in offs])
    return x, y


def learning_rate(it, a):
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    if it >= a.iters:
        return a.min_lr
    ratio = (it - a.warmup) / (a.iters - a.warmup)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


# --------------------------------------------------------------- model --

def param_order(a):
    """qkv's parameters in GPT::init's order (nanoGPT state_dict names)."""
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for layer in range(a.layers):
        p = f"transformer.h.{layer}."
        for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            names.append(p + n)
    names += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    return [n for n in names if a.bias or not n.endswith(".bias")]


def init_weights(np, a, shapes):
    """GPT::init: one default_rng(seed) drawn in parameter order; biases 0
    and LayerNorm weights 1 (no draws); the rest N(0, 0.02), the residual
    projections N(0, 0.02 / sqrt(2 L)); float32."""
    rng = np.random.default_rng(a.seed)
    out = {}
    for name in param_order(a):
        shape = shapes[name]
        if name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        elif ".ln_" in name:
            out[name] = np.ones(shape, np.float32)
        else:
            sd = 0.02 / math.sqrt(2 * a.layers) if "c_proj.weight" in name else 0.02
            out[name] = rng.normal(0.0, sd, size=shape).astype(np.float32)
    return out


def build_model(torch, vocab, a):
    nn, F = torch.nn, torch.nn.functional
    C, H, Hkv, hs = a.embd, a.heads, a.kv_heads, a.embd // a.heads
    try:  # PyTorch >= 2.5 reads shared K/V heads in place
        z = torch.zeros(1, 2, 1, 2)
        F.scaled_dot_product_attention(z, z[:, :1], z[:, :1], enable_gqa=True)
        has_gqa = True
    except TypeError:
        has_gqa = False

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, (H + 2 * Hkv) * hs, bias=a.bias)  # [q heads | k heads | v heads]
            self.c_proj = nn.Linear(C, C, bias=a.bias)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.c_attn(x).split([H * hs, Hkv * hs, Hkv * hs], dim=2)
            q = q.view(B, T, H, hs).transpose(1, 2)
            k = k.view(B, T, Hkv, hs).transpose(1, 2)
            v = v.view(B, T, Hkv, hs).transpose(1, 2)
            extra = {}
            if H != Hkv:  # query head h reads K/V head h // (H / Hkv)
                if has_gqa:
                    extra["enable_gqa"] = True
                else:
                    k = k.repeat_interleave(H // Hkv, dim=1)
                    v = v.repeat_interleave(H // Hkv, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)  # scale 1/sqrt(hs)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C, bias=a.bias)
            self.c_proj = nn.Linear(4 * C, C, bias=a.bias)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))  # exact (erf): config.json "gelu": "exact"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5, bias=a.bias)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(C, eps=1e-5, bias=a.bias)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, C),
                wpe=nn.Embedding(a.context, C),
                h=nn.ModuleList(Block() for _ in range(a.layers)),
                ln_f=nn.LayerNorm(C, eps=1e-5, bias=a.bias)))

        def forward(self, idx, targets):
            t = self.transformer
            x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
            for block in t.h:
                x = block(x)
            logits = F.linear(t.ln_f(x), t.wte.weight)  # tied LM head, no bias
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


class TorchRun:
    """The PyTorch side: the data and qkv's initial weights, made once; each
    call of train() builds the model afresh from them and trains it."""

    def __init__(self, a):
        import numpy as np
        import torch

        self.a, self.np, self.torch = a, np, torch
        torch.set_num_threads(a.threads)
        self.train_ids, self.vocab = load_data(np, a.text)
        if len(self.train_ids) <= a.context:
            sys.exit(f"--text: {a.text} is too short for --context {a.context}")
        shapes = {n: tuple(p.shape) for n, p in build_model(torch, self.vocab, a).named_parameters()}
        assert sorted(shapes) == sorted(param_order(a)), (sorted(shapes), sorted(param_order(a)))
        self.init = init_weights(np, a, shapes)  # {name: float32 array}
        self.batches = [get_batch(np, self.train_ids, it, a) for it in range(a.iters)]

    def train(self, dtype):
        """(step ms per iteration, train loss per iteration); dtype bf16 runs
        the forward under torch.autocast("cpu", torch.bfloat16)."""
        import contextlib
        a, torch = self.a, self.torch
        cast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16"
                else contextlib.nullcontext)
        model = build_model(torch, self.vocab, a)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(torch.from_numpy(self.init[n]))
        # Weight decay on the matrices and embeddings (every 2-D tensor), as
        # qkv's ParamInfo::decay; not on biases or LayerNorm.
        names = param_order(a)
        decay = [params[n] for n in names if params[n].dim() >= 2]
        no_decay = [params[n] for n in names if params[n].dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
        model.train()
        ms, losses = [], []
        for it in range(a.iters):
            x, y = (torch.from_numpy(t) for t in self.batches[it])
            lr = learning_rate(it, a)
            for group in opt.param_groups:
                group["lr"] = lr
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with cast():
                loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            ms.append((time.perf_counter() - t0) * 1e3)
            losses.append(loss.item())
            if not math.isfinite(losses[-1]):
                sys.exit(f"torch: loss {losses[-1]} at iteration {it}")
        return ms, losses


# ---------------------------------------------------------- init check --

def read_safetensors(np, path):
    """{name: float32 array} from a safetensors file (F32 tensors only)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8: 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + begin: 8 + n + end], dtype="<f4").reshape(info["shape"])
    return out


def check_init(a, init):
    """Runs `qkv train --stop-at 0` (which checkpoints the initial weights)
    and compares them with `init`. Returns lines to print."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="qkv-init-") as d:
        cmd = qkv_command(a, d, stop_at_0=True)
        print("running", shlex.join(cmd), file=sys.stderr, flush=True)
        r = run_on_all_cpus(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return [f"init check: qkv train --stop-at 0 failed (exit {r.returncode}): "
                    f"{r.stderr.strip()}"]
        theirs = read_safetensors(np, Path(d) / "model.safetensors")
    lines = []
    if sorted(theirs) != sorted(init):
        only_q = sorted(set(theirs) - set(init))
        only_t = sorted(set(init) - set(theirs))
        lines.append(f"init check: names differ; only in qkv: {only_q}, only in torch: {only_t}")
    for name in param_order(a):
        if name not in theirs:
            continue
        q, t = theirs[name], init[name]
        if q.shape != t.shape:
            lines.append(f"init check: {name}: qkv shape {list(q.shape)}, torch {list(t.shape)}")
            continue
        diff = float(np.max(np.abs(q.astype(np.float64) - t))) if q.size else 0.0
        if diff:
            lines.append(f"init check: {name}: max |qkv - torch| = {diff:.3g}")
    if not lines:
        lines.append(f"init check: all {len(init)} tensors of qkv's initial checkpoint equal "
                     f"PyTorch's, bit for bit")
    return lines


# -------------------------------------------------------------- report --

def median_ms(ms, skip):
    return statistics.median(ms[skip:] if len(ms) > skip else ms)


def print_report(a, vocab, sides, init_lines):
    """sides: {"qkv" | "torch": [(ms list, loss list, other cores), ...] per round}."""
    if vocab is not None:
        C, hs = a.embd, a.embd // a.heads
        per_layer = (4 * C + (a.heads + 2 * a.kv_heads) * hs * (C + 1) + C * C + C
                     + 4 * C * C + 4 * C + 4 * C * C + C)
        n_params = vocab * C + a.context * C + a.layers * per_layer + 2 * C
    print(f"model: {a.layers} layers, {a.heads} heads ({a.kv_heads} kv), embd {a.embd}, "
          f"context {a.context}, batch {a.batch}"
          + (f", vocab {vocab}, {n_params / 1e6:.2f}M parameters" if vocab else ""))
    skip = min(a.skip, a.iters - 1)
    rounds = len(next(iter(sides.values())))
    dtypes = {"float32": "float32", "bf16": "bf16 mixed precision", "both": "float32 and bf16"}
    print(f"{a.threads} thread{'s' if a.threads != 1 else ''}, {dtypes[a.dtype]}, {a.iters} iterations"
          + (f", {rounds} rounds alternating" if rounds > 1 else "")
          + f"; ms/iter = median step time over iterations {skip}..{a.iters - 1}"
          + (", then the median over rounds" if rounds > 1 else ""))
    per_round, busy = {}, []
    for label, runs in sides.items():
        medians = [median_ms(ms, skip) for ms, _, _ in runs]
        per_round[label] = medians
        mid = statistics.median(medians)
        notes = [f"{a.batch * a.context / mid:.1f}k tok/s"]
        others = [o for _, _, o in runs if o is not None]
        if others:
            notes.append(f"other processes used up to {max(others):.1f} cores meanwhile")
            if max(others) > 0.25:
                busy.append(label)
        if rounds > 1:
            notes.append("rounds " + ", ".join(f"{m:.1f}" for m in medians))
        print(f"  {label + ' ms/iter':<22}{mid:>10.2f}   ({'; '.join(notes)})")
    for t in (l for l in per_round if l.startswith("torch")):
        for q in (l for l in per_round if l.startswith("qkv")):
            ratios = [tt / qq for qq, tt in zip(per_round[q], per_round[t])]
            print(f"  {t + '/' + q:<22}{statistics.median(ratios):>9.2f}x   (median of the per-round "
                  f"ratios {', '.join(f'{r:.2f}' for r in ratios)}; above 1: qkv is faster)")
    if busy:
        print(f"warning: the machine was busy during {' and '.join(busy)}'s rounds; worker "
              f"threads wait for each other, so its time may be far too slow: rerun when it is "
              f"quiet", flush=True)
    for label, runs in sides.items():
        if any(losses != runs[0][1] for _, losses, _ in runs[1:]):
            print(f"note: {label}'s losses differ from round to round (not deterministic)")
    for line in init_lines:
        print(line)
    losses = {label: runs[0][1] for label, runs in sides.items()}
    both = "qkv" in losses and "torch" in losses
    print("train loss" + ("" if both else " (one side only)") + ":")
    print(f"  {'iter':>5}" + "".join(f" {label:>12}" for label in losses)
          + (f" {'|qkv-torch|':>12}" if both else ""))
    for i in sorted(set(range(min(a.show, a.iters))) | {a.iters - 1}):
        print(f"  {i:>5}" + "".join(f" {l[i]:>12.6f}" for l in losses.values())
              + (f" {abs(losses['qkv'][i] - losses['torch'][i]):>12.2e}" if both else ""))


def main():
    a = parse_args()
    bind_threads()
    dtypes = ["float32", "bf16"] if a.dtype == "both" else [a.dtype]
    if a.dry_run:
        if not a.torch_only:
            for dtype in dtypes:
                print("would run:", shlex.join(qkv_command(a, a.out or "TMPDIR", dtype=dtype)),
                      f"({a.rounds} time{'s' if a.rounds != 1 else ''})")
        if not a.qkv_only:
            venv = pytorch_sdpa.VENV
            state = "exists" if (venv / "bin" / "python").exists() else "would be created"
            print(f"{'then' if not a.torch_only else 'run'}, in {venv} ({state}; torch from PyPI "
                  f"if missing), the same model for {a.iters} iterations in PyTorch with "
                  f"{a.threads} threads ({' and '.join(dtypes)}; bf16 under torch.autocast)")
        return
    if not Path(a.text).is_file():
        sys.exit(f"--text: {a.text} is not a file")
    if not a.qkv_only:
        # enter_venv re-executes its module's __file__ inside bench/.venv:
        # point it at this script.
        pytorch_sdpa.__file__ = str(Path(__file__).resolve())
        pytorch_sdpa.enter_venv()
        print("torch: preparing data and initial weights", file=sys.stderr, flush=True)
        torch_run = TorchRun(a)
    label = lambda side, dtype: side + ("" if dtype == "float32" else " bf16")
    sides = {}
    for dtype in dtypes:
        if not a.torch_only:
            sides[label("qkv", dtype)] = []
        if not a.qkv_only:
            sides[label("torch", dtype)] = []
    # Rounds alternate the contenders, so a burst of load elsewhere on the
    # machine is less likely to hit only one of them.
    for r in range(a.rounds):
        for dtype in dtypes:
            if not a.torch_only:
                out = a.out or tempfile.mkdtemp(prefix="qkv-train-")
                try:
                    Path(out).mkdir(parents=True, exist_ok=True)
                    with OtherLoad() as load:
                        ms, losses = run_qkv(a, out, dtype)
                finally:
                    if not a.out:
                        shutil.rmtree(out, ignore_errors=True)
                sides[label("qkv", dtype)].append((ms, losses, load.cores))
            if not a.qkv_only:
                print(f"torch {dtype}: {a.iters} iterations", file=sys.stderr, flush=True)
                with OtherLoad() as load:
                    ms, losses = torch_run.train(dtype)
                sides[label("torch", dtype)].append((ms, losses, load.cores))
    init_lines = (check_init(a, torch_run.init)
                  if a.check_init and "qkv" in sides and "torch" in sides else [])
    print_report(a, None if a.qkv_only else torch_run.vocab, sides, init_lines)


if __name__ == "__main__":
    main()
