"""One contender per process, driven by the parent over a pipe: the
benchmarks that time whole models (embed.py, generate.py) load each library
in a process of its own, so none shares a runtime, a thread pool or an
allocator with another, and each one's peak memory is its own.

The child runs make() (module-level, or a functools.partial of one, so that
a spawned process can unpickle it), which returns (handler, ready):
ready goes back to the parent as the answer to its first call(), and every
later request tuple is answered with handler(request), until ("stop",),
which answers with the child's peak resident memory.
"""
import os
import resource
import sys


def peak_rss():
    """This process's peak resident memory so far, in bytes (Linux: KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def serve(make, cpus, conn):
    """The child's loop. An exception anywhere goes back as ("error",
    message); a parent gone (EOF) ends it quietly."""
    os.sched_setaffinity(0, cpus)  # the parent's cores at its start, whatever binds it later
    try:
        handler, ready = make()
        conn.send(("ok", ready))
        while True:
            try:
                req = conn.recv()
            except EOFError:  # the parent has exited (after another contender's error, say)
                return
            if req[0] == "stop":
                conn.send(("ok", peak_rss()))
                return
            conn.send(("ok", handler(req)))
    except Exception as e:  # noqa: BLE001 (any failure is reported by the parent, by name)
        conn.send(("error", f"{type(e).__name__}: {e}"))


class Worker:
    """The parent's handle on one contender's process: call(*request) sends a
    request and returns its answer; a failure in the child ends the parent
    with `script: name: message`."""

    def __init__(self, ctx, script, name, make, cpus):
        self.script, self.name = script, name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(make, cpus, child), daemon=True)
        self.proc.start()
        child.close()  # the child's end alone: a dead child then reads as EOF here, not a hang
        self.ready = self.call()

    def call(self, *req):
        if req:
            self.conn.send(req)
        try:
            status, value = self.conn.recv()
        except EOFError:
            sys.exit(f"{self.script}: {self.name}: its process died (exit {self.proc.exitcode})")
        if status == "error":
            sys.exit(f"{self.script}: {self.name}: {value}")
        return value

    def stop(self):
        """Ends the process; returns its peak resident memory in bytes."""
        peak = self.call("stop")
        self.proc.join()
        return peak
