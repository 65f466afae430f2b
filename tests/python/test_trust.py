"""The Python package at its edges: no silently wrong answer (tensors whose
stored values are not their values, gradients that would be dropped, options
that would be ignored or truncated), no crash or hang (thread counts, an
abandoned stream, a raising callback, huge broadcast views), and errors that
name the argument."""

import threading
import time

import numpy as np
import pytest
import torch

import qkv
import qkv.lesson
import qkv.torch

TEXT = ("the cat sat down on the mat. the dog sat down on the log. "
        "a cat and a dog sat on a mat and a log. ") * 60
TINY = dict(layers=1, heads=2, kv_heads=1, embd=16, context=16, batch=4, eval_iters=1,
            eval_interval=10, log_interval=1, threads=1, warmup=2, lr=3e-3, seed=7)


def qkv64(b=1, h=2, n=5, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, dtype=torch.float64, generator=g) for _ in range(3))


# Silent wrong results ------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda x: torch.complex(torch.zeros_like(x), x).conj().imag,   # neg bit: -(-x)
    lambda x: torch._neg_view(-x),                                   # neg bit on a plain view
    lambda x: torch.complex(x, x).conj().imag.neg(),                 # neg bit, then its negation
])
def test_neg_bit_tensors_read_as_their_values(make):
    q, k, v = qkv64()
    lazy = make(q)
    assert torch.equal(lazy.clone(), lazy.resolve_neg())  # the values the caller sees
    want = qkv.scaled_dot_product_attention(lazy.resolve_neg().contiguous(), k, v)
    got = qkv.scaled_dot_product_attention(lazy, k, v)
    assert torch.equal(got, want)
    for arg in ("key", "value"):
        args = dict(query=q, key=k, value=v)
        args[arg] = make(args[arg])
        plain = {n: t.resolve_neg() for n, t in args.items()}
        assert torch.equal(qkv.scaled_dot_product_attention(**args),
                           qkv.scaled_dot_product_attention(**plain))


def test_neg_bit_mask_reads_as_its_values():
    q, k, v = qkv64()
    m = torch.randn(5, 5, dtype=torch.float64)
    lazy = torch._neg_view(m)
    want = qkv.scaled_dot_product_attention(q, k, v, attn_mask=-m)
    assert torch.equal(qkv.scaled_dot_product_attention(q, k, v, attn_mask=lazy), want)


@pytest.mark.parametrize("loss", [lambda out: out.square().sum(), lambda out: out.sum()],
                         ids=["grad_out-needs-grad", "grad_out-constant"])
def test_double_backward_is_refused_not_wrong(loss):
    # Either kind of loss: with out.sum() grad_out needs no gradient, where
    # torch's once_differentiable would only say "does not require grad" later.
    q, k, v = (t.requires_grad_() for t in qkv64())
    out = qkv.torch.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError, match=r"create_graph=True .* is not supported"):
        torch.autograd.grad(loss(out), q, create_graph=True)


def test_single_backward_still_works_after_a_refused_double():
    q, k, v = (t.requires_grad_() for t in qkv64())
    out = qkv.torch.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(out.sum(), q, create_graph=True, retain_graph=True)
    out.sum().backward()
    rq, rk, rv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(rq, rk, rv).sum().backward()
    torch.testing.assert_close(q.grad, rq.grad, rtol=1e-10, atol=1e-12)


def test_plain_call_on_tensors_that_require_grad_is_refused():
    q, k, v = qkv64()
    w = torch.ones(4, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match=r"query: requires grad.*qkv\.torch"):
        qkv.scaled_dot_product_attention(q @ w, k, v)
    with pytest.raises(ValueError, match="key: requires grad"):
        qkv.scaled_dot_product_attention(q, k @ w, v)
    with pytest.raises(ValueError, match="attn_mask: requires grad"):
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(5, 5, dtype=torch.float64,
                                                                        requires_grad=True))
    with torch.no_grad():  # no graph being recorded: nothing is lost
        qkv.scaled_dot_product_attention(q @ w, k, v)
    # The backward computes gradients explicitly: its inputs may require grad.
    qr = q.clone().requires_grad_()
    out, lse = qkv.scaled_dot_product_attention(qr.detach(), k, v, return_lse=True)
    qkv.attention_backward(qr, k, v, out, lse, out)


def test_mask_that_requires_grad_is_refused_under_qkv_torch():
    q, k, v = (t.requires_grad_() for t in qkv64())
    m = torch.zeros(5, 5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="attn_mask: requires grad"):
        qkv.torch.scaled_dot_product_attention(q, k, v, attn_mask=m)
    qkv.torch.scaled_dot_product_attention(q, k, v, attn_mask=m.detach()).sum().backward()


def test_bottom_right_without_is_causal_is_an_error():
    q, k, v = (t.numpy() for t in qkv64())
    with pytest.raises(ValueError, match="causal: 'bottom-right' needs is_causal=True"):
        qkv.scaled_dot_product_attention(q, k, v, causal="bottom-right")
    q, k, v = (t.requires_grad_() for t in qkv64())
    with pytest.raises(ValueError, match="causal: 'bottom-right' needs is_causal=True"):
        qkv.torch.scaled_dot_product_attention(q, k, v, causal="bottom-right")


def test_bottom_right_is_applied_with_is_causal():
    q, k, v = (t.numpy() for t in qkv64())
    got = qkv.scaled_dot_product_attention(q[:, :, :2], k, v, is_causal=True, causal="bottom-right")
    n, s = 2, 5
    visible = np.arange(s)[None, :] <= np.arange(n)[:, None] + s - n
    want = qkv.scaled_dot_product_attention(q[:, :, :2], k, v, attn_mask=visible)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("lengths,what", [
    ([2.9, 4.0], r"key_lengths\[0\]: expected an integer, found float"),
    ("39", "key_lengths: expected a sequence, found str"),
    ([True], r"key_lengths\[0\]: expected an integer, found bool"),
    (np.array([2.5]), r"key_lengths\[0\]: expected an integer, found float"),
])
def test_key_lengths_must_be_integers(lengths, what):
    q, k, v = (t.numpy() for t in qkv64(b=2 if len(lengths) == 2 else 1))
    with pytest.raises(TypeError, match=what):
        qkv.scaled_dot_product_attention(q, k, v, key_lengths=lengths)


def test_config_that_disagrees_with_the_weights_is_refused(tmp_path):
    import json
    (tmp_path / "t.txt").write_text(TEXT)
    qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=1, **dict(TINY, kv_heads=2))
    cfg_path = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(heads=4, kv_heads=4)  # every tensor keeps its shape
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config.json'.*heads 4 \(weights: 2\)"):
        qkv.GPT.load(tmp_path / "m")


def test_resume_and_force_together_are_refused(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    with pytest.raises(ValueError, match="resume cannot be combined with force"):
        qkv.train(tmp_path / "t.txt", tmp_path / "m", resume=True, force=True, iters=1)


def test_resume_with_other_options_is_refused(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=4, **TINY)
    with pytest.raises(ValueError, match=r"iters 20 \(checkpoint: 4\).*lr 0\.5"):
        qkv.train(tmp_path / "t.txt", tmp_path / "m", resume=True, iters=20, lr=0.5)
    again = qkv.train(tmp_path / "t.txt", tmp_path / "m", resume=True, iters=4, **TINY)
    assert again["iters_run"] == 0 and not again["interrupted"]


# Crashes and hangs ---------------------------------------------------------

@pytest.mark.parametrize("threads", [100000, 40000])
def test_threads_are_capped_everywhere(threads, tmp_path):
    q, k, v = qkv64()
    with pytest.raises(ValueError, match="threads: expected an integer from 0 .*found '%d'" % threads):
        qkv.scaled_dot_product_attention(q, k, v, threads=threads)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="threads: expected an integer from 0"):
        qkv.attention_backward(q, k, v, out, lse, out, threads=threads)
    with pytest.raises(ValueError, match="threads: expected an integer from 0"):
        qkv.torch.scaled_dot_product_attention(*(t.requires_grad_() for t in (q, k, v)),
                                               threads=threads)
    (tmp_path / "t.txt").write_text(TEXT)
    with pytest.raises(ValueError, match="threads: expected an integer from 0"):
        qkv.train(tmp_path / "t.txt", tmp_path / "m", **dict(TINY, iters=1, threads=threads))


def test_model_threads_are_capped(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=1, **TINY)
    m = qkv.GPT.load(tmp_path / "m")
    with pytest.raises(ValueError, match="threads: expected an integer from 0"):
        m.set_threads(100000)
    with pytest.raises(ValueError, match=r"threads: expected an integer in \[-2\*\*31, 2\*\*31\)"):
        m.set_threads(2**40)


def _qkv_threads():
    return [t for t in threading.enumerate() if t is not threading.main_thread()]


@pytest.mark.parametrize("leave", ["break", "raise", "drop"])
def test_leaving_a_stream_early_stops_its_worker(leave, tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=1, **TINY)
    m = qkv.GPT.load(tmp_path / "m")
    before = set(_qkv_threads())
    it = m.stream("the", tokens=100000)
    if leave == "break":
        for _ in it:
            break
        it.close()
    elif leave == "raise":
        with pytest.raises(KeyError):
            for _ in it:
                raise KeyError("stop")
        del it
    else:
        next(it)
        del it  # collected: closed
    deadline = time.monotonic() + 10
    while set(_qkv_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(_qkv_threads()) - before


def test_raising_progress_callback_stops_the_run(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)

    def boom(entry):
        raise KeyError("from the callback")

    before = set(_qkv_threads())  # other libraries' (tqdm's monitor) may outlive their tests
    with pytest.raises(KeyError, match="from the callback"):
        qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=100000, progress=boom, **TINY)
    assert not set(_qkv_threads()) - before  # the trainer has returned
    # The lock is released and the checkpoint is there to resume from.
    r = qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=100000, resume=True,
                  progress=lambda e: qkv._qkv.request_stop(), **TINY)
    assert r["interrupted"] and r["next_iter"] > 0


def test_huge_broadcast_view_fails_fast_on_size():
    q = np.broadcast_to(np.zeros((1, 1, 1, 1)), (1, 1, 2**36, 1))
    k = v = np.zeros((1, 1, 3, 1))
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"out \[1, 1, 68719476736, 1\] float64 would take"):
        qkv.scaled_dot_product_attention(q, k, v)
    assert time.monotonic() - t0 < 5


def test_huge_weights_name_their_size():
    q = np.broadcast_to(np.zeros((1, 1, 1, 1)), (1, 1, 2**20, 1))
    k = v = np.broadcast_to(np.zeros((1, 1, 1, 1)), (1, 1, 2**20, 1))
    with pytest.raises(ValueError, match=r"weights \[1, 1, 1048576, 1048576\]"):
        qkv.scaled_dot_product_attention(q, k, v, return_weights=True)


# Errors that name the argument ---------------------------------------------

@pytest.mark.parametrize("kw,exc,what", [
    (dict(window=5), TypeError, "window: expected"),
    (dict(window=(2**63, 0)), ValueError, r"window\[0\]: expected an integer in \[-2\*\*63, 2\*\*63\)"),
    (dict(threads=2**40), ValueError, r"threads: expected an integer in \[-2\*\*31, 2\*\*31\)"),
    (dict(threads=1.5), TypeError, "threads: expected an integer"),
    (dict(softcap="1"), TypeError, "softcap: expected a number"),
    (dict(alibi_slopes="ab"), TypeError, "alibi_slopes: expected a sequence"),
    (dict(scale="2"), TypeError, "scale: expected a number"),
    (dict(kernel=1), TypeError, "kernel: expected a str"),
    (dict(is_causal=True, causal="none"), ValueError, "causal: expected 'top-left' or 'bottom-right'"),
    (dict(causal=None), TypeError, "causal: expected a str"),
])
def test_bad_options_name_the_argument(kw, exc, what):
    q, k, v = (t.numpy() for t in qkv64())
    with pytest.raises(exc, match=what):
        qkv.scaled_dot_product_attention(q, k, v, **kw)


def test_bfloat16_mask_is_read_as_its_values():
    q = torch.randn(1, 2, 5, 4, generator=torch.Generator().manual_seed(3))
    m = torch.randn(5, 5, generator=torch.Generator().manual_seed(4)).bfloat16()
    want = qkv.scaled_dot_product_attention(q, q, q, attn_mask=m.float())
    assert torch.equal(qkv.scaled_dot_product_attention(q, q, q, attn_mask=m), want)
    qb = q.bfloat16()
    want = qkv.scaled_dot_product_attention(qb, qb, qb, attn_mask=m.float())
    assert torch.equal(qkv.scaled_dot_product_attention(qb, qb, qb, attn_mask=m), want)


def test_sparse_tensor_is_a_type_error():
    q, k, v = qkv64()
    with pytest.raises(TypeError, match="query: expected a dense"):
        qkv.scaled_dot_product_attention(q.to_sparse(), k, v)


@pytest.mark.parametrize("kw,exc,what", [
    (dict(seed=-1), ValueError, r"seed: expected an integer in \[0, 2\*\*64\)"),
    (dict(seed=2**64), ValueError, "seed: expected"),
    (dict(iters=1.5), TypeError, "iters: expected an integer"),
    (dict(lr="big"), TypeError, "lr: expected a number"),
    (dict(rope=1), TypeError, "rope: expected True or False"),
    (dict(layers=2**70), ValueError, r"layers: expected an integer in \[-2\*\*63, 2\*\*63\)"),
])
def test_train_options_name_the_argument(kw, exc, what, tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    with pytest.raises(exc, match=what):
        qkv.train(tmp_path / "t.txt", tmp_path / "m", **kw)


def test_model_arguments_name_themselves(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    qkv.train(tmp_path / "t.txt", tmp_path / "m", iters=1, **TINY)
    m = qkv.GPT.load(tmp_path / "m")
    with pytest.raises(ValueError, match=r"tokens\[0\]: expected an integer in \[-2\*\*31, 2\*\*31\)"):
        m.logits([2**31])
    with pytest.raises(ValueError, match="text: not valid Unicode"):
        m.encode("a\ud800")
    with pytest.raises(ValueError, match="prompt: not valid Unicode"):
        m.generate("\ud800", tokens=1)
    with pytest.raises(ValueError, match="seed: expected an integer in"):
        m.generate("t", tokens=1, seed=-1)


@pytest.mark.parametrize("seed,exc", [(-1, ValueError), (-2**100, ValueError), (1.0, TypeError),
                                      (True, TypeError), ("3", TypeError)])
def test_lesson_seed_names_itself(seed, exc):
    with pytest.raises(exc, match="seed: expected"):
        qkv.lesson.default_rng(seed)


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**32, 2**64 - 1, 2**64, 2**100, 2**128 - 1,
                                  2**128, 3**200, np.uint64(2**63)])
def test_lesson_accepts_the_seeds_numpy_accepts(seed):
    ours, numpys = qkv.lesson.default_rng(seed), np.random.default_rng(seed)
    assert [ours.random_raw() for _ in range(4)] == \
        [int(x) for x in numpys.bit_generator.random_raw(4)]
    np.testing.assert_array_equal(ours.normal(size=5), numpys.normal(size=5))


@pytest.mark.parametrize("seed", [2**32, 2**100])
def test_lesson_random_state_refuses_what_numpy_refuses(seed):
    with pytest.raises(ValueError):
        np.random.RandomState(seed)
    with pytest.raises(ValueError, match=r"seed: expected an integer in \[0, 2\*\*32\)"):
        qkv.lesson.RandomState(seed)


def test_train_refuses_a_text_that_is_its_own_log(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text(TEXT)
    with pytest.raises(ValueError, match=r"text_path: .* is the run's own log.jsonl in out_dir"):
        qkv.train(out / "log.jsonl", out, iters=1, **TINY)
    assert (out / "log.jsonl").read_text() == TEXT


def test_train_leaves_a_directory_it_did_not_make_alone(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    out = tmp_path / "mine"
    out.mkdir()
    mine = {"config.json": '{"mine": true}', "vocab.json": "my words", "log.jsonl": "my log"}
    for name, text in mine.items():
        (out / name).write_text(text)
    with pytest.raises(ValueError, match=r"out_dir: '.*mine' is not empty and was not made by qkv "
                       r"\(it holds 'config.json', 'log.jsonl', 'vocab.json'\); write into a new or "
                       r"empty directory, or pass force"):
        qkv.train(tmp_path / "t.txt", out, iters=1, **TINY)
    assert {p.name: p.read_text() for p in out.iterdir()} == mine
    qkv.train(tmp_path / "t.txt", out, iters=1, force=True, **TINY)
    assert (out / "model.safetensors").exists()
    qkv.train(tmp_path / "t.txt", tmp_path / "new", iters=1, **TINY)  # a new directory is fine


def test_resume_checks_stop_at_against_the_checkpoint(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    out = tmp_path / "run"
    qkv.train(tmp_path / "t.txt", out, iters=40, stop_at=20, **TINY)  # TINY: eval_interval 10
    # The checkpoint's eval_interval (10) counts, not the default 250.
    r = qkv.train(tmp_path / "t.txt", out, resume=True, stop_at=30)
    assert r["iters_run"] == 10, r
    with pytest.raises(ValueError, match="stop_at 10 is before the checkpoint's iteration"):
        qkv.train(tmp_path / "t.txt", out, resume=True, stop_at=10)
    with pytest.raises(ValueError, match="stop_at must be a multiple of the run's eval_interval 10"):
        qkv.train(tmp_path / "t.txt", out, resume=True, stop_at=35)


def test_embedding_texts_cut_to_max_length_is_said():
    """The context limit is never silent: embed() says how many texts it cut
    (sentence-transformers cuts them without a word); texts that fit, none."""
    import warnings

    from bert_folders import minilm_dir
    m = qkv.Model.load(minilm_dir())
    with pytest.warns(RuntimeWarning, match=r"embed: 1 of 2 texts were cut to 8 tokens"):
        m.embed(["short", "a much longer text than eight tokens of the model"], max_length=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.embed(["short", "fits"], max_length=8)
