"""The pool front's handle on one worker process: start, dispatch, stop, replace, kill.

Up to ``DEPTH`` jobs are in flight per worker, so the next is queued when one finishes;
messages carry the job id, and only the oldest job in flight runs. The socketpair (no path a
child could connect to) is non-blocking on the pool's end, with an outbox: the pool never
blocks on a worker busy writing a large result.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from sandbox.trusted.cgroups import ExecutionGroup
from sandbox.wire.frames import FLUSH_BYTES, MESSAGE_CAP, READ_BYTES, Frames, decode_message, encode

ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds sandbox/
# -I ignores PYTHONPATH and the working directory, so the package path is given explicitly.
BOOT = (
    f"import sys; sys.path.insert(0, {ROOT!r}); "
    "from sandbox.isolated.server import main; main(sys.argv[1:])"
)
READY_TIMEOUT_S = 60.0
DEPTH = 2  # jobs in flight per worker
_ids = itertools.count()


class WorkerStartError(RuntimeError):
    """A worker did not come up; the message says what it reported."""


def worker_cpus(setting: str | list[int], count: int) -> list[int | None]:
    """The CPU each of ``count`` workers is pinned to (None: not pinned), round robin. ``auto``
    takes the CPUs this process may use from the last one down: vLLM-CPU's OpenMP binding
    takes them from the first one up. Pinned, a worker's processes hand each execution to one
    another on one CPU: waking a process on another CPU is dearer than the switch itself
    (docs/benchmarks.md, sandbox section)."""
    if setting == "none":
        return [None] * count
    allowed = sorted(os.sched_getaffinity(0))
    cpus = allowed[::-1] if setting == "auto" else list(setting)
    missing = sorted(set(cpus) - set(allowed))
    if missing:
        raise ValueError(
            f"sandbox.cpu_affinity: CPUs {missing} are not available to this process "
            f"(it may use {allowed})"
        )
    return [cpus[index % len(cpus)] for index in range(count)]


class WorkerHandle:
    """One worker: its process, its socket and its jobs in flight, oldest (running) first."""

    def __init__(
        self,
        index: int,
        root: str,
        memory_mb: int,
        mode: str,
        cpu: int | None = None,
        pin: bool = True,
        loop_library: str | None = None,
        cgroup: ExecutionGroup | None = None,
        memory_fallback: bool = False,
    ) -> None:
        self.index, self.root, self.cpu, self.pin = index, root, cpu, pin
        self.loop_library = loop_library  # the zygote's C loop (native_build.py), or None
        # The execution cgroup every child joins; without one, whether the fallback applies.
        self.cgroup, self.memory_fallback = cgroup, memory_fallback
        self.memory_mb, self.mode = memory_mb, mode
        self.in_flight: deque[tuple[int, object, float]] = deque()  # (job id, task, backstop)
        self.deadline = 0.0
        self.isolation = ""
        self.own_proc = False  # programs see their PID namespace's /proc, not the host's
        self.pinned = 0  # hot pages its zygote pinned (sandbox/isolated/pinning.py)
        self.pin_note = ""  # why none were, if none were
        self.compiled_loop = False  # its zygote runs the C loop (sandbox/isolated/_zygote.c)
        self.loop_note = ""  # why it could not load that loop, if it could not
        self.lock_note = ""  # why its zygote could not lock itself down, if it could not
        self._start()

    def _start(self) -> None:
        generation = next(_ids)
        self.scratch = os.path.join(self.root, f"scratch-{self.index}-{generation}")
        os.mkdir(self.scratch, 0o755)
        # The worker's copies of the execution cgroup's descriptors; ours close once it has them.
        procs, oom = self.cgroup.worker_fds() if self.cgroup is not None else ([], -1)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.outbox = bytearray()
        self.frames = Frames(MESSAGE_CAP, None, decode_message)
        self.eof = False
        options = {
            "index": self.index,
            "fd": theirs.fileno(),
            "scratch": self.scratch,
            "memory_mb": self.memory_mb,
            "isolation": self.mode,
            "cpu": self.cpu,  # pin to this CPU (the zygote and every child inherit it)
            "pin": self.pin,  # pin the zygote's hot pages (sandbox/isolated/pinning.py)
            "loop_library": self.loop_library,  # the zygote's C loop, or None: Python
            "cgroup_fds": procs,  # cgroup.procs of the execution group, per hierarchy
            "oom_fd": oom,  # its OOM-kill counter, read by the server after each execution
            "memory_fallback": self.memory_fallback,
        }
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", BOOT, json.dumps(options)],
                # Bind every symbol now, once: lazily bound, each child resolves (and copies
                # the page of) every function the zygote had not called yet. The worker clears
                # its environment before the zygote is forked.
                env={"LD_BIND_NOW": "1"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(theirs.fileno(), *procs, *([oom] if oom >= 0 else [])),
            )
        finally:
            theirs.close()
            for fd in [*procs, oom] if oom >= 0 else procs:
                os.close(fd)
        self._ready = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict) -> None:
        self.outbox += encode(message)
        self.flush()

    def flush(self) -> None:
        """Write what the socket takes now; the pool calls again when it is writable."""
        while self.outbox:
            try:
                sent = self.sock.send(self.outbox, socket.MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the worker is gone; the pool notices and replaces it
                self.outbox.clear()
                return
            del self.outbox[:sent]

    def receive(self) -> list[dict]:
        """The complete messages available now (never blocks); sets ``eof`` at the end.

        Stops once it has messages and ``FLUSH_BYTES`` read: a worker whose child floods
        records could otherwise keep this loop reading faster than they are judged.
        """
        messages: list[dict] = []
        read = 0
        while not self.eof and not (messages and read >= FLUSH_BYTES):
            try:
                data = self.sock.recv(READ_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self.eof = True
                break
            read += len(data)
            try:
                messages += self.frames.feed(data)
            except ValueError:
                self.eof = True
        return messages

    def wait_ready(self) -> None:
        """Block until the worker reports its isolation level."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        while time.monotonic() < deadline:
            poller.poll(100)
            for message in self.receive():
                if message.get("op") == "ready":
                    self.isolation = message["isolation"]
                    self.own_proc = bool(message.get("own_proc"))
                    self.pinned = int(message.get("pinned", 0))
                    self.pin_note = str(message.get("pin_note", ""))
                    self.compiled_loop = bool(message.get("compiled_loop"))
                    self.loop_note = str(message.get("loop_note", ""))
                    self.lock_note = str(message.get("lock_note", ""))
                    self._ready = True
                    return
            if self.eof or self.proc.poll() is not None:
                self.proc.wait()
                raise WorkerStartError(
                    f"sandbox worker {self.index} exited with {self.proc.returncode}"
                )
        raise WorkerStartError(
            f"sandbox worker {self.index} did not start in {READY_TIMEOUT_S:.0f}s"
        )

    @property
    def task(self):
        """The task the worker is running now (the oldest in flight), or None."""
        return self.in_flight[0][1] if self.in_flight else None

    @property
    def job_id(self) -> int:
        return self.in_flight[0][0] if self.in_flight else -1

    def has_room(self) -> bool:
        return len(self.in_flight) < DEPTH

    def dispatch(self, task, request: dict) -> None:
        """Queue a task's execution on the worker: ``request`` is the ``run`` message's
        fields, and ``backstop_s``, the worker's own deadline, which runs from when the
        execution becomes the running one."""
        if not self._ready:
            self.wait_ready()
        job_id = next(_ids)
        backstop_s = request.pop("backstop_s")
        if not self.in_flight:
            self.deadline = time.monotonic() + backstop_s
        self.in_flight.append((job_id, task, backstop_s))
        self.send({"op": "run", "id": job_id, **request})

    def finished(self) -> None:
        """The running job is done: the next one in flight starts now, with its own deadline
        (a compile's, a test's and a function job's backstops differ)."""
        self.in_flight.popleft()
        if self.in_flight:
            self.deadline = time.monotonic() + self.in_flight[0][2]

    def take_all(self) -> list:
        """Forget every job in flight (the worker is being replaced); oldest first."""
        tasks = [task for _, task, _ in self.in_flight]
        self.in_flight.clear()
        return tasks

    def stop(self) -> None:
        self.send({"op": "stop", "id": self.job_id})

    def alive(self) -> bool:
        return self.proc.poll() is None

    def restart(self) -> None:
        self.kill()
        self._start()
        self.wait_ready()

    def kill(self) -> None:
        """SIGKILL the worker's process group (its server and zygote); the executions die with
        the zygote, as its PID namespace ends (or by parent-death signal without one)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.sock.close()
