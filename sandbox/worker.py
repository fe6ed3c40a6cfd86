"""A long-lived sandbox worker: isolation once, then one fork per execution.

Started by the pool as ``python -I`` with an empty environment. It enters its namespaces
*before* creating the zmq context (a user namespace can only be entered by a
single-threaded process), pre-imports what programs commonly use so each fork is cheap, and
then serves jobs from the pool over a PAIR socket on an ``ipc://`` path.

Per execution: the worker forks an intermediate process that unshares a fresh PID namespace
and forks the child, which becomes that namespace's init: killing it kills the whole tree.
The worker watches three things at once: the value pipe (records, forwarded to the pool),
the merged stdout/stderr pipe (counted and discarded, so a print flood costs nothing) and the
socket (a ``stop`` from the pool). Deadlines are enforced here with SIGKILL, which no
``except BaseException`` can swallow.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import shutil
import signal
import struct
import sys
import time

import zmq

from sandbox import child, isolation

PRELOAD = [
    "array",
    "bisect",
    "cmath",
    "collections",
    "copy",
    "datetime",
    "decimal",
    "fractions",
    "functools",
    "heapq",
    "itertools",
    "json",
    "math",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "typing",
    "unicodedata",
]
FRAME_CAP = 2 * 1024 * 1024  # one record; canonical values are capped below this in the child
VALUE_CAP = 16 * 1024 * 1024  # all records of one execution
FILE_CAP = 16 * 1024 * 1024  # RLIMIT_FSIZE


class Worker:
    """Executes jobs one at a time; see the module docstring for the process layout."""

    def __init__(self, sock: zmq.Socket, args: argparse.Namespace, level: str, uid: int) -> None:
        self.sock, self.args, self.level, self.uid = sock, args, level, uid

    def execute(self, job: dict) -> None:
        start = time.monotonic()
        val_r, val_w = os.pipe()
        out_r, out_w = os.pipe()
        pid_r, pid_w = os.pipe()
        intermediate = os.fork()
        if intermediate == 0:
            self._intermediate(job, (val_r, out_r, pid_r), val_w, out_w, pid_w)
        for fd in (val_w, out_w, pid_w):
            os.close(fd)
        try:
            pid = _read_pid(pid_r)
            status = self._watch(job, val_r, out_r, start) if pid else "infra"
            signum = self._finish(intermediate, pid, status)
        finally:
            for fd in (val_r, out_r, pid_r):
                os.close(fd)
        self._clean_scratch()
        done = {"op": "done", "id": job["id"], "status": status, "signal": signum}
        done["duration_ms"] = (time.monotonic() - start) * 1000
        self.sock.send_json(done)

    def _intermediate(self, job: dict, close: tuple, val_w: int, out_w: int, pid_w: int) -> None:
        """Runs in the forked intermediate: new PID namespace, fork the child, wait for it."""
        code = 99
        try:
            for fd in close:
                os.close(fd)
            isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self.args.worker_pid:
                os._exit(code)
            if self.level != isolation.LEVEL_RLIMITS:
                isolation.unshare(isolation.CLONE_NEWPID)
            pid = os.fork()
            if pid == 0:
                self._child(job, val_w, out_w)
            os.close(val_w)
            os.close(out_w)
            os.write(pid_w, struct.pack("<i", pid))
            _, status = os.waitpid(pid, 0)
            code = 100 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        finally:
            os._exit(code)

    def _child(self, job: dict, val_w: int, out_w: int) -> None:
        """Runs in the child: descriptors, limits, privileges, then the harness."""
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            for source, target in ((devnull, 0), (out_w, 1), (out_w, 2), (val_w, 3)):
                os.dup2(source, target)
            os.closerange(4, 1 << 16)
            os.chdir(self.args.scratch)
            os.environ.clear()
            os.umask(0o077)
            memory = _virtual_size() + self.args.memory_mb * 1024 * 1024
            cpu = math.ceil(job["timeout_s"]) + 1
            isolation.set_rlimits(memory, cpu, FILE_CAP)
            isolation.drop_privileges(self.uid)
        except BaseException:
            os._exit(98)
        child.run(job["code"], job["setup_code"], job["parts"])

    def _watch(self, job: dict, val_r: int, out_r: int, start: float) -> str:
        """Relay records until the child ends, misbehaves, or a deadline passes."""
        poller = zmq.Poller()
        for fd in (val_r, out_r):
            poller.register(fd, zmq.POLLIN)
        poller.register(self.sock, zmq.POLLIN)
        frames = _Frames()
        overall = start + job["timeout_s"]
        phase = start + job["test_timeout_s"]
        output = 0
        while True:
            remaining = min(phase, overall) - time.monotonic()
            if remaining <= 0:
                return "timeout"
            events = dict(poller.poll(max(1, int(remaining * 1000) + 1)))
            if self.sock in events:
                message = self.sock.recv_json()
                if message.get("op") == "stop" and message.get("id") == job["id"]:
                    return "stopped"
            if out_r in events:
                data = os.read(out_r, 65536)
                output += len(data)
                if not data:
                    poller.unregister(out_r)
                elif output > job["max_output_bytes"]:
                    return "output_limit"
            if val_r in events:
                data = os.read(val_r, 65536)
                if not data:
                    return "eof"
                try:
                    records = frames.feed(data)
                except ValueError:
                    return "output_limit"
                for record in records:
                    self.sock.send_json({"op": "record", "id": job["id"], "rec": record})
                    if record.get("t") in ("end", "load_error"):
                        return "end"
                    phase = time.monotonic() + job["test_timeout_s"]

    def _finish(self, intermediate: int, pid: int | None, status: str) -> int:
        """Kill what is left and return the signal that ended the child (0 if none)."""
        wait_status = None
        if status == "eof":  # give a dying child a moment, so its real signal is seen
            for _ in range(100):
                done, found = os.waitpid(intermediate, os.WNOHANG)
                if done:
                    wait_status = found
                    break
                time.sleep(0.001)
        killed_by_us = wait_status is None
        if killed_by_us:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid or intermediate, signal.SIGKILL)
            try:
                _, wait_status = os.waitpid(intermediate, 0)
            except ChildProcessError:
                wait_status = 0
        if self.level == isolation.LEVEL_RLIMITS:
            isolation.kill_descendants(os.getpid())
        code = os.waitstatus_to_exitcode(wait_status)
        signum = code - 100 if code > 100 else 0
        return 0 if killed_by_us and signum == signal.SIGKILL else signum

    def _clean_scratch(self) -> None:
        scratch = self.args.scratch
        try:
            if not os.listdir(scratch):
                return
        except OSError:
            pass
        if self.level == isolation.LEVEL_FULL:
            isolation.mount_scratch(scratch, self.uid)
            return
        for entry in os.listdir(scratch):
            path = os.path.join(scratch, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


class _Frames:
    """Length-prefixed JSON frames from the child, with hard size caps (untrusted input)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> list[dict]:
        self.total += len(data)
        if self.total > VALUE_CAP:
            raise ValueError("too much value data")
        self.buffer += data
        records = []
        while len(self.buffer) >= 4:
            (size,) = struct.unpack(">I", self.buffer[:4])
            if size > FRAME_CAP:
                raise ValueError("frame too large")
            if len(self.buffer) < 4 + size:
                break
            try:
                record = json.loads(bytes(self.buffer[4 : 4 + size]))
            except (ValueError, RecursionError):
                record = {"t": "garbled"}
            del self.buffer[: 4 + size]
            records.append(record if isinstance(record, dict) else {"t": "garbled"})
        return records


def _read_pid(fd: int) -> int | None:
    data = b""
    deadline = time.monotonic() + 10
    while len(data) < 4 and time.monotonic() < deadline:
        chunk = os.read(fd, 4 - len(data))
        if not chunk:
            return None
        data += chunk
    return struct.unpack("<i", data)[0] if len(data) == 4 else None


def _virtual_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sandbox.worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--isolation", choices=("auto", "none"), default="auto")
    args = parser.parse_args(argv)
    args.worker_pid = os.getpid()
    parent = os.getppid()
    if args.isolation == "auto":
        level, uid = isolation.setup_worker(args.index, args.scratch)
    else:
        level, uid = isolation.setup_unisolated(args.scratch)
    for name in PRELOAD:
        importlib.import_module(name)
    context = zmq.Context(1)
    sock = context.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(args.endpoint)
    sock.send_json({"op": "ready", "isolation": level, "pid": os.getpid()})
    worker = Worker(sock, args, level, uid)
    while os.getppid() == parent:
        if sock.poll(500):
            message = sock.recv_json()
            if message.get("op") == "run":
                worker.execute(message)
            elif message.get("op") == "exit":
                break
    sock.close()
    context.term()


if __name__ == "__main__":
    main(sys.argv[1:])
