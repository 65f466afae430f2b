"""Ctrl-C stops long calls: a SIGINT sent 0.5 s into an attention forward or
backward (fast float32 kernel, reference float64 kernel, a broadcast input
whose scan, output and blocks are huge), generate or train raises
KeyboardInterrupt within a second or two, though the call runs with the GIL
released and would take far longer. Each call runs in a child interpreter,
which reports when the interrupt reached Python; the bound is generous (not
a timing test): these calls take 10 s to minutes uninterrupted."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = """
import os, sys, time
import numpy as np
import qkv
{setup}
print("ready", flush=True)
start = time.monotonic()
try:
    {call}
    print("returned after %.2f s" % (time.monotonic() - start), flush=True)
except KeyboardInterrupt:
    print("interrupted at %.6f" % time.monotonic(), flush=True)
"""

BIG_F32 = """
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 1, 65536, 64), dtype=np.float32)
k = rng.standard_normal((1, 1, 65536, 64), dtype=np.float32)
v = k.copy()
"""

CASES = {
    "fast-forward": (BIG_F32, "qkv.scaled_dot_product_attention(q, k, v, threads=1)"),
    "fast-forward-all-threads": (BIG_F32, "qkv.scaled_dot_product_attention(q, k, v)"),
    "reference-forward": (
        "q = np.random.default_rng(0).random((1, 8, 8192, 64)); k = v = q.copy()",
        "qkv.scaled_dot_product_attention(q, k, v)"),
    "broadcast-rows": (  # one row in memory: its output is zeroed and computed in slices
        "q = np.broadcast_to(np.zeros((1, 1, 1, 1), np.float32), (1, 1, 2**29, 1));"
        "k = v = np.zeros((1, 1, 4, 1), np.float32)",
        "[qkv.scaled_dot_product_attention(q, k, v) for _ in range(10)]"),
    "broadcast-many-blocks": (
        "q = np.broadcast_to(np.ones((1, 1, 1, 8), np.float32), (1, 1, 2**24, 8));"
        "k = v = np.ones((1, 1, 8, 8), np.float32)",
        "[qkv.scaled_dot_product_attention(q, k, v) for _ in range(100)]"),
    "fast-backward": (
        BIG_F32 + "q, k, v = q[..., :32768, :], k[..., :32768, :], v[..., :32768, :]\n"
        "out, lse = qkv.scaled_dot_product_attention(q[..., :64, :], k, v, return_lse=True)\n"
        "out = np.repeat(out, 512, axis=-2); lse = np.repeat(lse, 512, axis=-1)",
        "qkv.attention_backward(q, k, v, out, lse, out)"),
    "reference-backward": (
        "q = np.random.default_rng(0).random((1, 4, 4096, 64)); k = v = q.copy();"
        "out, lse = qkv.scaled_dot_product_attention(q[..., :1, :], k, v, return_lse=True);"
        "out = np.repeat(out, 4096, axis=-2); lse = np.repeat(lse, 4096, axis=-1)",
        "qkv.attention_backward(q, k, v, out, lse, out)"),
}


def interrupt_child(setup, call, tmp_path, ready_timeout=120):
    """Runs the child, sends SIGINT 0.5 s after it is ready; returns the
    child's output and the seconds from the signal to the interrupt."""
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(setup=textwrap.indent(setup, ""), call=call))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line = child.stdout.readline()
        assert line.strip() == "ready", (line, child.stderr.read())
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "interrupted at" in out, (out, err)
    return out, float(out.split("interrupted at")[1].split()[0]) - sent


@pytest.mark.parametrize("case", sorted(CASES))
def test_ctrl_c_stops_a_long_call(tmp_path, case):
    setup, call = CASES[case]
    out, delay = interrupt_child(setup, call, tmp_path)
    assert delay < 2.5, (case, delay, out)


def test_generate_stops(tmp_path):
    setup = (f"qkv.train({str(tmp_path / 't.txt')!r}, {str(tmp_path / 'm')!r}, iters=1, layers=1, "
             "heads=2, embd=8, context=8, threads=1)\nm = qkv.GPT.load(" + repr(str(tmp_path / "m"))
             + ")")
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 40)
    out, delay = interrupt_child(setup, "m.generate('t', tokens=10**9, sliding_window=True)", tmp_path)
    assert delay < 2.5, out


def test_train_stops_with_a_checkpoint(tmp_path):
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 400)
    setup = ""
    call = (f"qkv.train({str(tmp_path / 't.txt')!r}, {str(tmp_path / 'm')!r}, iters=10**6, "
            "layers=1, heads=2, embd=16, context=16, threads=1)")
    out, delay = interrupt_child(setup, call, tmp_path)
    assert delay < 2.5, out
    assert (tmp_path / "m" / "train_state.safetensors").exists()


def test_a_call_from_another_thread_is_not_stopped_by_the_poll():
    # The poll runs Python's signal handlers only on the main thread; on a
    # worker it finds nothing, and the call completes with the right answer.
    import threading

    import numpy as np

    import qkv
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 2048, 32), dtype=np.float32)
    results = []
    t = threading.Thread(target=lambda: results.append(
        qkv.scaled_dot_product_attention(q, q, q, kernel="reference")))
    t.start()
    t.join()
    expect = qkv.scaled_dot_product_attention(q, q, q, kernel="reference")
    np.testing.assert_array_equal(results[0], expect)


@pytest.mark.parametrize("where", [0, 2])
def test_broadcast_rows_are_still_checked(where):
    # A view whose rows are one row in memory is scanned once: a NaN in it is
    # still found, at the first row.
    import numpy as np

    import qkv
    row = np.ones(4)
    row[where] = np.nan
    q = np.broadcast_to(row, (1, 2, 7, 4))
    with pytest.raises(ValueError, match=rf"values must be finite, found NaN at \[0, 0, 0, {where}\]"):
        qkv.scaled_dot_product_attention(q, np.ones((1, 2, 5, 4)), np.ones((1, 2, 5, 4)))


MODEL_LOOP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import qkv
    from bert_folders import minilm_dir
    m = qkv.Model.load(minilm_dir())
    ids = m.tokenize("word " * 200)
    print("ready", flush=True)
    try:
        for _ in range(2000):
            m.hidden_states(ids)
        print("finished")
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
""")


def test_ctrl_c_in_a_forward_pass_never_corrupts_the_heap(tmp_path):
    # A handler that ran on the kernel's stack overwrote what oneDNN's GEMM
    # kept below its stack pointer: "corrupted size vs. prev_size", abort,
    # in about half the tries. Signalled from outside, as a terminal does.
    from bert_folders import minilm_dir
    minilm_dir()  # skips without the weights package
    script = tmp_path / "loop.py"
    script.write_text(MODEL_LOOP.format(tests=os.path.dirname(__file__)))
    for delay in (0.2, 0.5, 0.8, 1.1, 1.4, 1.7):
        p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0 and out.strip().endswith("KeyboardInterrupt"), (delay, p.returncode, out)


@pytest.mark.parametrize("delay", [0.05, 0.5, 1.5])
def test_train_is_over_when_its_keyboard_interrupt_arrives(tmp_path, delay):
    # A Ctrl-C that landed in Thread.join() left the trainer running behind
    # the caller's back (its lock held, its log growing); one that came before
    # the trainer read its flag was lost.
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 400)
    out = tmp_path / "m"
    code = textwrap.dedent(f"""
        import os, signal, threading, qkv
        kw = dict(layers=1, heads=2, embd=16, context=16, eval_interval=10, eval_iters=2, threads=1)
        threading.Timer({delay}, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            qkv.train({str(tmp_path / 't.txt')!r}, {str(out)!r}, iters=10**6, **kw)
            print("finished")
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        log = open({str(out / 'log.jsonl')!r}).read() if os.path.exists({str(out / 'log.jsonl')!r}) else ""
        import time; time.sleep(1.0)
        after = open({str(out / 'log.jsonl')!r}).read() if os.path.exists({str(out / 'log.jsonl')!r}) else ""
        print("log unchanged" if log == after else "log grew")
        print("threads", threading.active_count())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["KeyboardInterrupt", "log unchanged", "threads 1"], r.stdout
