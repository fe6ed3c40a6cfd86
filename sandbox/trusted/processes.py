"""One execution of a whole program, a compiler or a validator: what the worker is asked to
run, what comes back, and how the process ended (``sandbox/trusted/stdio.py`` and
``native.py`` build on these)."""

from __future__ import annotations

import math

from common.config import SandboxConfig
from common.types import Verdict
from sandbox.trusted.judging import ending_verdict
from sandbox.trusted.languages import STDERR_BYTES
from sandbox.trusted.tasks import BACKSTOP_S

MIB = 1024 * 1024
_LIMITS = {
    Verdict.MEMORY_LIMIT: "memory limit",
    Verdict.TIMEOUT: "time limit",
    Verdict.OUTPUT_LIMIT: "output limit",
}


def execution(
    stdin: bytes, timeout_s: float, output_mb: int, memory_mb: int, config: SandboxConfig
) -> dict:
    """The ``run`` request of one execution (its Python ``code``, or its native ``argv`` and
    ``files``, added by the caller): stdin, limits, the worker's backstop, and the first bytes
    of its stderr kept for the detail."""
    return {
        "code": "",
        "setup_code": "",
        "parts": [],
        "stream": False,
        "stdin": stdin,
        "timeout_s": timeout_s,
        "test_timeout_s": timeout_s,
        "max_output_bytes": output_mb * MIB,
        "memory_mb": memory_mb or config.memory_mb,
        "backstop_s": math.ceil(timeout_s) + BACKSTOP_S,
        "stderr_bytes": STDERR_BYTES,
    }


class Ending:
    """How an execution ended, from the worker's ``done``: status, signal, exit status (-1:
    none), its duration and the first bytes of its stderr, which it kept when asked."""

    def __init__(self, message: dict) -> None:
        self.status = str(message.get("status", ""))
        self.signal = int(message.get("signal") or 0)
        self.exit = int(message.get("exit", -1))
        self.duration_ms = float(message.get("duration_ms") or 0.0)
        err = message.get("err")
        self.stderr = err.decode("utf-8", "replace") if isinstance(err, bytes) else ""

    def verdict(self) -> tuple[Verdict | None, str]:
        """A verdict and why, judged before any output is, or (None, "") for a process that
        exited with status 0 at the end of its output. Limits and signals are judged as a
        function job's (``judging.ending_verdict``)."""
        if self.status == "eof" and not self.signal:
            if self.exit < 0:
                return Verdict.RUNTIME_ERROR, "closed its output and went on running"
            if self.exit:
                return Verdict.RUNTIME_ERROR, f"exit status {self.exit}"
            return None, ""
        verdict = ending_verdict(self.status, self.signal)
        if verdict is Verdict.RUNTIME_ERROR:
            why = f"killed by signal {self.signal}" if self.signal else f"ended: {self.status}"
            return verdict, why
        return verdict, _LIMITS.get(verdict, verdict.value)

    def stderr_tail(self, most: int = 300) -> str:
        """The end of what it kept of its stderr, on one line: a traceback's last line, or a
        compiler's first errors."""
        text = " ".join(self.stderr.split())
        return text[-most:]


def output_of(chunks: list[bytes], message: dict) -> list[bytes]:
    """The output chunks with the rest that travels with ``done``."""
    tail = message.get("out")
    return [*chunks, tail] if isinstance(tail, bytes) and tail else chunks
