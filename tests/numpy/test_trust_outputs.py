"""No command destroys what it reads: an output that is (or resolves to) an
input, or lies in an input directory, is a usage error; two outputs of one
command naming one file are too; a command that writes into a directory
(train, import) leaves one it did not make alone; and `qkv import` leaves no
stale training state behind for a later --resume to bring back."""
import hashlib
import os
import subprocess

import numpy as np
import pytest

import tiny_models


@pytest.fixture
def run(qkv_bin):
    return tiny_models.runner(qkv_bin)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, qkv_bin):
    return tiny_models.trained(tmp_path_factory, qkv_bin, "learned")


def digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())
            if p.is_file()}


def spellings(d, tmp_path, name):
    """Ways to name d/name: plain, through "." and "..", through a link to d."""
    link = tmp_path / "link"
    if not link.exists():
        link.symlink_to(d, target_is_directory=True)
    return [d / name, f"{d}/./{name}", f"{d}/../{d.name}/{name}", link / name]


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "vocab.json"])
def test_export_refuses_to_overwrite_its_model(run, model_dir, tmp_path, name):
    before = digest(model_dir)
    for out in spellings(model_dir, tmp_path, name):
        r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", out)
        assert r.returncode == 2, (out, r.stderr)
        assert "--out: " in r.stderr and "would overwrite what --model" in r.stderr, r.stderr
    assert digest(model_dir) == before


def test_logits_refuses_to_overwrite_its_model(run, model_dir, tmp_path):
    before = digest(model_dir)
    for out in spellings(model_dir, tmp_path, "model.safetensors"):
        r = run("logits", "--model", model_dir, "--prompt", "the cat", "-o", out)
        assert r.returncode == 2, (out, r.stderr)
        assert "would overwrite what --model" in r.stderr, r.stderr
    assert digest(model_dir) == before


def test_explain_refuses_a_png_over_its_input(run, tmp_path):
    rng = np.random.default_rng(0)
    for name in ("q", "k", "v"):
        np.save(tmp_path / f"{name}.npy", rng.random((3, 4)))
    before = (tmp_path / "k.npy").read_bytes()
    r = run("explain", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
            tmp_path / "v.npy", "--png", tmp_path / "k.npy")
    assert r.returncode == 2, r.stderr
    assert "--png: " in r.stderr and "would overwrite what --k" in r.stderr, r.stderr
    assert (tmp_path / "k.npy").read_bytes() == before


def test_import_over_a_training_run_removes_its_state(run, qkv_bin, model_dir, tmp_path):
    # A nanoGPT state_dict of the tiny model, imported over another training run.
    weights = tmp_path / "ckpt.safetensors"
    r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", weights)
    assert r.returncode == 0, r.stderr
    # qkv's vocabulary has one more id (the unknown token) than the text has characters.
    text = tmp_path / "vocab.txt"
    text.write_text((model_dir.parent / "text.txt").read_text() + "~")
    other = tiny_models.train(qkv_bin, tmp_path, "learned")
    assert (other / "train_state.safetensors").exists()
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text", text,
            "--heads", "2", "-o", other, "--force")
    assert r.returncode == 0, r.stderr
    assert not (other / "train_state.safetensors").exists()
    imported = digest(other)["model.safetensors"]
    r = run("train", "--text", tmp_path / "text.txt", "--out", other, "--resume", "--no-progress")
    assert r.returncode != 0 and "no checkpoint" in r.stderr, r.stderr
    assert digest(other)["model.safetensors"] == imported


def test_import_refuses_weights_it_would_overwrite(run, model_dir, tmp_path):
    weights = tmp_path / "model.safetensors"
    r = run("export", "--to", "nanogpt", "--model", model_dir, "-o", weights)
    assert r.returncode == 0, r.stderr
    before = weights.read_bytes()
    r = run("import", "--from", "nanogpt", "--weights", weights, "--vocab-text",
            model_dir / "vocab.json", "--heads", "2", "-o", tmp_path, "--force")
    assert r.returncode == 2, r.stderr
    assert "would overwrite what --weights" in r.stderr, r.stderr
    assert weights.read_bytes() == before


def test_dev_stdout_on_a_pipe_is_written_in_place(qkv_bin, model_dir):
    import subprocess
    r = subprocess.run([qkv_bin, "logits", "--model", str(model_dir), "--prompt", "the cat",
                        "-o", "/dev/stdout"], capture_output=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(b"\x93NUMPY"), r.stdout[:80]


def test_html_page_escapes_markup_in_its_data(run, model_dir, tmp_path):
    import json
    import re
    import shutil
    hostile = tmp_path / "m<!--<script>"
    shutil.copytree(model_dir, hostile)
    page = tmp_path / "page.html"
    r = run("explain", "--model", hostile, "--prompt", "the cat", "--html", page, "--no-color")
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert data, html[:500]
    assert "<" not in data.group(1) and ">" not in data.group(1)
    assert "m<!--<script>" in json.loads(data.group(1))["title"]
    assert html.count("<script") == 2  # the data and the viewer, nothing opened by the title


SHORT = [a if a != "200" else "2" for a in tiny_models.SIZES]  # 2 iterations


@pytest.mark.parametrize("name", ["log.jsonl", "model.safetensors", "config.json"])
def test_train_refuses_a_text_the_run_would_overwrite(run, tmp_path, name):
    out = tmp_path / "run"
    out.mkdir()
    text = tiny_models.write_text(out / name)
    before = text.read_bytes()
    for spelled in spellings(out, tmp_path, name):
        r = run("train", "--text", spelled, "--out", out, *SHORT, "--force")
        assert r.returncode == 1, (spelled, r.stderr)
        assert f"--text: '{spelled}' is the run's own {name} in --out" in r.stderr, r.stderr
    assert text.read_bytes() == before


def test_train_takes_a_text_elsewhere_in_its_run_directory(run, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    text = tiny_models.write_text(out / "input.txt")
    r = run("train", "--text", text, "--out", out, *SHORT)
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").exists()


# --- one check for every command: outputs against inputs and each other ----

def run_in(qkv_bin, cwd, *args):
    """`run` from the directory cwd, so that "./x" spellings mean what they say."""
    return subprocess.run([qkv_bin, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def other_names(d, name):
    """Other names of d/name, relative to d: "./", "sub/..", a symlink and, when
    d/name exists, a hard link (made here, in d)."""
    (d / "sub").mkdir(exist_ok=True)
    names = [name, f"./{name}", f"sub/../{name}"]
    link = d / f"sym-{name}"
    if not link.is_symlink():
        link.symlink_to(name)  # dangling while name does not exist: written through all the same
    names.append(link.name)
    if (d / name).exists():
        hard = d / f"hard-{name}"
        if not hard.exists():
            os.link(d / name, hard)
        names.append(hard.name)
    return names


@pytest.fixture
def qkv_dir(tmp_path):
    """q, k, v and a mask in tmp_path; returns the attention arguments."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "q.npy", rng.normal(size=(2, 3, 4)).astype(np.float32))
    np.save(tmp_path / "k.npy", rng.normal(size=(1, 5, 4)).astype(np.float32))
    np.save(tmp_path / "v.npy", rng.normal(size=(1, 5, 4)).astype(np.float32))
    np.save(tmp_path / "m.npy", np.ones((3, 5), bool))
    return ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--mask", "m.npy"]


ATTENTION_OUTPUTS = ["-o", "--weights", "--lse"]
OPTION = {"-o": "--out"}


@pytest.mark.parametrize("first,second", [("-o", "--weights"), ("-o", "--lse"), ("--weights", "--lse")])
@pytest.mark.parametrize("exists", [False, True])
def test_attention_refuses_two_outputs_in_one_file(qkv_bin, tmp_path, qkv_dir, first, second, exists):
    x = tmp_path / "x.npy"
    if exists:
        x.write_bytes(b"mine")
    rest = [o for o in ATTENTION_OUTPUTS if o not in (first, second)]
    for spelled in other_names(tmp_path, "x.npy"):
        r = run_in(qkv_bin, tmp_path, *qkv_dir, first, "x.npy", second, spelled, rest[0], "r.npy")
        assert r.returncode == 2, (spelled, r.stderr)
        assert (f"qkv attention: error: {OPTION.get(first, first)}, {second}: " in r.stderr
                and "; give each output its own file" in r.stderr), r.stderr
        assert x.read_bytes() == b"mine" if exists else not x.exists()
        assert not (tmp_path / "r.npy").exists()


@pytest.mark.parametrize("output", ATTENTION_OUTPUTS)
def test_attention_refuses_an_output_over_an_input(qkv_bin, tmp_path, qkv_dir, output):
    others = [o for o in ATTENTION_OUTPUTS if o != output]
    for inp in ("q", "k", "v", "m"):
        before = (tmp_path / f"{inp}.npy").read_bytes()
        for spelled in other_names(tmp_path, f"{inp}.npy"):
            r = run_in(qkv_bin, tmp_path, *qkv_dir, output, spelled, others[0], "a.npy",
                       others[1], "b.npy")
            assert r.returncode == 2, (spelled, r.stderr)
            option = {"m": "--mask"}.get(inp, "--" + inp)
            link = spelled.startswith("hard-")
            what = (f"is a hard link to {option}'s file '{inp}.npy'" if link
                    else f"would overwrite what {option} '{inp}.npy' holds")
            assert f"{OPTION.get(output, output)}: '{spelled}' {what}; write it somewhere else" in r.stderr, r.stderr
            assert (tmp_path / f"{inp}.npy").read_bytes() == before
        assert not (tmp_path / "a.npy").exists() and not (tmp_path / "b.npy").exists()


def test_attention_writes_distinct_outputs_and_streams_twice(qkv_bin, tmp_path, qkv_dir):
    r = run_in(qkv_bin, tmp_path, *qkv_dir, "-o", "a.npy", "--weights", "b.npy", "--lse", "c.npy")
    assert r.returncode == 0, r.stderr
    r = run_in(qkv_bin, tmp_path, *qkv_dir, "-o", "/dev/null", "--weights", "/dev/null")
    assert r.returncode == 0, r.stderr


EXPLAIN_OUTPUTS = ["--png", "--html", "--weights-npy"]


@pytest.mark.parametrize("first,second", [("--png", "--html"), ("--png", "--weights-npy"),
                                          ("--html", "--weights-npy")])
def test_explain_refuses_two_outputs_in_one_file(qkv_bin, model_dir, tmp_path, first, second):
    x = tmp_path / "x"
    x.write_bytes(b"mine")
    for spelled in other_names(tmp_path, "x"):
        r = run_in(qkv_bin, tmp_path, "explain", "--model", model_dir, "--prompt", "the cat",
                   first, "x", second, spelled, "--no-color")
        assert r.returncode == 2, (spelled, r.stderr)
        assert f"{first}, {second}: " in r.stderr and "give each output its own file" in r.stderr
        assert x.read_bytes() == b"mine"


@pytest.mark.parametrize("output", EXPLAIN_OUTPUTS)
def test_explain_refuses_an_output_in_its_model_folder(run, model_dir, tmp_path, output):
    before = digest(model_dir)
    for spelled in spellings(model_dir, tmp_path, "vocab.json"):
        r = run("explain", "--model", model_dir, "--prompt", "the cat", output, spelled)
        assert r.returncode == 2, (spelled, r.stderr)
        assert f"{output}: '{spelled}' would overwrite what --model" in r.stderr, r.stderr
    r = run("explain", "--model", model_dir, "--prompt", "the cat", output, model_dir / "new")
    assert r.returncode == 2, r.stderr
    assert (f"{output}: '{model_dir / 'new'}' lies inside --model's folder '{model_dir}', and qkv "
            "writes nothing into a folder it reads a model from; write it somewhere else") in r.stderr
    assert digest(model_dir) == before and not (model_dir / "new").exists()


@pytest.mark.parametrize("inp", ["q", "v", "m"])
def test_explain_refuses_a_png_over_any_input(qkv_bin, tmp_path, qkv_dir, inp):
    before = (tmp_path / f"{inp}.npy").read_bytes()
    for spelled in other_names(tmp_path, f"{inp}.npy"):
        r = run_in(qkv_bin, tmp_path, "explain", *qkv_dir[1:], "--png", spelled)
        assert r.returncode == 2, (spelled, r.stderr)
        assert f"--png: '{spelled}' " in r.stderr and "write it somewhere else" in r.stderr
        assert (tmp_path / f"{inp}.npy").read_bytes() == before


@pytest.mark.parametrize("command", ["logits", "export"])
def test_an_output_that_is_a_directory_is_called_one(run, model_dir, tmp_path, command):
    args = (["logits", "--model", model_dir, "--prompt", "the cat"] if command == "logits"
            else ["export", "--to", "nanogpt", "--model", model_dir])
    for out in (model_dir, f"{model_dir}/.", tmp_path):
        r = run(*args, "-o", out)
        assert r.returncode == 1, (out, r.stderr)
        assert (f"qkv {command}: error: --out: cannot write '{out}': it is a directory; expected "
                "a file path") in r.stderr, r.stderr
        assert "overwrite" not in r.stderr


@pytest.mark.parametrize("command", ["logits", "export"])
def test_a_new_file_in_the_model_folder_is_refused_for_what_it_is(run, model_dir, tmp_path, command):
    args = (["logits", "--model", model_dir, "--prompt", "the cat"] if command == "logits"
            else ["export", "--to", "nanogpt", "--model", model_dir])
    before = digest(model_dir)
    r = run(*args, "-o", model_dir / "new.npy")
    assert r.returncode == 2, r.stderr
    assert (f"--out: '{model_dir / 'new.npy'}' lies inside --model's folder '{model_dir}'") in r.stderr
    hard = tmp_path / "hard.json"
    os.link(model_dir / "config.json", hard)
    r = run(*args, "-o", hard)
    assert r.returncode == 2, r.stderr
    assert f"--out: '{hard}' is a hard link to a file of --model's folder '{model_dir}'" in r.stderr
    assert digest(model_dir) == before
    r = run(*args, "-o", tmp_path / "elsewhere.npy")
    assert r.returncode == 0, r.stderr


def test_embed_refuses_an_output_over_its_input(qkv_bin, tmp_path):
    (tmp_path / "lines.txt").write_text("one\ntwo\n")
    for spelled in other_names(tmp_path, "lines.txt"):
        r = run_in(qkv_bin, tmp_path, "embed", "--model", "no-model", "--input", "lines.txt",
                   "-o", spelled)
        assert r.returncode == 2, (spelled, r.stderr)
        assert f"--out: '{spelled}' " in r.stderr and "--input" in r.stderr, r.stderr
    assert (tmp_path / "lines.txt").read_text() == "one\ntwo\n"


def test_train_refuses_a_text_its_loss_plot_would_overwrite(run, tmp_path):
    out = tmp_path / "run"
    r = run("train", "--text", tiny_models.write_text(tmp_path / "t.txt"), "--out", out, *SHORT)
    assert r.returncode == 0, r.stderr
    text = tiny_models.write_text(out / "loss.png")
    before = text.read_bytes()
    for spelled in spellings(out, tmp_path, "loss.png"):
        r = run("train", "--text", spelled, "--out", out, *SHORT, "--force")
        assert r.returncode == 2, (spelled, r.stderr)
        assert f"would overwrite what --text '{spelled}' holds" in r.stderr, r.stderr
    assert text.read_bytes() == before


# --- a directory written into: empty, new, qkv's, or --force -----------------

USER_FILES = {"config.json": '{"mine": true}\n', "vocab.json": "my words\n", "log.jsonl": "my log\n",
              "notes.txt": "keep\n"}


def users_directory(d):
    d.mkdir()
    for name, text in USER_FILES.items():
        (d / name).write_text(text)
    return d


def import_args(qkv_bin, model_dir, d, out):
    """`qkv import` of the tiny model's nanoGPT state_dict, written to d once, into out."""
    weights, text = d / "ckpt.safetensors", d / "vocab.txt"
    if not weights.exists():
        r = tiny_models.runner(qkv_bin)("export", "--to", "nanogpt", "--model", model_dir, "-o", weights)
        assert r.returncode == 0, r.stderr
        # qkv's vocabulary has one more id (the unknown token) than the text has characters.
        text.write_text((model_dir.parent / "text.txt").read_text() + "~")
    return ["import", "--from", "nanogpt", "--weights", weights, "--vocab-text", text, "--heads", "2",
            "-o", out]


@pytest.fixture
def writer(qkv_bin, model_dir, tmp_path_factory):
    """Command lines of train and import writing into a given directory."""
    d = tmp_path_factory.mktemp("inputs")
    text = tiny_models.write_text(d / "text.txt")
    return {"train": lambda out: ["train", "--text", text, "--out", out, *SHORT],
            "import": lambda out: import_args(qkv_bin, model_dir, d, out)}


@pytest.mark.parametrize("command", ["train", "import"])
def test_a_directory_it_did_not_make_is_left_alone(run, tmp_path, writer, command):
    out = users_directory(tmp_path / "mine")
    r = run(*writer[command](out))
    assert r.returncode == 1, r.stderr
    assert (f"qkv {command}: error: --out: '{out}' is not empty and was not made by qkv (it holds "
            "'config.json', 'log.jsonl', 'notes.txt' and 1 more); write into a new or empty "
            "directory, or pass --force to write there anyway") in r.stderr, r.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == USER_FILES  # no lock file left either
    # Once more: the refused run left no mark that would let a second one in.
    assert run(*writer[command](out)).returncode == 1
    r = run(*writer[command](out), "--force")
    assert r.returncode == 0, r.stderr
    assert (out / "notes.txt").read_text() == "keep\n"
    assert (out / "config.json").read_text() != USER_FILES["config.json"]


@pytest.mark.parametrize("command", ["train", "import"])
@pytest.mark.parametrize("state", ["new", "empty", "lock file", "qkv config"])
def test_a_new_empty_or_qkv_directory_is_written(run, tmp_path, writer, command, state):
    out = tmp_path / "out"
    if state != "new":
        out.mkdir()
    if state == "lock file":
        (out / ".qkv-train.lock").touch()
        (out / "notes.txt").write_text("keep\n")
    if state == "qkv config":
        (out / "config.json").write_text('{"arch": "gpt", "vocab": 3}\n')
        (out / "notes.txt").write_text("keep\n")
    r = run(*writer[command](out))
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").exists()
    if state in ("lock file", "qkv config"):
        assert (out / "notes.txt").read_text() == "keep\n"


def test_import_takes_its_inputs_kept_in_its_directory(run, qkv_bin, model_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    args = import_args(qkv_bin, model_dir, out, out)
    assert run(*args).returncode == 0
    assert (out / "model.safetensors").exists() and (out / "ckpt.safetensors").exists()


def test_a_model_or_run_in_the_directory_keeps_its_own_message(run, tmp_path, writer, model_dir):
    import shutil
    out = tmp_path / "run"
    shutil.copytree(model_dir, out)
    r = run(*writer["train"](out))
    assert r.returncode == 1 and "already holds a trained run" in r.stderr, r.stderr
    (out / "train_state.safetensors").unlink()
    r = run(*writer["import"](out))
    assert r.returncode == 2 and "already holds a model (model.safetensors)" in r.stderr, r.stderr
