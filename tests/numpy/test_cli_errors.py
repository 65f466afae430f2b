"""Bad input to the CLI: one clear line naming the argument, what was
expected and what was found; exit 2 for usage errors, 1 for bad data; never a
crash, a hang, or a NaN passed off as a result."""
import numpy as np
import pytest

USAGE, DATA = 2, 1


@pytest.fixture
def files(tmp_path):
    """Writes arrays (or raw bytes) into tmp_path and returns their paths."""
    def _files(**arrays):
        paths = {}
        for name, value in arrays.items():
            path = tmp_path / f"{name}.npy"
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                np.save(path, value)
            paths[name] = str(path)
        return paths
    return _files


def good(n=3, s=5, d=4, dv=4, hq=2, hkv=1, dtype=np.float32):
    rng = np.random.default_rng(0)
    return dict(q=rng.normal(size=(hq, n, d)).astype(dtype),
                k=rng.normal(size=(hkv, s, d)).astype(dtype),
                v=rng.normal(size=(hkv, s, dv)).astype(dtype))


def npy_header(descr="<f4", fortran=False, shape="(2, 3)"):
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()


def attention_args(p, tmp_path, *extra):
    return ["attention", "--q", p["q"], "--k", p["k"], "--v", p["v"],
            "-o", str(tmp_path / "out.npy"), *extra]


# name -> (override of q/k/v/mask contents, extra args, exit code, message part)
CASES = {
    "k head dim differs": (dict(k=np.zeros((1, 5, 3), np.float32)), [], DATA,
                           "k: expected head dim D = 4 (from q), found 3"),
    "v length differs": (dict(v=np.zeros((1, 6, 4), np.float32)), [], DATA,
                         "v: expected [..., Hkv=1, S=5, Dv] (from k)"),
    "Hq not a multiple of Hkv": (dict(q=np.zeros((3, 3, 4), np.float32),
                                      k=np.zeros((2, 5, 4), np.float32),
                                      v=np.zeros((2, 5, 4), np.float32)), [], DATA,
                                 "query heads Hq = 3 must be a multiple of key/value heads Hkv = 2"),
    "D = 0": (dict(q=np.zeros((2, 3, 0), np.float32), k=np.zeros((1, 5, 0), np.float32)), [],
              DATA, "head dim D must be at least 1"),
    "empty query sequence": (dict(q=np.zeros((2, 0, 4), np.float32)), [], DATA,
                             "query length N must be at least 1"),
    "empty key sequence": (dict(k=np.zeros((1, 0, 4), np.float32),
                                v=np.zeros((1, 0, 4), np.float32)), [], DATA,
                           "key length S must be at least 1"),
    "q 2-D, k and v 3-D": (dict(q=np.zeros((3, 4), np.float32)), [], DATA,
                           "q, k, v: expected all three 2-D (N, D) for one head, or all "
                           "[..., H, N, D], found q [3, 4]"),
    "q has one dim": (dict(q=np.zeros(4, np.float32)), [], DATA,
                      "q: expected at least 3 dims [..., Hq, N, D], found [4]"),
    "batch dims differ": (dict(q=np.zeros((2, 2, 3, 4), np.float32)), [], DATA,
                          "k, v: expected the leading batch dims of q [2]"),
    "dtypes differ": (dict(k=np.zeros((1, 5, 4), np.float64)), [], DATA,
                      "expected the dtype of q (float32)"),
    "bool q": (dict(q=np.zeros((2, 3, 4), bool)), [], DATA,
               "q: expected float32, float64 or bfloat16, found bool"),
    "NaN in q": (dict(q=np.full((2, 3, 4), np.nan, np.float32)), [], DATA,
                 "q: values must be finite, found NaN at [0, 0, 0]"),
    "Inf in v": (dict(v=np.where(np.arange(20).reshape(1, 5, 4) == 7, np.inf, 0).astype(np.float32)),
                 [], DATA, "v: values must be finite, found inf at [0, 1, 3]"),
    "mask not broadcastable": (dict(mask=np.ones((3, 4), bool)), [], DATA,
                               "mask: expected a shape broadcastable to [2, 3, 5]"),
    "mask with NaN": (dict(mask=np.full((3, 5), np.nan, np.float32)), [], DATA,
                      "mask: additive mask values must be finite or -inf, found NaN"),
    "mask with +inf": (dict(mask=np.full((5,), np.inf, np.float32)), [], DATA,
                       "found +inf"),
    "big-endian int32 file": (dict(q=np.zeros((2, 3, 4), ">i4")), [], DATA,
                              "unsupported dtype '>i4' (int32)"),
    "int64 file": (dict(q=np.zeros((2, 3, 4), np.int64)), [], DATA, "--q: "),
    "float16 file": (dict(v=np.zeros((1, 5, 4), np.float16)), [], DATA, "--v: "),
    "not a npy file": (dict(q=b"hello world, this is not numpy"), [], DATA, "not a .npy file"),
    "empty file": (dict(k=b""), [], DATA, "--k: "),
    "truncated data": (dict(q=npy_header(shape="(2, 3, 4)") + b"\0" * 10), [], DATA,
                       "expects 96 bytes"),
    "shape product overflows": (dict(q=npy_header(shape="(4294967296, 4294967296, 4294967296)")),
                                [], DATA, "--q: "),
    "shape far larger than file": (dict(q=npy_header(shape="(100000, 100000, 100)")), [], DATA,
                                   "--q: "),
    "malformed header": (dict(q=b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'\n"), [], DATA, "--q: "),
    "bad causal value": ({}, ["--causal", "sideways"], USAGE, "--causal"),
    "scale not a number": ({}, ["--scale", "abc"], USAGE, "--scale"),
    "unknown flag": ({}, ["--frobnicate"], USAGE, "--frobnicate"),
    "window with one side": ({}, ["--window", "128"], USAGE,
                             "--window: expected LEFT,RIGHT, two integers >= -1 (-1 = unbounded), "
                             "found '128'"),
    "window not numbers": ({}, ["--window", "a,b"], USAGE, "--window: expected LEFT,RIGHT"),
    "window below -1": ({}, ["--window=-2,0"], USAGE, "found '-2,0'"),
    "window with three sides": ({}, ["--window", "1,2,3"], USAGE, "found '1,2,3'"),
    "key lengths not integers": ({}, ["--key-lengths", "5,x"], USAGE,
                                 "--key-lengths: expected comma-separated integers >= 0, "
                                 "found '5,x'"),
    "negative key length": ({}, ["--key-lengths=-1"], USAGE, "--key-lengths: expected"),
    "empty key lengths": ({}, ["--key-lengths", ""], USAGE, "--key-lengths: expected"),
    "key length item missing": ({}, ["--key-lengths", "5,,5"], USAGE, "found '5,,5'"),
    "too many key lengths": ({}, ["--key-lengths", "5,5"], DATA,
                             "key_lengths: expected one length per batch element (1"),
    "key length above S": ({}, ["--key-lengths", "6"], DATA,
                           "key_lengths: expected lengths in [0, S=5], found 6 at [0]"),
    "alibi slope not a number": ({}, ["--alibi-slopes", "0.5,abc"], USAGE,
                                 "--alibi-slopes: expected comma-separated finite numbers, "
                                 "found '0.5,abc'"),
    "alibi slope NaN": ({}, ["--alibi-slopes", "nan,1"], USAGE, "--alibi-slopes: expected"),
    "alibi slope inf": ({}, ["--alibi-slopes", "1,inf"], USAGE, "--alibi-slopes: expected"),
    "one alibi slope for two heads": ({}, ["--alibi-slopes", "0.5"], DATA,
                                      "alibi_slopes: expected one slope per query head (Hq = 2), "
                                      "found 1"),
    "alibi and alibi slopes": ({}, ["--alibi", "--alibi-slopes", "0.5,0.25"], USAGE,
                               "--alibi excludes --alibi-slopes"),
    "negative softcap": ({}, ["--softcap=-1"], USAGE,
                         "--softcap: expected a number >= 0 (0 = off), found '-1'"),
    "softcap not a number": ({}, ["--softcap", "abc"], USAGE, "--softcap: expected"),
    "softcap inf": ({}, ["--softcap", "inf"], USAGE, "--softcap: expected"),
    "bad kernel": ({}, ["--kernel", "turbo"], USAGE, "--kernel"),
    "fast kernel on float64": (good(dtype=np.float64), ["--kernel", "fast"], DATA, "float32"),
    "negative threads": ({}, ["--threads=-1"], USAGE,
                         "--threads: expected an integer from 0 (all cores) to "),
    "threads not an integer": ({}, ["--threads", "2.5"], USAGE, "--threads: expected"),
    "threads out of range": ({}, ["--threads", "99999999999"], USAGE, "--threads: expected"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_attention_input(name, run, files, tmp_path):
    override, extra, code, message = CASES[name]
    arrays = {**good(), **override}
    p = files(**arrays)
    if "mask" in p:
        extra = ["--mask", p["mask"], *extra]
    r = run(*attention_args(p, tmp_path, *extra))
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert r.stderr.startswith("qkv attention: error: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out.npy").exists()


def test_missing_file(run, files, tmp_path):
    p = files(**good())
    p["v"] = str(tmp_path / "nope.npy")
    r = run(*attention_args(p, tmp_path))
    assert r.returncode == DATA
    assert "--v: cannot open" in r.stderr and "No such file or directory" in r.stderr


def test_directory_instead_of_file(run, files, tmp_path):
    p = files(**good())
    p["k"] = str(tmp_path)
    r = run(*attention_args(p, tmp_path))
    assert r.returncode == DATA
    assert "--k: cannot read" in r.stderr and "directory" in r.stderr


def test_missing_required_option(run):
    r = run("attention", "--q", "q.npy")
    assert r.returncode == USAGE
    assert "--k is required" in r.stderr


def test_unwritable_output(run, files, tmp_path):
    p = files(**good())
    r = run("attention", "--q", p["q"], "--k", p["k"], "--v", p["v"],
            "-o", str(tmp_path / "no" / "such" / "dir" / "out.npy"))
    assert r.returncode == DATA
    assert "--out: cannot write" in r.stderr


def test_no_subcommand_and_unknown_subcommand(run):
    assert run().returncode == USAGE
    r = run("attend")
    assert r.returncode == USAGE and "attend" in r.stderr


def test_every_command_has_help(run):
    for cmd in ([], ["demo"], ["attention"], ["explain"], ["bench"]):
        r = run(*cmd, "--help")
        assert r.returncode == 0 and "Usage" in r.stdout, cmd


@pytest.mark.parametrize("args, message", [
    (["--heads", "3"], "--heads: expected a divisor of --d-model 8 (or give --d-k), found 3"),
    (["--heads", "0"], "--heads: expected a positive integer, found 0"),
    (["--kv-heads", "3", "--heads", "4"], "--kv-heads: expected a divisor of --heads 4, found 3"),
    (["--tokens", "   "], "--tokens: expected at least one word"),
    (["--positions", "spiral"], "--positions"),
    (["--d-model", "6", "--heads", "2", "--positions", "rope"], "expected an even head dim"),
    (["--q", "q.npy"], "--q, --k, --v: expected all three"),
])
def test_bad_explain_usage(args, message, run):
    r = run("explain", *args)
    assert r.returncode == USAGE, r.stderr
    assert message in r.stderr


def test_embed_reads_past_a_shard_index_naming_the_wrong_shard(run, tmp_path):
    """As transformers loads such a folder: the tensor from the shard that has
    it, and one warning naming the wrong index entry."""
    from tiny_bert import SHARDS, bert_folder
    moved = "encoder.layer.0.output.dense.weight"
    (tmp_path / "in.txt").write_text("hello\nhello hello\n")
    want = bert_folder(tmp_path / "whole")
    r = run("embed", "--model", want, "--input", tmp_path / "in.txt", "-o", tmp_path / "want.npy")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # The shard that has it is listed for other tensors, or for none.
    for name, second in (("listed", {moved, "embeddings.word_embeddings.weight"}), ("unlisted", {moved})):
        model = bert_folder(tmp_path / name, second=second, index={moved: SHARDS[0]})
        r = run("embed", "--model", model, "--input", tmp_path / "in.txt", "-o", tmp_path / f"{name}.npy")
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == [
            f"qkv embed: warning: '{model}/model.safetensors.index.json' maps '{moved}' to '{SHARDS[0]}', "
            f"which has no such tensor; read it from '{SHARDS[1]}'"], r.stderr
        assert np.array_equal(np.load(tmp_path / f"{name}.npy"), np.load(tmp_path / "want.npy"))

