#!/usr/bin/env python3
"""Text generation with decoders of real models' shapes: qkv against PyTorch
eager (transformers) and llama.cpp, alternated round by round on the same
weights.

Models (--models, random weights made once by transformers into --cache,
each with a tokenizer trained on --text in its family's format):
  gpt2-124m   GPT-2 124M's shape: 12 layers, width 768, 12 heads, vocabulary
              50257 (byte-level BPE), 1024 positions, tied head;
  tinyllama   TinyLlama-1.1B's shape: 22 layers, width 2048, 32 heads over 4
              key/value heads, intermediate 5632, vocabulary 32000
              (SentencePiece-style BPE with byte fallback, "<s> $A");
  tinyllama-bpe  the same shape with a byte-level BPE tokenizer (as Llama 3's),
              which a GGUF file carries in a form qkv reads;
  llama3-8b   Llama-3-8B's shape: 32 layers, width 4096, 32 heads over 8
              key/value heads, intermediate 14336, vocabulary 128256 in Llama
              3's tokenizer.json format (its split, whole words kept,
              "<|begin_of_text|> $A"); its 16 GB of random bf16 weights are
              written tensor by tensor (no float32 copy), for the quantized
              types only.
Each in float32 and bf16 (--dtypes): the folder's weights stored in that
dtype; qkv runs generate(dtype=...), PyTorch the model in that dtype.
Quantized types (--dtypes q8_0,q4_0,q4_k_m,q5_k_m,q6_k; all but tinyllama):
the float32 folder (llama3-8b's bf16 one) converted to GGUF by llama.cpp's converter, then
quantized by its llama-quantize (--llama-quantize); qkv (Model.load of
the file) and llama.cpp run that same file, PyTorch sits out.

Workload: a prompt of --prompt-tokens tokens (the start of --text), then
--new-tokens greedy tokens. Prefill is the time to the first new token
(generate one token); decode is the time of the other tokens over their
count (generate 1 + new tokens, less the prefill of that round). Every
token is generated: no end-of-text stops a run.

llama.cpp runs when --llama-bench names its llama-bench binary and
--llama-convert its convert_hf_to_gguf.py: each folder is converted once, by
that converter, to GGUF F32 or BF16 beside the folder (a GPT-2 folder's
tokenizer, trained here, is one the converter does not know by its hash: it
is told that its pre-tokenizer is GPT-2's, which it is); prefill is
`llama-bench -p P -n 0`, decode `llama-bench -p 0 -n N -d P` (N tokens after
P in the cache), each one repetition a round at --threads.

Before timing, qkv's float32 greedy tokens are compared with transformers'
(a step where transformers' own two best logits lie within 1e-4 may differ).
Each contender runs in a process of its own, as in bench/embed.py; per round
each contender is timed once, in an order that rotates; entries are medians
over rounds and ratios are of those medians. Decode is reported with its
effective read bandwidth: the bytes of the weights each token reads (the
layers' and the head's) times tokens/s. For PyTorch and qkv, the seconds
their process took to load the model once its library was imported (the
import, the same whatever the model, is left out), and its peak resident
memory over the whole run (the Python interpreter and its libraries
included), beside the weights' size.

    python3 bench/generate.py                                   # both models, both dtypes, 5 rounds
    python3 bench/generate.py --models gpt2-124m --dtypes bf16 --rounds 3
"""
import argparse
import json
import mmap
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from importlib.util import find_spec
from functools import partial
from pathlib import Path

from binding import ALL_CPUS, bind_threads  # bench/
from compare import cpu_model  # bench/
from pytorch_train import OtherLoad  # bench/: the cores other processes kept busy
from worker import Worker, peak_rss  # bench/: one contender per process
import pytorch_sdpa  # bench/: VENV, the venv that holds torch ($QKV_VENV)

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ["torch", "qkv"]  # and "llama.cpp", with --llama-bench
SHAPES = {
    "gpt2-124m": dict(family="gpt2", vocab=50257, config=dict(
        n_layer=12, n_embd=768, n_head=12, n_positions=1024, n_ctx=1024, n_inner=None,
        activation_function="gelu_new")),
    "tinyllama": dict(family="llama", vocab=32000, config=dict(
        num_hidden_layers=22, hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
        intermediate_size=5632, max_position_embeddings=2048, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False)),
}
SHAPES["tinyllama-bpe"] = dict(SHAPES["tinyllama"], tokenizer="gpt2")
SHAPES["llama3-8b"] = dict(family="llama", tokenizer="llama3", vocab=128256, big=True, config=dict(
    num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    intermediate_size=14336, max_position_embeddings=8192, rms_norm_eps=1e-5,
    rope_theta=500000.0, tie_word_embeddings=False))
# The pre-tokenizer llama.cpp's converter is told for each tokenizer format
# (it knows tokenizers by a hash of their output on a fixed text; these are
# trained here); SentencePiece ("llama") needs none.
CONVERT_PRE = {"gpt2": "gpt-2", "llama3": "llama-bpe"}
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QUANTIZED = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M", "q6_k": "Q6_K"}  # --dtypes -> llama-quantize's type
PAUSE_S = 0.2  # between two contenders' timings: the last one's threads stop spinning
# Runs convert_hf_to_gguf.py (argv[2]) on argv[3:], the folder's trained
# tokenizer taken for the pre-tokenizer named argv[1] (CONVERT_PRE).
CONVERT = """import os, runpy, sys
pre, convert = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(convert))
sys.argv = [convert] + sys.argv[3:]
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
runpy.run_path(convert, run_name="__main__")
"""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(SHAPES), help="comma-separated, from " + ", ".join(SHAPES))
    p.add_argument("--dtypes", default="float32,bf16",
                   help="comma-separated, from float32, bf16, " + ", ".join(QUANTIZED) + " (the quantized ones need llama.cpp)")
    p.add_argument("--text", type=Path, default=ROOT.parent / "shared" / "data" / "tinyshakespeare.txt",
                   help="UTF-8 text for the tokenizers and the prompt (default ../shared/data/tinyshakespeare.txt)")
    p.add_argument("--prompt-tokens", type=int, default=512, help="tokens of the prompt")
    p.add_argument("--new-tokens", type=int, default=128, help="tokens generated after it")
    p.add_argument("--threads", type=int, default=2, help="threads for every contender")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (fewer than 5: a smoke run)")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "qkv" / "generate",
                   help="where the model folders are kept between runs")
    p.add_argument("--venv", type=Path, default=pytorch_sdpa.VENV,
                   help="virtual environment holding torch, transformers, tokenizers and qkv")
    p.add_argument("--llama-bench", type=Path, default=os.environ.get("LLAMA_BENCH"),
                   help="llama.cpp's llama-bench binary (default $LLAMA_BENCH; without it, no llama.cpp)")
    p.add_argument("--llama-convert", type=Path, default=os.environ.get("LLAMA_CONVERT"),
                   help="llama.cpp's convert_hf_to_gguf.py (default $LLAMA_CONVERT), its gguf-py beside it")
    p.add_argument("--llama-quantize", type=Path, default=os.environ.get("LLAMA_QUANTIZE"),
                   help="llama.cpp's llama-quantize (default $LLAMA_QUANTIZE), for the quantized --dtypes")
    p.add_argument("--json", type=Path, help="also write every measurement here")
    a = p.parse_args()
    if (a.llama_bench is None) != (a.llama_convert is None):
        p.error("--llama-bench and --llama-convert go together")
    for path in (a.llama_bench, a.llama_convert):
        if path is not None and not path.is_file():
            p.error(f"no such file: {path}")
    a.models = [m.strip() for m in a.models.split(",")]
    a.dtypes = [d.strip() for d in a.dtypes.split(",")]
    if not all(m in SHAPES for m in a.models):
        p.error(f"--models: expected names from {', '.join(SHAPES)}, found {','.join(a.models)!r}")
    if not all(d in ("float32", "bf16", *QUANTIZED) for d in a.dtypes):
        p.error(f"--dtypes: expected from float32, bf16, {', '.join(QUANTIZED)}; found {','.join(a.dtypes)!r}")
    if any(d in QUANTIZED for d in a.dtypes):
        if a.llama_bench is None or a.llama_quantize is None or not a.llama_quantize.is_file():
            p.error("the quantized --dtypes need --llama-bench, --llama-convert and --llama-quantize")
        if "tinyllama" in a.models:
            p.error("the quantized --dtypes run gpt2-124m and tinyllama-bpe (qkv reads byte-level BPE from GGUF)")
    if min(a.rounds, a.prompt_tokens, a.new_tokens, a.threads) < 1:
        p.error("--rounds, --prompt-tokens, --new-tokens and --threads: at least 1")
    if not a.text.is_file():
        p.error(f"--text: no such file: {a.text}")
    return a


def enter_venv(a):
    """Re-runs this script under the venv's python unless what it needs is here."""
    missing = [m for m in ("torch", "transformers", "tokenizers", "safetensors", "qkv") if find_spec(m) is None]
    if not missing:
        return
    python = a.venv / "bin" / "python"
    if os.environ.get("QKV_GENERATE_REEXEC") or not python.exists():
        sys.exit(f"bench/generate.py: needs {', '.join(missing)}; not importable here nor in {a.venv}")
    os.environ["QKV_GENERATE_REEXEC"] = "1"
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


# --- The model folders ---------------------------------------------------------

def train_tokenizer(family, vocab, text):
    """A tokenizer of exactly `vocab` ids in the family's tokenizer.json format,
    trained on `text`; the ids training leaves over are added tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from tokenizers import Regex
    lines = text.splitlines()
    if family == "llama3":  # Llama 3's: its split, then bytes; whole words kept; bos in front
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
        trainer = trainers.BpeTrainer(vocab_size=vocab - len(specials), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif family != "llama":  # byte-level BPE
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab - 1, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        specials = ["<|endoftext|>"]
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                                         decoders.ByteFallback(), decoders.Fuse()])
        trainer = trainers.BpeTrainer(vocab_size=vocab - 256, special_tokens=["<unk>", "<s>", "</s>"],
                                      limit_alphabet=200, show_progress=False)
        specials = []
    tok.train_from_iterator(lines, trainer)
    if family == "llama":  # SentencePiece's byte tokens, then the template
        spec = json.loads(tok.to_str())
        for b in range(256):
            spec["model"]["vocab"].setdefault(f"<0x{b:02X}>", len(spec["model"]["vocab"]))
        tok = Tokenizer.from_str(json.dumps(spec))
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fill = vocab - tok.get_vocab_size() - len(specials)
    tok.add_tokens([f"<|unused_{i}|>" for i in range(fill)])
    tok.add_special_tokens(specials)
    if family == "llama3":
        bos = specials[0]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    assert tok.get_vocab_size() == vocab, (tok.get_vocab_size(), vocab)
    return tok


def write_big_folder(cfg, dtype, path, shard_bytes=4 << 30):
    """A Llama folder too big to build whole in memory: transformers' tensor
    names and shapes (a model on the meta device), each tensor drawn (normal,
    std 0.02; norms 1) in `dtype` and written in shards of ~shard_bytes with
    their index, as save_pretrained writes them."""
    import torch
    import transformers
    from safetensors.torch import save_file
    with torch.device("meta"):
        shapes = {k: (v.shape, v.dtype) for k, v in transformers.LlamaForCausalLM(cfg).state_dict().items()}
    cfg.dtype = dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    cfg.architectures = ["LlamaForCausalLM"]  # as the model's save_pretrained writes it (the converter reads it)
    cfg.save_pretrained(path)
    index, shard, size, files = {}, {}, 0, []
    def flush():
        nonlocal shard, size
        name = f"model-{len(files) + 1:05d}.safetensors"
        save_file(shard, str(path / name), metadata={"format": "pt"})
        files.append(name)
        index.update({k: name for k in shard})
        shard, size = {}, 0
    for k, (shape, _) in shapes.items():
        t = torch.ones(shape, dtype=dtype) if k.endswith("norm.weight") else torch.randn(shape, dtype=dtype) * 0.02
        shard[k] = t
        size += t.numel() * t.element_size()
        if size >= shard_bytes:
            flush()
    if shard:
        flush()
    total = sum(torch.Size(s).numel() for s, _ in shapes.values()) * (2 if dtype == torch.bfloat16 else 4)
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": index}))


def make_folder(name, dtype, text_path, path):
    """The model folder: random weights (seed 0) by transformers, in `dtype`."""
    import torch
    import transformers
    shape = SHAPES[name]
    tok = train_tokenizer(shape.get("tokenizer", shape["family"]), shape["vocab"], text_path.read_text(encoding="utf-8"))
    torch.manual_seed(0)
    if shape.get("big"):
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.mkdir(parents=True)
        cfg = transformers.LlamaConfig(vocab_size=shape["vocab"], bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                                       eos_token_id=tok.token_to_id("<|end_of_text|>"), **shape["config"])
        write_big_folder(cfg, dtype, tmp)
        tok.save(str(tmp / "tokenizer.json"))
        tmp.replace(path)
        return
    if shape["family"] == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=shape["vocab"], **shape["config"])
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=shape["vocab"], bos_token_id=1, eos_token_id=2,
                                       **shape["config"])
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save(str(tmp / "tokenizer.json"))
    tmp.replace(path)  # whole or absent


def ensure_folder(ctx, a, name, dtype):
    path = a.cache / f"{name}-{dtype}"
    if not (path / "config.json").is_file():
        a.cache.mkdir(parents=True, exist_ok=True)
        print(f"making {path} (random weights, not timed) ...", file=sys.stderr, flush=True)
        p = ctx.Process(target=make_folder, args=(name, dtype, a.text, path))
        p.start()
        p.join()
        if p.exitcode != 0:
            sys.exit(f"bench/generate.py: making {path} failed (exit {p.exitcode})")
    return path


def warm_file_cache(paths):
    """Puts each file in the file cache the same way for every contender
    (not timed): its cached pages dropped, then read back through a mapping
    advised MADV_HUGEPAGE, so that the cache holds it in 2 MiB folios where
    the system makes them, as after a download or a first load by qkv. Each
    contender's load then times its start-up from the file cache, and a
    mapping of it gets whole 2 MiB pages for every contender alike (the
    page size a mapping gets depends on how the cache read the file in, not
    on who maps it)."""
    for f in paths:
        with open(f, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            if size == 0:
                continue
            os.posix_fadvise(src.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if hasattr(mmap, "MADV_HUGEPAGE"):
                    m.madvise(mmap.MADV_HUGEPAGE)
                touched = 0
                for at in range(0, size, 4096):
                    touched += m[at]


def prompt_text(tok, text, tokens):
    """The longest start of `text` (whole lines) of at most `tokens` tokens."""
    lines, out = text.splitlines(keepends=True), ""
    for line in lines:
        if len(tok.encode(out + line).ids) > tokens:
            break
        out += line
    return out


def gguf_weight_bytes(path):
    """weight_bytes of a GGUF file: its tensors' bytes but the embedding
    table's (unless the head is tied to it) and the positions'."""
    import gguf
    r = gguf.GGUFReader(str(path))
    names = {t.name for t in r.tensors}
    return sum(int(t.n_bytes) for t in r.tensors
               if t.name != "position_embd.weight" and (t.name != "token_embd.weight" or "output.weight" not in names))


def weight_bytes(folder):
    """Bytes each decoded token reads: every tensor but the embedding table
    (a head tied to it is read whole; the table itself only a row)."""
    from safetensors import safe_open
    total = 0
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        tied = not any(k.endswith("lm_head.weight") for k in f.keys())
        for k in f.keys():
            if k.endswith(("wte.weight", "embed_tokens.weight")) and not tied:
                continue
            if k.endswith(("wpe.weight",)):
                continue
            sl = f.get_slice(k)
            n = 1
            for d in sl.get_shape():
                n *= d
            total += n * (2 if sl.get_dtype() in ("BF16", "F16") else 4)
    return total


# --- The contenders, each in its own process ----------------------------------
# Each maker returns generate(text, n) -> the n generated ids, greedy.

def make_torch(folder, dtype, threads):
    import torch
    import transformers
    from tokenizers import Tokenizer
    torch.set_num_threads(threads)
    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.bfloat16 if dtype == "bf16" else torch.float32).eval()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def generate(text, n):
        ids = torch.tensor([tok.encode(text).ids])
        # The mask given: without it, generate() takes every id equal to
        # pad_token_id for padding, and masks it.
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=n, min_new_tokens=n, pad_token_id=0, eos_token_id=None)
        return out[0, ids.shape[1]:].tolist()
    return generate


def make_qkv(folder, dtype, threads):
    import qkv
    m = qkv.Model.load(str(folder))
    m.set_threads(threads)
    compute = "float32" if dtype in QUANTIZED else dtype  # a GGUF file's products: its own

    def generate(text, n):
        return m.generate(text, tokens=n, temperature=0.0, dtype=compute)
    return generate


def make_contender(name, folder, dtype, threads):
    """A contender's process: loads the model (timed, with the memory it
    then holds) and answers ("run", text, n) -> the n greedy ids, ("time",
    text, n) -> (seconds, cores other processes kept busy meanwhile)."""
    if name == "torch":  # imported untimed: the library's start-up, not the model's
        import torch  # noqa: F401
        import transformers  # noqa: F401
    else:
        import qkv  # noqa: F401
    t0 = time.perf_counter()
    gen = (make_torch if name == "torch" else make_qkv)(folder, dtype, threads)
    loaded = {"load_s": time.perf_counter() - t0, "rss_after_load": peak_rss()}

    def handle(req):
        if req[0] == "run":
            return gen(req[1], req[2])
        with OtherLoad() as load:
            t0 = time.perf_counter()
            gen(req[1], req[2])
            secs = time.perf_counter() - t0
        return secs, load.cores
    return handle, loaded


class LlamaCpp:
    """llama.cpp on the folder's GGUF conversion, through llama-bench."""
    name = "llama.cpp"

    def __init__(self, a, folder, dtype, tokenizer, gguf=None):
        self.a, self.gguf = a, gguf or folder.with_name(folder.name + ".gguf")
        if not self.gguf.is_file():
            print(f"converting {folder} to {self.gguf} (not timed) ...", file=sys.stderr, flush=True)
            tmp = self.gguf.with_name(self.gguf.name + ".tmp")
            env = dict(os.environ, PYTHONPATH=str(a.llama_convert.parent / "gguf-py"))
            pre = CONVERT_PRE.get(tokenizer)
            run = ["-c", CONVERT, pre] if pre else []
            r = subprocess.run([sys.executable, *run, str(a.llama_convert), str(folder), "--outtype",
                                "f32" if dtype == "float32" else "bf16", "--outfile", str(tmp)],
                               env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"bench/generate.py: {a.llama_convert} failed on {folder}:\n{r.stderr[-3000:]}")
            tmp.replace(self.gguf)

    def tokens_per_s(self, prompt, gen, depth):
        """llama-bench's tokens/s of one repetition, and the cores others kept busy."""
        cmd = [str(self.a.llama_bench), "-m", str(self.gguf), "-t", str(self.a.threads), "-r", "1",
               "-p", str(prompt), "-n", str(gen), "-d", str(depth), "-o", "json"]
        with OtherLoad() as load:
            r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench/generate.py: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout)[0]["avg_ts"], load.cores

    def time(self, prompt_tokens, new_tokens):
        """(prefill seconds, decode seconds a token, busy cores, busy cores)."""
        pre, busy1 = self.tokens_per_s(prompt_tokens, 0, 0)
        dec, busy2 = self.tokens_per_s(0, new_tokens, prompt_tokens)
        return prompt_tokens / pre, 1 / dec, busy1, busy2

    def stop(self):
        pass


def quantized_file(a, folder, base, dtype, tokenizer):
    """The `base` (float32 or bf16) folder's GGUF (llama.cpp's converter)
    quantized to `dtype` by llama-quantize, made once beside the folder."""
    path = folder.with_name(f"{folder.name}.{dtype}.gguf")
    if not path.is_file():
        f32 = LlamaCpp(a, folder, base, tokenizer).gguf
        print(f"quantizing {f32} to {path} (not timed) ...", file=sys.stderr, flush=True)
        tmp = path.with_name(path.name + ".tmp")
        r = subprocess.run([str(a.llama_quantize), str(f32), str(tmp), QUANTIZED[dtype]], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench/generate.py: llama-quantize failed on {f32}:\n{r.stderr[-3000:]}")
        tmp.replace(path)
    return path


# --- The run -------------------------------------------------------------------

def check_greedy(a, folder, text, workers):
    """qkv's first 16 greedy tokens against transformers' (as text)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    want = tok.decode(workers["torch"].call("run", text, 16), skip_special_tokens=False)
    got = workers["qkv"].call("run", text, 16)
    return got == want


def bench_one(ctx, a, name, dtype):
    from tokenizers import Tokenizer
    quantized = dtype in QUANTIZED
    if SHAPES[name].get("big") and not quantized:
        sys.exit(f"bench/generate.py: {name} runs the quantized types only (its folder is bf16, converted once)")
    base = "bf16" if SHAPES[name].get("big") else "float32"  # a quantized file's source
    folder = ensure_folder(ctx, a, name, base if quantized else dtype)
    tokenizer = SHAPES[name].get("tokenizer", SHAPES[name]["family"])
    model_file = quantized_file(a, folder, base, dtype, tokenizer) if quantized else folder
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    text = prompt_text(tok, a.text.read_text(encoding="utf-8"), a.prompt_tokens)
    n_prompt = len(tok.encode(text).ids)
    warm_file_cache(sorted(f for f in folder.iterdir() if f.is_file()))
    if quantized:
        warm_file_cache([model_file])
    contenders = ["qkv"] if quantized else CONTENDERS  # PyTorch does not run GGUF's types
    workers = {c: Worker(ctx, "bench/generate.py", c, partial(make_contender, c, model_file, dtype, a.threads),
                         ALL_CPUS) for c in contenders}
    for w in workers.values():  # warm-up: buffers allocated, bf16 weights rounded, threads started
        w.call("run", text, 2)
    same = check_greedy(a, folder, text, workers) if dtype == "float32" else None
    if a.llama_bench:
        workers["llama.cpp"] = LlamaCpp(a, folder, dtype, tokenizer, model_file if quantized else None)
        warm_file_cache([workers["llama.cpp"].gguf])
    names = list(workers)
    times = {(c, w): [] for c in names for w in ("prefill", "decode")}
    others = []
    for rnd in range(a.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for c in order:
            time.sleep(PAUSE_S)
            if c == "llama.cpp":
                prefill, decode, busy1, busy2 = workers[c].time(n_prompt, a.new_tokens)
            else:
                prefill, busy1 = workers[c].call("time", text, 1)
                time.sleep(PAUSE_S)
                total, busy2 = workers[c].call("time", text, 1 + a.new_tokens)
                decode = (total - prefill) / a.new_tokens
            times[(c, "prefill")].append(prefill)
            times[(c, "decode")].append(decode)
            others += [busy1, busy2]
        print(f"{name} {dtype}: round {rnd + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    peak = {c: w.stop() for c, w in workers.items()}  # llama.cpp's: None (llama-bench's own)
    nbytes = gguf_weight_bytes(model_file) if quantized else weight_bytes(folder)
    rows = []
    for c in names:
        pre, dec = statistics.median(times[(c, "prefill")]), statistics.median(times[(c, "decode")])
        rows.append({"model": name, "dtype": dtype, "contender": c, "prompt_tokens": n_prompt,
                     "prefill_tok_s": n_prompt / pre, "decode_tok_s": 1 / dec,
                     "decode_gb_s": nbytes / dec / 1e9, "weight_bytes_per_token": nbytes,
                     "load_s": (getattr(workers[c], "ready", None) or {}).get("load_s"), "peak_rss_bytes": peak[c],
                     "prefill_rounds": times[(c, "prefill")], "decode_rounds": times[(c, "decode")]})
    return rows, same, max((o for o in others if o is not None), default=None)


def main():
    a = parse_args()
    enter_venv(a)
    bind_threads()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # its pool and fork() do not mix
    ctx = multiprocessing.get_context("fork")
    rows, notes = [], []
    for name in a.models:
        for dtype in a.dtypes:
            r, same, busy = bench_one(ctx, a, name, dtype)
            rows += r
            if same is not None:
                notes.append(f"{name} float32: qkv's 16 greedy tokens {'equal' if same else 'DIFFER from'} "
                             "transformers'")
            if busy is not None and busy > 0.3:
                notes.append(f"{name} {dtype}: other processes kept up to {busy:.1f} cores busy "
                             "during a timing: rerun when the machine is quiet")
    print(f"CPU: {cpu_model()}; {a.threads} threads; {a.rounds} alternating rounds, medians; "
          f"prompt of ~{a.prompt_tokens} tokens, then {a.new_tokens} greedy tokens")
    print(f"{'model':10} {'dtype':8} {'contender':9} {'prefill tok/s':>14} {'decode tok/s':>13} "
          f"{'decode GB/s':>12} {'vs torch or llama.cpp':>28} {'load s':>7} {'peak RSS GB':>12} "
          f"{'weights GB':>11}")
    for r in rows:
        ref = next((x for x in rows if x["model"] == r["model"] and x["dtype"] == r["dtype"]
                    and x["contender"] == ("llama.cpp" if r["dtype"] in QUANTIZED else "torch")), r)
        vs = f"{r['prefill_tok_s'] / ref['prefill_tok_s']:.2f}x / {r['decode_tok_s'] / ref['decode_tok_s']:.2f}x"
        load = "-" if r["load_s"] is None else f"{r['load_s']:.2f}"
        rss = "-" if r["peak_rss_bytes"] is None else f"{r['peak_rss_bytes'] / 1e9:.2f}"
        print(f"{r['model']:10} {r['dtype']:8} {r['contender']:9} {r['prefill_tok_s']:14.1f} "
              f"{r['decode_tok_s']:13.2f} {r['decode_gb_s']:12.1f} {vs:>28} {load:>7} {rss:>12} "
              f"{r['weight_bytes_per_token'] / 1e9:11.2f}")
    for n in notes:
        print(n)
    if a.json:
        a.json.write_text(json.dumps({"cpu": cpu_model(), "threads": a.threads, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
