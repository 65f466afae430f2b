"""Thread binding for the benchmarks that alternate qkv's processes with
PyTorch or qkv's Python package in this process (compare.py,
pytorch_train.py, python_overhead.py).

Unbound, an OpenMP thread woken for a parallel region after an idle gap
sometimes lands on its waker's core, and on these 2-core VMs the pair then
spins on one core until the scheduler's 4 ms tick: qkv's training-shape
attention (0.2 ms a call) measured 4 or 8 ms in 6 of 24 processes, none of
them bound, and 0 of 24 bound.
"""
import os
import subprocess


def bind_threads():
    """Binds every contender's OpenMP threads to cores (OMP_PROC_BIND=spread,
    OMP_PLACES=cores, read by qkv's and torch's libgomp) unless the caller set
    OMP_PROC_BIND. Call it before torch loads libgomp; qkv's processes
    inherit it."""
    if "OMP_PROC_BIND" not in os.environ:
        os.environ["OMP_PROC_BIND"] = "spread"
        os.environ.setdefault("OMP_PLACES", "cores")


# The cores this process may use, read at import, before torch's libgomp
# binds the main thread to the first of them: a child inherits its parent
# thread's affinity, so each qkv (or ggml) process is started with all of
# them (set on this thread around the start, not in the child: torch's threads
# are alive here, and a child of a threaded process should run nothing before
# exec).
ALL_CPUS = os.sched_getaffinity(0)


def run_on_all_cpus(cmd, **kw):
    """subprocess.run(cmd, **kw) with the child free to use ALL_CPUS."""
    bound = os.sched_getaffinity(0)
    os.sched_setaffinity(0, ALL_CPUS)
    try:
        return subprocess.run(cmd, **kw)
    finally:
        os.sched_setaffinity(0, bound)
