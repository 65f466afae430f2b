"""`mpirun -np P qkv attention --sequence-parallel`: ring attention through the
command, against the float64 NumPy reference, with P = 2 and 4 ranks on this
machine (--oversubscribe), and the failure paths: an option the ring does not
take, and a rank killed mid-run, which must end the whole job, not hang it."""
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from reference import attention

MPIRUN = shutil.which("mpirun")
# Open MPI refuses to start as root unless told (CI runs as root); one
# OpenMP thread per rank keeps 4 ranks on 2 cores from fighting.
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def need_mpirun():
    if MPIRUN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mpirun is missing: scripts/deps.sh installs openmpi-bin")
        pytest.skip("mpirun not installed (apt-get install openmpi-bin)")


def mpirun(np_, qkv_bin, *args, timeout=120):
    cmd = [MPIRUN, "-np", str(np_), "--oversubscribe", qkv_bin, "attention", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV,
                          stdin=subprocess.DEVNULL)


def inputs(tmp_path, lead, hq, hkv, L, d, seed):
    rng = np.random.default_rng(seed)
    arrays = {"q": rng.standard_normal((*lead, hq, L, d)), "k": rng.standard_normal((*lead, hkv, L, d)),
              "v": rng.standard_normal((*lead, hkv, L, d))}
    for name, a in arrays.items():
        np.save(tmp_path / f"{name}.npy", a.astype(np.float32))
    return arrays


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("lead, hq, hkv, L, d, causal", [
    ((), 2, 2, 64, 16, "none"),
    ((), 2, 2, 64, 16, "top-left"),
    ((2,), 4, 2, 37, 8, "top-left"),   # GQA, a length no rank count divides
    ((), 8, 1, 200, 32, "top-left"),   # MQA
])
def test_ring_equals_the_reference(qkv_bin, tmp_path, ranks, lead, hq, hkv, L, d, causal):
    a = inputs(tmp_path, lead, hq, hkv, L, d, seed=L + hq)
    r = mpirun(ranks, qkv_bin, "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
               tmp_path / "v.npy", "--causal", causal, "--threads", "1", "--sequence-parallel",
               "-o", tmp_path / "out.npy", "--lse", tmp_path / "lse.npy")
    assert r.returncode == 0, r.stderr
    assert f"sequence split over {ranks} ranks" in r.stdout
    out, _, lse = attention(a["q"].astype(np.float32), a["k"].astype(np.float32),
                            a["v"].astype(np.float32), causal=causal)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), out, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.load(tmp_path / "lse.npy"), lse, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("ranks", [2, 4])
def test_option_the_ring_does_not_take_is_a_usage_error(qkv_bin, tmp_path, ranks):
    inputs(tmp_path, (), 2, 2, 16, 8, seed=1)
    r = mpirun(ranks, qkv_bin, "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
               tmp_path / "v.npy", "--window", "4,0", "--sequence-parallel", "-o", tmp_path / "o.npy")
    assert r.returncode == 2, r.stderr
    # Every rank meets it; one line reports it, whole.
    lines = [line for line in r.stderr.splitlines() if "qkv attention: error:" in line]
    assert lines == ["qkv attention: error: --sequence-parallel: --window not supported with it "
                     "(ring attention takes causal top-left or none, --scale, --kernel, --threads, "
                     "--lse) (see 'qkv attention --help')"], r.stderr
    assert not (tmp_path / "o.npy").exists()


def test_a_killed_rank_ends_the_job(qkv_bin, tmp_path):
    # Long enough (several seconds on one thread) that the kill lands mid-ring.
    inputs(tmp_path, (), 8, 8, 16384, 64, seed=2)
    cmd = [MPIRUN, "-np", "2", "--oversubscribe", qkv_bin, "attention", "--q", str(tmp_path / "q.npy"),
           "--k", str(tmp_path / "k.npy"), "--v", str(tmp_path / "v.npy"), "--threads", "1",
           "--sequence-parallel", "-o", str(tmp_path / "o.npy")]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    victim = None
    deadline = time.time() + 30
    while victim is None and time.time() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if int(fields[1]) == job.pid and argv and argv[0].endswith(b"qkv"):
                victim = int(pid)
                break
        time.sleep(0.2)
    assert victim is not None, "no rank of the job was found"
    time.sleep(1.0)  # past loading, into the ring
    assert job.poll() is None, "the job ended before a rank could be killed; make it longer"
    os.kill(victim, signal.SIGKILL)
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        pytest.fail("the job hung after one rank was killed")
    assert job.returncode != 0
    assert "signal 9" in err or "Killed" in err, err
    assert not (tmp_path / "o.npy").exists()


# ---- data-parallel training: mpirun -np P qkv train ---------------------------

TRAIN = ["--iters", "20", "--eval-interval", "10", "--batch", "8", "--layers", "2", "--embd", "32",
         "--heads", "4", "--context", "16", "--threads", "1", "--no-progress"]


def train_text(tmp_path):
    words = "the cat sat on a mat while the dog ran far away".split()
    path = tmp_path / "text.txt"
    path.write_text(" ".join(words[i % len(words)] for i in range(600)))
    return path


def mpi_train(ranks, qkv_bin, *args, timeout=180):
    cmd = [MPIRUN, "-np", str(ranks), "--oversubscribe", qkv_bin, "train", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV,
                          stdin=subprocess.DEVNULL)


def log_losses(run_dir):
    import json
    rows = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return {r["iter"]: (r.get("train_loss"), r.get("val_loss"), r.get("val_loss_full")) for r in rows}


def test_losses_agree_across_rank_counts(qkv_bin, tmp_path):
    text = train_text(tmp_path)
    logs = {}
    for ranks in (1, 2, 4):
        out = tmp_path / f"p{ranks}"
        r = mpi_train(ranks, qkv_bin, "--text", text, "--out", out, *TRAIN)
        assert r.returncode == 0, r.stderr
        logs[ranks] = log_losses(out)
        # Rank 0 alone reports and writes.
        assert r.stdout.count("done:") == 1
    assert logs[1].keys() == logs[2].keys() == logs[4].keys()
    for it, base in logs[1].items():
        for ranks in (2, 4):
            for a, b in zip(base, logs[ranks][it]):
                if a is None:
                    assert b is None
                else:  # float32 rounding of partial sums grouped another way
                    assert abs(a - b) < 2e-5, (it, ranks, a, b)


def test_resume_under_mpi_continues_exactly(qkv_bin, tmp_path):
    text = train_text(tmp_path)
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert mpi_train(2, qkv_bin, "--text", text, "--out", whole, *TRAIN).returncode == 0
    r = mpi_train(2, qkv_bin, "--text", text, "--out", part, *TRAIN, "--stop-at", "10")
    assert r.returncode == 0, r.stderr
    r = mpi_train(2, qkv_bin, "--text", text, "--out", part, *TRAIN, "--resume")
    assert r.returncode == 0, r.stderr
    a, b = log_losses(whole), log_losses(part)
    assert a.keys() == b.keys()
    for it in a:
        assert a[it] == b[it], it


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "qkv train: error:" in line]


@pytest.mark.parametrize("ranks, batch", [(2, "7"), (4, "6"), (3, "8")])
def test_global_batch_must_divide_by_ranks(qkv_bin, tmp_path, ranks, batch):
    # A usage error (exit 2), which every rank meets: reported once, whole.
    r = mpi_train(ranks, qkv_bin, "--text", train_text(tmp_path), "--out", tmp_path / "o",
                  *[x if x != "8" else batch for x in TRAIN])
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("qkv train: error: --batch: the global batch " + batch +
                               f" must divide by the {ranks} ranks"), r.stderr


@pytest.mark.parametrize("bad", [["--heads", "3"], ["--lr", "-1"], ["--frobnicate"],
                                 ["--out", ""]])
def test_an_error_of_every_rank_is_reported_once(qkv_bin, tmp_path, bad):
    args = ["--text", str(train_text(tmp_path)), "--out", str(tmp_path / "o"), *TRAIN]
    if bad[0] in args:
        args[args.index(bad[0]) + 1] = bad[1]
    else:
        args += bad
    r = mpi_train(4, qkv_bin, *args)
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("qkv train: error: "), r.stderr
    assert lines[0].endswith("(see 'qkv train --help')"), r.stderr


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_data_error_of_every_rank_is_reported_once(qkv_bin, tmp_path, ranks):
    r = mpi_train(ranks, qkv_bin, "--text", tmp_path / "missing.txt", "--out", tmp_path / "o",
                  *TRAIN)
    assert r.returncode == 1, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"qkv train: error: rank 0 of {ranks}: --text: cannot open"), r.stderr
    # The ring alike: every rank fails to read --q.
    r = mpirun(ranks, qkv_bin, "--q", tmp_path / "missing.npy", "--k", tmp_path / "missing.npy",
               "--v", tmp_path / "missing.npy", "--sequence-parallel", "-o", tmp_path / "o.npy")
    assert r.returncode == 1, r.stderr
    lines = [line for line in r.stderr.splitlines() if "qkv attention: error:" in line]
    assert len(lines) == 1 and f"rank 0 of {ranks}: --q: cannot open" in lines[0], r.stderr


def test_an_error_of_one_rank_is_reported_by_it(qkv_bin, tmp_path):
    # Rank 1 alone reads a text too short for the context: it fails inside
    # training, while rank 0 waits for it; its line comes out whole, once.
    short = tmp_path / "short.txt"
    short.write_text("too short")
    text = train_text(tmp_path)
    script = tmp_path / "rank.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then text={short}; else text={text}; fi\n'
        f'exec {qkv_bin} train --text "$text" --out {tmp_path / "o"} {" ".join(TRAIN)}\n')
    script.chmod(0o755)
    r = subprocess.run([MPIRUN, "-np", "2", "--oversubscribe", str(script)], capture_output=True,
                       text=True, timeout=120, env=ENV, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("qkv train: error: rank 1 of 2: --text: '"), r.stderr


def test_a_killed_training_rank_ends_the_job(qkv_bin, tmp_path):
    text = train_text(tmp_path)
    long = [x if x != "20" else "100000" for x in TRAIN]
    cmd = [MPIRUN, "-np", "2", "--oversubscribe", qkv_bin, "train", "--text", str(text), "--out",
           str(tmp_path / "k"), *long]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    ranks = []
    deadline = time.time() + 30
    while len(ranks) < 2 and time.time() < deadline:
        ranks = [int(p) for p in os.listdir("/proc") if p.isdigit() and child_of(int(p), job.pid)]
        time.sleep(0.2)
    assert ranks, "no rank of the job was found"
    time.sleep(2.0)  # into the steps
    os.kill(ranks[-1], signal.SIGKILL)
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        pytest.fail("the job hung after one rank was killed")
    assert job.returncode != 0
    assert "signal 9" in err or "Killed" in err, err


def child_of(pid, parent):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return int(fields[1]) == parent and bool(argv) and argv[0].endswith(b"qkv")
