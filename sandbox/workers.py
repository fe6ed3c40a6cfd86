"""The pool front's handle on one worker process: start, dispatch, stop, replace, kill."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import zmq

ROOT = str(Path(__file__).resolve().parent.parent)
# -I ignores PYTHONPATH and the working directory, so the package path is given explicitly.
BOOT = (
    f"import sys; sys.path.insert(0, {ROOT!r}); from sandbox.worker import main; main(sys.argv[1:])"
)
READY_TIMEOUT_S = 60.0
_ids = itertools.count()


class WorkerStartError(RuntimeError):
    """A worker did not come up; the message says what it reported."""


class WorkerHandle:
    """One worker: its process, its PAIR socket and the task it is running (if any)."""

    def __init__(
        self, index: int, root: str, context: zmq.Context, memory_mb: int, mode: str
    ) -> None:
        self.index, self.root, self.context = index, root, context
        self.memory_mb, self.mode = memory_mb, mode
        self.task = None
        self.job_id = -1
        self.deadline = 0.0
        self.isolation = ""
        self._start()

    def _start(self) -> None:
        generation = next(_ids)
        self.scratch = os.path.join(self.root, f"scratch-{self.index}-{generation}")
        os.mkdir(self.scratch, 0o755)
        endpoint = f"ipc://{self.root}/worker-{self.index}-{generation}.sock"
        self.sock = self.context.socket(zmq.PAIR)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        args = [
            "--index",
            str(self.index),
            "--endpoint",
            endpoint,
            "--scratch",
            self.scratch,
            "--memory-mb",
            str(self.memory_mb),
            "--isolation",
            self.mode,
        ]
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOT, *args],
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the worker reports its isolation level."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.sock.poll(100):
                message = self.sock.recv_json()
                if message.get("op") == "ready":
                    self.isolation = message["isolation"]
                    self._ready = True
                    return
            if self.proc.poll() is not None:
                raise WorkerStartError(
                    f"sandbox worker {self.index} exited with {self.proc.returncode}"
                )
        raise WorkerStartError(
            f"sandbox worker {self.index} did not start in {READY_TIMEOUT_S:.0f}s"
        )

    def dispatch(self, task, limits: dict) -> None:
        if not self._ready:
            self.wait_ready()
        self.task = task
        self.job_id = next(_ids)
        job = task.job
        self.deadline = time.monotonic() + limits["backstop_s"]
        self.sock.send_json(
            {
                "op": "run",
                "id": self.job_id,
                "code": job.code,
                "setup_code": job.setup_code,
                "parts": [plan.child for plan in task.plans],
                "timeout_s": limits["timeout_s"],
                "test_timeout_s": limits["test_timeout_s"],
                "max_output_bytes": limits["max_output_bytes"],
            }
        )

    def stop(self) -> None:
        self.sock.send_json({"op": "stop", "id": self.job_id})

    def alive(self) -> bool:
        return self.proc.poll() is None

    def restart(self) -> None:
        self.kill()
        self._start()
        self.wait_ready()

    def kill(self) -> None:
        """SIGKILL the worker; its intermediates and children die by parent-death signal."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.sock.close()
