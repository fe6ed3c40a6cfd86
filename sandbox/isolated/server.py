"""A long-lived sandbox worker: isolation once, then exactly one fork per execution.

This process, the *server*, enters its namespaces, pre-imports and warms up what programs use
and forks the *zygote* (``zygote.py``), the only process that forks per execution: the server,
which polls and talks to the pool, never forks again. Per execution it makes the child's pipes,
hands them to the zygote, writes the job and watches the pipes (and the socket only for a
streamed job's ``stop``); the zygote's SIGKILL enforces deadlines. docs/sandbox.md, "Process
layout".
"""

from __future__ import annotations

import builtins
import gc
import importlib
import importlib.machinery
import json
import math
import os
import select
import socket
import sys
import time
import types
from collections import deque

from sandbox.isolated import child, limits, namespaces, seccomp, split, zygote
from sandbox.isolated.pipes import Channel, Writer
from sandbox.isolated.scratch import clean_scratch
from sandbox.isolated.syscalls import PR_SET_NO_NEW_PRIVS, prctl
from sandbox.wire.frames import FILE_CAP, FLUSH_BYTES, READ_BYTES, ChildRecords, Frames
from sandbox.wire.levels import LEVEL_FULL, LEVEL_NAMESPACES

# What programs import often enough that importing it in every child would cost more than
# carrying it in every fork (each preloaded page and mapping is copied by every fork and torn
# down by every exit): what MBPP's references and HumanEval's prompts import (docs/benchmarks.md,
# sandbox section). Not ``random``, which would reseed itself in every child.
PRELOAD = (  # noqa: SIM905
    "array bisect cmath collections copy functools heapq itertools json math operator re string "
    "typing"
).split()
IDLE_POLL_S, WARM_UP_ROUNDS = 0.5, 20
POLL_IN = select.POLLIN | select.POLLHUP | select.POLLERR
WARM_UP_CODE = "import re\ndef f(x):\n    return [x + 1, 'a', (1, 2.5), {1: None}]\n"
WARM_UP_PARTS = [{"kind": "value", "exprs": [f"f({i})"]} for i in range(3)]
# The zygote's calibration (sandbox/isolated/pinning.py): the warm-up job, then a stop, so the
# zygote can read which pages the child wrote.
STOP_PART = {"kind": "exec", "src": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)"}


def calibration_job() -> dict:
    """The warm-up job and the stop, compiled as real jobs are."""
    return {**child.precompiled(WARM_UP_CODE, "", [*WARM_UP_PARTS, STOP_PART]), "limits": []}


class Worker:
    """The server: executes jobs one at a time through the zygote (see the module docstring)."""

    def __init__(self, chan: Channel, ctl: socket.socket, args: types.SimpleNamespace) -> None:
        self.chan, self.ctl, self.args = chan, ctl, args
        self.pending: deque[dict] = deque()
        self.exiting = False
        self.executions, self.base_size = 0, 0

    def execute(self, job: dict) -> None:
        """One execution: pipes to the zygote, watch, have it swept, report ``done``. A program
        that does not compile is reported without a fork."""
        start = time.monotonic()
        payload = child.precompiled(job["code"], job["setup_code"], job["parts"])
        if "load_error" in payload:
            self._done(job, "end", 0, [payload["load_error"]], start)
            return
        payload["limits"] = self._limits(job)
        stdin = job.get("stdin")  # a whole program's: its input follows the job in the pipe
        if stdin is not None:
            payload["stdio"] = True
        for key in ("argv", "files", "native"):  # a command, the files to write in its scratch
            if key in job:
                payload[key] = job[key]
        job_r, job_w = os.pipe()
        val_r, val_w = os.pipe()
        out_r, out_w = os.pipe()
        records: list = []
        frames = [zygote.frame_job(payload), stdin or b""]  # marshal: zygote.py
        if job.get("split"):  # two processes (sandbox/isolated/split.py)
            program, tests = map(zygote.frame_job, split.payloads(payload, job))
            frames = [program]
            self._start_split(job_r, val_w, out_w, tests)
        else:
            self._start([(b"R", [job_r, val_w, out_w])])
        os.set_blocking(job_w, False)
        writer = Writer(job_w, frames)
        kept: list[bytes] = []  # a whole program's first bytes of stderr (``stderr_bytes``)
        try:
            if stdin is None:
                status = self._watch(job, val_r, out_r, writer, start, records)
            else:  # its stdout is the value pipe, its stderr the output pipe
                status = self._watch_program(job, val_r, out_r, writer, start, records, kept)
        finally:
            for fd in (val_r, out_r):
                os.close(fd)
            writer.close()
        status, signum, exit_status = self._finish(status)
        self.args.clean_scratch()
        if stdin is None:
            self._done(job, status, signum, records, start)
        else:  # what a whole program wrote and was not sent yet, and its exit status
            out, err = b"".join(records), b"".join(kept)
            self._done(job, status, signum, [], start, out=out, err=err, exit=exit_status)

    def _start(self, children: list[tuple[bytes, list[int]]]) -> None:
        try:
            for message, fds in children:
                socket.send_fds(self.ctl, [message], fds)
        finally:
            for fd in {fd for _, fds in children for fd in fds}:
                os.close(fd)

    def _start_split(self, job_r: int, val_w: int, out_w: int, tests: bytes) -> None:
        """A split job's program's process (the output pipe in its value pipe's slot) and its
        tests' (their job written at once: it reads it first), the call pipes between them."""
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        tests_r, tests_w = os.pipe()
        program_fds = [job_r, out_w, out_w, request_r, reply_w]
        self._start([(b"R", program_fds), (b"r", [tests_r, val_w, out_w, reply_r, request_w])])
        Writer(tests_w, [tests]).write_all()

    def _done(
        self, job: dict, status: str, signum: int, records: list, start: float, **more: object
    ) -> None:
        done = {"op": "done", "id": job["id"], "status": status, "signal": signum}
        done["recs"] = records
        done["duration_ms"] = (time.monotonic() - start) * 1000
        done.update(more)
        self.chan.send(done)

    def _limits(self, job: dict) -> list[tuple[int, int]]:
        """The child's rlimits, computed here so the child runs as little Python as it can.
        RLIMIT_AS is the zygote's address space (re-read every 64 executions) plus
        ``memory_mb``, or the job's own where it is lower."""
        if self.executions % 64 == 0:
            self.base_size = limits.virtual_size(self.args.zygote_proc)
        self.executions += 1
        memory_mb = min(job.get("memory_mb") or self.args.memory_mb, self.args.memory_mb)
        memory = self.base_size + memory_mb * 1024 * 1024
        return limits.rlimits(memory, math.ceil(job["timeout_s"]) + 1, FILE_CAP)

    # long: the per-execution poll loop, one function so no call is added per wake-up
    def _watch(
        self, job: dict, val_r: int, out_r: int, writer: Writer, start: float, records: list
    ) -> str:
        """Collect records until the child ends, misbehaves, or a deadline passes.

        Records are sent on as they arrive only when the pool asked for it (it stops an
        execution at the first failure), or once ``FLUSH_BYTES`` of them wait; otherwise they
        travel with ``done``. They stay bytes here, counted and capped (``ChildRecords``).
        """
        watched = [val_r, out_r, self.ctl.fileno()]
        if job.get("stream"):  # the pool may send ``stop`` for this job
            watched.append(self.chan.fd)
        poller = _poller(watched, writer)
        pipe = ChildRecords(len(job["parts"]))
        held = 0
        overall = start + job["timeout_s"]
        phase = start + job["test_timeout_s"]
        output = 0
        while True:
            remaining = min(phase, overall) - time.monotonic()
            if remaining <= 0:
                return "timeout"
            events = dict(poller.poll(max(1, int(remaining * 1000) + 1)))
            if self.chan.fd in events and self._stop_requested(job["id"]):
                return "stopped"
            if self.ctl.fileno() in events:
                return "infra"  # the zygote could not fork (or is gone)
            if writer.fd in events and writer.write():
                poller.unregister(writer.fd)
                writer.close()
            if out_r in events:
                data = os.read(out_r, READ_BYTES)
                output += len(data)
                if not data:
                    poller.unregister(out_r)
                elif output > job["max_output_bytes"]:
                    return "output_limit"
            if val_r in events:
                data = os.read(val_r, READ_BYTES)
                if not data:
                    return "eof"
                new, ending = pipe.feed(data)
                records.extend(new)
                if ending is not None:
                    return ending
                if not new:
                    continue
                phase = time.monotonic() + job["test_timeout_s"]
                held += sum(map(len, new))
                if job.get("stream") or held >= FLUSH_BYTES:
                    self.chan.send({"op": "records", "id": job["id"], "recs": records[:]})
                    records.clear()
                    held = 0

    def _watch_program(
        self,
        job: dict,
        out_r: int,
        err_r: int,
        writer: Writer,
        start: float,
        held: list,
        kept: list,
    ) -> str:
        """A whole program's execution: its stdout (``out_r``) goes to the pool in messages of
        ``FLUSH_BYTES``, its stderr (``err_r``) is counted and discarded but for its first
        ``stderr_bytes`` (``kept``), each capped at ``max_output_bytes``. Ends at the end of
        its stdout (``eof``) or its deadline."""
        poller = _poller([out_r, err_r, self.ctl.fileno()], writer)
        deadline = start + job["timeout_s"]
        cap = job["max_output_bytes"]
        sizes = {out_r: 0, err_r: 0}
        pending = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            events = dict(poller.poll(max(1, int(remaining * 1000) + 1)))
            if self.ctl.fileno() in events:
                return "infra"
            if writer.fd in events and writer.write():
                poller.unregister(writer.fd)
                writer.close()
            for fd in (err_r, out_r):
                if fd not in events:
                    continue
                data = os.read(fd, READ_BYTES)
                if not data:
                    if fd == out_r:
                        return "eof"
                    poller.unregister(fd)
                    continue
                if fd == err_r and sizes[fd] < job.get("stderr_bytes", 0):
                    kept.append(data[: job["stderr_bytes"] - sizes[fd]])
                sizes[fd] += len(data)
                if sizes[fd] > cap:
                    return "output_limit"
                if fd == out_r:
                    held.append(data)
                    pending += len(data)
                    if pending >= FLUSH_BYTES:
                        self.chan.send({"op": "out", "id": job["id"], "data": b"".join(held)})
                        held.clear()
                        pending = 0

    def _stop_requested(self, job_id: int) -> bool:
        """Read the socket: queue later jobs, note ``exit``, report a ``stop`` for this job. A
        pool that has gone away (end of file) stops the execution and the worker."""
        messages = self.chan.receive()
        if messages is None:
            self.exiting = True
            return True
        stop = False
        for message in messages:
            op = message.get("op")
            if op == "run":
                self.pending.append(message)
            elif op == "exit":
                self.exiting = True
            elif op == "stop" and message.get("id") == job_id:
                stop = True
        return stop

    def _finish(self, status: str) -> tuple[str, int, int]:
        """Have the zygote kill what is left; returns the status, the ending signal (0 for the
        zygote's own SIGKILL) and the exit status (-1 where the child did not exit). A child
        that closed its value pipe gets a moment to die on its own, so a real signal (SIGSEGV,
        SIGXFSZ, SIGXCPU) or exit status is seen."""
        self.ctl.send(b"K" + (b"1" if status == "eof" else b"0"))
        while True:
            reply = self.ctl.recv(64)
            if not reply:
                raise RuntimeError("the zygote is gone")
            if reply[:1] == b"F":
                status = "infra"
            elif reply[:1] == b"S":
                break
        if self.args.oom_kills.rose() and status != "infra":  # after the sweep: all of it
            status = "memory"  # judged memory_limit, like a MemoryError
        has_status, wait_status, ours = zygote.STATUS.unpack(reply[1:])
        if has_status and os.WIFEXITED(wait_status):
            return status, 0, os.WEXITSTATUS(wait_status)
        if not has_status or not os.WIFSIGNALED(wait_status):
            return status, 0, -1
        signum = os.WTERMSIG(wait_status)
        return status, 0 if ours and signum == 9 else signum, -1

    def serve(self) -> None:
        """Run queued jobs back to back; block on the socket only when none is queued."""
        poller = select.poll()
        poller.register(self.chan.fd, POLL_IN)
        poller.register(self.ctl, POLL_IN)  # only ever readable here if the zygote died
        while not self.exiting:
            if self.pending:
                self.execute(self.pending.popleft())
                continue
            events = dict(poller.poll(IDLE_POLL_S * 1000))
            if self.ctl.fileno() in events:
                return
            if events:
                self._stop_requested(-1)
            elif os.getppid() != self.args.front_pid:
                return  # the pool is gone


def _poller(fds: list[int], writer: Writer) -> select.poll:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, POLL_IN)
    if writer.write():
        writer.close()
    else:
        poller.register(writer.fd, select.POLLOUT)
    return poller


def _warm_up() -> None:
    """Run the child's code paths here a few times before the first fork: CPython specialises
    bytecode in place, and code first run in a child writes into pages it shares with the
    zygote, a copy-on-write fault each, in every execution. Only this fixed snippet runs."""
    job = child.precompiled(WARM_UP_CODE, "", WARM_UP_PARTS)  # code objects, as children get
    for _ in range(WARM_UP_ROUNDS):
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        child._load(job["code"], job["setup_code"], namespace)
        for index, part in enumerate(job["parts"]):
            record = child._run_test(index, part, namespace, child.CLEAN_BUILTINS)
            Frames().feed(child.frame(record))
        prctl(PR_SET_NO_NEW_PRIVS, 1)


def _start_zygote(args: types.SimpleNamespace, uid: int, level: str) -> socket.socket:
    """Fork the zygote (the PID namespace's init); returns the control socket. Sets on ``args``
    what the zygote reports first (``zygote.py``'s protocol) and ``zygote_proc``, its PID as
    our ``/proc`` shows it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    calibration = zygote.frame_job(calibration_job()) if args.pin else None
    pid = os.fork()
    if pid == 0:
        os.close(args.fd)
        ours.close()
        full = level == LEVEL_FULL
        zygote.serve(theirs, args.scratch, uid, full, calibration, args.loop, args.memory)
    theirs.close()
    reply = ours.recv(4096)
    if reply[:1] != b"P" or len(reply) < 4 + zygote.PINNED.size:
        raise RuntimeError("the zygote did not start")
    args.own_proc = reply[1:2] == b"1"
    args.compiled_loop = reply[2:3] == b"c"
    args.locked = reply[3:4] == b"L"
    (args.pinned,) = zygote.PINNED.unpack_from(reply, 4)
    notes = reply[4 + zygote.PINNED.size :].decode(errors="replace")
    args.pin_note, _, args.lock_note = notes.partition("\0")
    args.zygote_proc = 1 if args.own_proc else pid
    return ours


def _prepare() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    os.environ.clear()
    sys.argv = ["<candidate>"]  # what programs see; set here, not in every child
    os.umask(0o077)
    # harmless here, inherited by the zygote and every child (it can never be unset)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    limits.single_malloc_arena()
    child.prepare_streams()
    _warm_up()
    gc.collect()
    limits.release_free_memory()
    gc.freeze()  # a child's collections never scan (and so never copy) inherited objects


def main(argv: list[str]) -> None:
    """Isolate, prepare, fork the zygote, report ready, serve until the pool goes away.

    ``argv[0]`` is the pool's options as one JSON object: ``argparse`` would import ``shutil``,
    and with it zlib, bz2 and lzma, into the zygote, whose every mapping each fork copies.
    """
    args = types.SimpleNamespace(**json.loads(argv[0]))
    args.front_pid = os.getppid()
    if args.cpu is not None:  # first: the zygote and every child inherit it
        os.sched_setaffinity(0, {args.cpu})
    args.loop, args.loop_note = zygote.load_loop(args.loop_library)  # before the namespaces
    # The execution cgroup's descriptors (the front opened them), or the fallback's filter.
    fallback = seccomp.Filter(fallback=True) if args.memory_fallback else None
    args.memory = (tuple(args.cgroup_fds), fallback)
    args.memory_mb = limits.address_space_mb(args.memory_mb, bool(args.cgroup_fds))
    args.oom_kills = limits.OomKills(args.oom_fd)
    if args.isolation == "auto":
        level, uid = namespaces.setup_worker(args.index, args.scratch)
    else:
        level, uid = namespaces.setup_unisolated(args.scratch)
    level = namespaces.pid_namespace(level)
    _prepare()
    ctl = _start_zygote(args, uid, level)
    if level == LEVEL_FULL and not args.locked:
        level = LEVEL_NAMESPACES  # a view the children could undo is no view
    args.clean_scratch = lambda: clean_scratch(args.scratch)
    chan = Channel(args.fd)
    chan.send(
        {
            "op": "ready",
            "isolation": level,
            "own_proc": args.own_proc,
            "pinned": args.pinned,
            "pin_note": args.pin_note,
            "compiled_loop": args.compiled_loop,
            "loop_note": args.loop_note,
            "lock_note": args.lock_note,
        }
    )
    Worker(chan, ctl, args).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
