"""Judging a whole program that reads stdin and writes stdout, as a contest judge does.

Each test is one execution: a fresh child of the worker's zygote (no interpreter start: the
worker's is already warm) reads the test's input on its stdin and writes its stdout, which the
worker's server sends here as it comes; the answer never leaves this process, so no program
can read it. Here the output is compared with the answer by the Kattis default output
validator's rules (:mod:`sandbox.trusted.answers`), the answer read from its file in chunks.
The output is held until the execution ends (at most the output limit); the answer never is.

A test's verdict, strongest evidence first: a program that does not compile (``syntax_error``);
the memory cgroup's OOM kill (``memory_limit``); the deadline or the CPU limit (``timeout``);
more output than the limit (``output_limit``); a signal, or an exit status other than 0
(``runtime_error``: an uncaught exception exits with 1, as ``python3 prog.py`` does); else the
comparison (``passed``, or ``failed``: a wrong answer). The process's own account of itself
(what it prints on stderr) counts for nothing.

Samples run first (``StdioSpec.in_run_order``). With ``stop_at_first_failure`` (the binary
reward) the tests run one after another and the first failure ends the job; otherwise every
test runs, in parallel on the workers. Every test of a problem runs under the same limits:
the problem's time limit times ``sandbox.time_multiplier``, for each test on its own (never
one budget shared by all).
"""

from __future__ import annotations

import functools
import math
import signal
from pathlib import Path

from common.config import SandboxConfig
from common.types import ExecutionJob, ExecutionResult, StdioTest, Verdict
from sandbox.trusted.answers import AnswerComparison, AnswerFlags, compare_streams, read_chunks
from sandbox.trusted.tasks import BACKSTOP_S, Outcome

MIB = 1024 * 1024
SAMPLE_GROUP = "sample"


@functools.lru_cache(maxsize=1024)
def answer_flags(flags: str) -> AnswerFlags:
    return AnswerFlags.parse(flags)


def compare(output: list[bytes], test: StdioTest) -> AnswerComparison:
    """The program's stdout (its chunks) against the test's answer, bytes or a file."""
    flags = answer_flags(test.flags)
    if isinstance(test.answer, Path):
        with open(test.answer, "rb") as answer:
            return compare_streams(output, read_chunks(answer), flags)
    return compare_streams(output, (test.answer,), flags)


def read_input(test: StdioTest) -> bytes:
    return test.input.read_bytes() if isinstance(test.input, Path) else test.input


def ending_verdict(status: str, signum: int, exit_status: int) -> tuple[Verdict | None, str]:
    """How the process ended, judged before its output is: a verdict and why, or (None, "")
    for a program that exited with status 0 at the end of its output."""
    if status == "memory":
        return Verdict.MEMORY_LIMIT, "memory limit"
    if status == "timeout" or signum in (signal.SIGKILL, signal.SIGXCPU):
        return Verdict.TIMEOUT, "time limit"
    if status == "output_limit" or signum == signal.SIGXFSZ:
        return Verdict.OUTPUT_LIMIT, "output limit"
    if signum:
        return Verdict.RUNTIME_ERROR, f"killed by signal {signum}"
    if status != "eof":
        return Verdict.RUNTIME_ERROR, f"ended: {status}"
    if exit_status < 0:
        return Verdict.RUNTIME_ERROR, "closed its output and went on running"
    if exit_status:
        return Verdict.RUNTIME_ERROR, f"exit status {exit_status}"
    return None, ""


class StdioRun:
    """One ``stdio`` job: its tests' verdicts as they come, and the job's result."""

    def __init__(self, index: int, job: ExecutionJob, stop_at_first_failure: bool) -> None:
        self.index = index
        self.job = job
        self.stop_at_first_failure = stop_at_first_failure
        self.order = job.stdio.in_run_order()
        self.verdicts: dict[int, tuple[Verdict, str, float]] = {}

    def first_tasks(self) -> list[StdioTask]:
        if self.stop_at_first_failure:
            return [StdioTask(self, 0)]
        return [StdioTask(self, at) for at in range(len(self.order))]

    def settle(self, at: int, verdict: Verdict, detail: str, duration_ms: float) -> Outcome:
        """Record the verdict of the test run ``at``-th; the result once the job has one."""
        self.verdicts[at] = (verdict, detail, duration_ms)
        if self.stop_at_first_failure and verdict is Verdict.PASSED and at + 1 < len(self.order):
            return None, [StdioTask(self, at + 1)]
        done = len(self.verdicts) == len(self.order) or (
            self.stop_at_first_failure and verdict is not Verdict.PASSED
        )
        return (self._result(), []) if done else (None, [])

    def _result(self) -> ExecutionResult:
        ran = [self.verdicts[at] for at in sorted(self.verdicts)]
        verdicts = [verdict for verdict, _, _ in ran]
        failed = [(verdict, detail) for verdict, detail, _ in ran if verdict is not Verdict.PASSED]
        overall, detail = failed[0] if failed else (Verdict.PASSED, "")
        return ExecutionResult(
            overall,
            verdicts.count(Verdict.PASSED),
            len(self.order),
            verdicts,
            sum(duration for _, _, duration in ran),
            detail,
            sum(verdict is Verdict.FAILED for verdict in verdicts),  # wrong answers
        )


class StdioTask:
    """One test of a ``stdio`` job: one execution of the program on the test's input."""

    def __init__(self, run: StdioRun, at: int) -> None:
        self.run = run
        self.at = at
        self.test = run.order[at]
        self.index = run.index
        self.attempts = 0
        self.output: list[bytes] = []
        self.syntax = ""

    def begin(self, config: SandboxConfig) -> dict:
        self.attempts += 1
        self.output, self.syntax = [], ""
        spec = self.run.job.stdio
        timeout_s = (spec.time_limit_s or config.test_timeout_s) * config.time_multiplier
        output_mb = spec.output_mb or config.stdio_output_mb
        return {
            "code": self.run.job.code,
            "setup_code": "",
            "parts": [],
            "stream": False,
            "stdin": read_input(self.test),
            "timeout_s": timeout_s,
            "test_timeout_s": timeout_s,
            "max_output_bytes": output_mb * MIB,
            "memory_mb": spec.memory_mb or config.memory_mb,
            "backstop_s": math.ceil(timeout_s) + BACKSTOP_S,
        }

    def on_record(self, record: object) -> bool:
        """The only record of a whole program's execution: the server's ``load_error`` for a
        program that does not compile (it then never runs)."""
        if type(record) is dict and record.get("t") == "load_error":
            self.syntax = str(record.get("exc", ""))[:300]
        return False

    def on_output(self, data: bytes) -> None:
        self.output.append(data)

    def finish(self, message: dict) -> Outcome:
        duration_ms = float(message.get("duration_ms") or 0.0)
        tail = message.get("out")
        if isinstance(tail, bytes) and tail:  # the rest of the output travels with ``done``
            self.output.append(tail)
        if self.syntax:
            return self.run.settle(self.at, Verdict.SYNTAX_ERROR, self.syntax, duration_ms)
        verdict, why = ending_verdict(
            str(message.get("status", "")),
            int(message.get("signal") or 0),
            int(message.get("exit", -1)),
        )
        if verdict is None:
            verdict, why = self._judge_output()
        output, self.output = self.output, []
        del output  # the held output goes now, not with the task
        return self.run.settle(self.at, verdict, f"test {self.test.name}: {why}", duration_ms)

    def _judge_output(self) -> tuple[Verdict, str]:
        try:
            comparison = compare(self.output, self.test)
        except OSError as exc:  # the answer file went missing: the judge's fault, masked
            return Verdict.INFRA_ERROR, f"answer unreadable: {exc.strerror or exc}"
        if comparison.accepted:
            return Verdict.PASSED, ""
        if self.test.group == SAMPLE_GROUP:  # a sample's answer is in the statement anyway
            return Verdict.FAILED, f"wrong answer: {comparison.message}"
        return Verdict.FAILED, f"wrong answer (output line {comparison.output_line})"

    def give_up(self, verdict: Verdict, why: str) -> Outcome:
        return self.run.settle(self.at, verdict, f"test {self.test.name}: {why}", 0.0)
