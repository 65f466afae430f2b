"""qkv.train: a small GPT trained on a text, as ``qkv train`` trains it."""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Union

from . import _qkv
from ._checks import _bool, _callback, _float, _int, _path, _seed


_TRAIN_INTS = ("context", "layers", "heads", "kv_heads", "embd", "batch", "iters", "warmup",
               "eval_interval", "eval_iters", "log_interval", "threads", "stop_at")
_TRAIN_FLOATS = ("lr", "min_lr", "beta1", "beta2", "weight_decay", "grad_clip")
_TRAIN_BOOLS = ("rope", "bias", "resume", "force")


def _train_option(name: str, value: Any) -> Any:
    """One train() option in the Python type the extension takes; the library
    checks the values (ranges, combinations)."""
    if name in _TRAIN_INTS:
        value = _int(value, name, 32 if name == "threads" else 64)
        if name == "stop_at" and value < 0:  # the library would read it as no stop at all
            raise ValueError(f"stop_at: expected an iteration >= 0 (a multiple of eval_interval), "
                             f"found {value}")
        return value
    if name in _TRAIN_FLOATS:
        return _float(value, name)
    if name in _TRAIN_BOOLS:
        return _bool(value, name)
    if name == "seed":
        return _seed(value)
    if name in ("kernel", "dtype"):
        if not isinstance(value, str):
            raise TypeError(f"{name}: expected a str, found {type(value).__name__} {value!r}")
        return value
    raise TypeError(f"train() got an unexpected keyword argument '{name}'")


def train(text_path: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
          progress: Optional[Callable[[Dict[str, Any]], None]] = None,
          **options: Any) -> Dict[str, Any]:
    """Trains a GPT on a text file, as ``qkv train`` does, into `out_dir`
    (model.safetensors, config.json, vocab.json, train_state.safetensors,
    log.jsonl); :meth:`GPT.load` reads the result.

    options (the command's, with underscores): context, layers, heads, kv_heads,
    embd, rope, bias, batch, iters, warmup, eval_interval, eval_iters,
    log_interval, lr, min_lr, beta1, beta2, weight_decay, grad_clip, seed,
    threads, kernel, dtype ("float32", or "bf16": mixed precision, as
    ``qkv train --dtype bf16``), resume, force (start over where `out_dir`
    holds a trained run, or write into a directory qkv did not make), stop_at.
    kv_heads defaults to heads. `out_dir` must not exist yet, be empty, or be
    one qkv made (it holds .qkv-train.lock, or qkv's config.json); any other
    raises ValueError unless force=True, so a user's own files are never
    replaced by accident.

    progress, if given, is called on this thread with each line the trainer logs
    (a dict: iter, loss, lr, ... and val_loss at evaluations) while training runs
    on a worker thread. Ctrl-C (KeyboardInterrupt) asks the trainer to write a
    checkpoint and stop; ``resume=True`` continues from it. Returns iters_run,
    final_train_loss, final_val_loss, interrupted and next_iter.
    """
    text_path, out_dir = _path(text_path, "text_path"), _path(out_dir, "out_dir")
    _callback(progress, "progress")
    options = {k: _train_option(k, v) for k, v in options.items()}
    if "heads" in options and "kv_heads" not in options:
        options["kv_heads"] = options["heads"]  # as `qkv train`: no GQA unless asked
    result: Dict[str, Any] = {}
    failure: List[BaseException] = []

    # The worker says when it is done through an Event: a Ctrl-C that lands
    # in Thread.join() can leave the thread marked finished while it runs
    # (CPython before 3.13), so join() is never what is waited on.
    done = threading.Event()

    def run() -> None:
        try:
            result.update(_qkv.train(text_path, out_dir, options))
        except BaseException as e:
            failure.append(e)
        finally:
            done.set()

    # The trainer reports through log.jsonl (flushed line by line); reading it
    # here keeps the callback on the caller's thread and the trainer unchanged.
    log_path = os.path.join(out_dir, "log.jsonl")
    worker = threading.Thread(target=run, daemon=True)
    seen = 0

    def poll() -> None:
        nonlocal seen
        if progress is None or not os.path.exists(log_path):
            return
        with open(log_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        complete = lines[:-1]  # the last piece is "" or a line still being written
        for line in complete[seen:]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            progress(entry)
        seen = max(seen, len(complete))

    # Ctrl-C or an exception from the progress callback: the trainer writes
    # a checkpoint and stops, and the run's lock is released before it is
    # raised here, so no training goes on behind the caller's back.
    # The request is cleared before the worker starts, so a Ctrl-C at any
    # moment from here on (even before the trainer reads it) stops the run.
    _qkv.request_stop(False)
    try:
        worker.start()
        while not done.wait(0.05):
            poll()
        poll()
    except BaseException:
        _qkv.request_stop()
        while not done.is_set():  # a second Ctrl-C does not leave it running
            try:
                done.wait()
            except KeyboardInterrupt:
                continue
        raise
    if failure:
        raise failure[0]
    return result
