"""Judging a whole program that reads stdin and writes stdout, as a contest judge does: one
execution per test, its stdout compared with the answer (``answers.py``, or the problem's own
validator: ``native.py``), which never leaves this process. How the process ended decides first
(``processes.py``). docs/sandbox.md, "Whole programs".
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from common.config import SandboxConfig
from common.types import SAMPLE_GROUP, ExecutionJob, ExecutionResult, StdioTest, Verdict
from sandbox.trusted import languages
from sandbox.trusted.answers import (
    AnswerComparison,
    AnswerFlags,
    aligned,
    compare_streams,
    read_chunks,
)
from sandbox.trusted.native import Build, CompileTask, ValidatorTask, read
from sandbox.trusted.processes import Ending, execution, output_of
from sandbox.trusted.result_cache import Lru
from sandbox.trusted.tasks import Outcome

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1024)
def answer_flags(flags: str) -> AnswerFlags:
    return AnswerFlags.parse(flags)


def compare(output: list[bytes], test: StdioTest) -> AnswerComparison:
    """The program's stdout (its chunks) against the test's answer, bytes or a file."""
    flags = answer_flags(test.flags)
    if isinstance(test.answer, Path):
        with open(test.answer, "rb") as answer:  # read_chunks: CHUNK_SIZE, as aligned()
            return compare_streams(aligned(output), read_chunks(answer), flags)
    return compare_streams(aligned(output), aligned((test.answer,)), flags)


class StdioRun:
    """One ``stdio`` job: what it needs compiled, its tests' verdicts as they come, and the
    job's result."""

    def __init__(
        self, index: int, job: ExecutionJob, stop_at_first_failure: bool, binaries: Lru
    ) -> None:
        self.index = index
        self.job = job
        self.stop_at_first_failure = stop_at_first_failure
        self.binaries = binaries  # compiled programs by Build.key()
        self.order = job.stdio.in_run_order()
        self.binary = b""  # a native program, once compiled
        self.validator_binary = b""  # the problem's output validator, once compiled
        self.verdicts: dict[int, tuple[Verdict, str, float]] = {}

    def first_tasks(self) -> list:
        """What is not compiled yet (the problem's validator, then a native program), else
        the first tests."""
        validator = self.job.stdio.validator
        if validator and validator.language in languages.COMPILERS and not self.validator_binary:
            build = Build.of_validator(validator)
            self.validator_binary = self.binaries.get(build.key()) or b""
            if not self.validator_binary:
                return [CompileTask(self, build)]
        if self.job.language in languages.COMPILERS and not self.binary:
            build = Build.of_program(self.job)
            self.binary = self.binaries.get(build.key()) or b""
            if not self.binary:
                return [CompileTask(self, build)]
        return self.test_tasks()

    def test_tasks(self) -> list[StdioTask]:
        if self.stop_at_first_failure:
            return [StdioTask(self, 0)]
        return [StdioTask(self, at) for at in range(len(self.order))]

    def compiled(self, build: Build, binary: bytes, why: str, duration_ms: float) -> Outcome:
        """A compilation ended: on with the next step, or, without a binary, the job's result:
        ``syntax_error`` for the program (a compile error, as a contest judge says),
        ``infra_error`` for the problem's validator (the judge's fault: masked)."""
        validator = build.role == "validator"
        if binary:
            self.binaries.put(build.key(), binary)
            if validator:
                self.validator_binary = binary
            else:
                self.binary = binary
            return None, self.first_tasks()
        verdict = Verdict.INFRA_ERROR if validator else Verdict.SYNTAX_ERROR
        what = "the problem's output validator did not compile" if validator else "compile error"
        detail = f"{what}: {why or 'the compiler wrote no program'}"
        return ExecutionResult(verdict, 0, len(self.order), [], duration_ms, detail), []

    def unjudged(self, why: str) -> Outcome:
        """The job cannot be judged, by no fault of the program's: ``infra_error``, masked."""
        result = ExecutionResult(Verdict.INFRA_ERROR, 0, len(self.order), [], 0.0, why)
        return result, []

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
        # a failure the program caused decides before one of the judge's (masked): else one
        # test the judge could not decide would hide a wrong answer on another
        failed.sort(key=lambda pair: pair[0] is Verdict.INFRA_ERROR)
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
        request = execution(read(self.test.input), timeout_s, output_mb, spec.memory_mb, config)
        if self.run.binary:
            request["native"] = True
            request["argv"] = ["./" + languages.BINARY]
            request["files"] = {languages.BINARY: self.run.binary}
        else:
            request["code"] = self.run.job.code
        return request

    def on_record(self, record: object) -> bool:
        """The only record of a whole program's execution: the server's ``load_error`` for a
        program that does not compile (it then never runs)."""
        if type(record) is dict and record.get("t") == "load_error":
            self.syntax = str(record.get("exc", ""))[:300]
        return False

    def on_output(self, data: bytes) -> None:
        self.output.append(data)

    def finish(self, message: dict) -> Outcome:
        """Should judging raise after all, the test fails (as ``FunctionTask.finish`` does)."""
        try:
            return self._finish(message)
        except Exception as exc:
            log.exception("sandbox: judging a whole program's test failed")
            return self.settled(Verdict.FAILED, f"{type(exc).__name__} while judging", 0.0)

    def _finish(self, message: dict) -> Outcome:
        ending = Ending(message)
        output, self.output = output_of(self.output, message), []
        if self.syntax:
            return self.settled(Verdict.SYNTAX_ERROR, self.syntax, ending.duration_ms)
        verdict, why = ending.verdict()
        if verdict is Verdict.RUNTIME_ERROR and ending.stderr:
            why = f"{why}: {ending.stderr_tail()}"
        if verdict is None and self.run.job.stdio.validator is not None:
            return None, [ValidatorTask(self, b"".join(output), ending.duration_ms)]
        if verdict is None:
            verdict, why = self._judge_output(output)
        return self.settled(verdict, why, ending.duration_ms)

    def settled(self, verdict: Verdict, why: str, duration_ms: float) -> Outcome:
        detail = why if verdict is Verdict.SYNTAX_ERROR else f"test {self.test.name}: {why}"
        return self.run.settle(self.at, verdict, detail, duration_ms)

    def _judge_output(self, output: list[bytes]) -> tuple[Verdict, str]:
        try:
            comparison = compare(output, self.test)
        except OSError as exc:  # the answer file went missing: the judge's fault, masked
            return Verdict.INFRA_ERROR, f"answer unreadable: {exc.strerror or exc}"
        if comparison.accepted:
            return Verdict.PASSED, ""
        if self.test.group == SAMPLE_GROUP:  # a sample's answer is in the statement anyway
            return Verdict.FAILED, f"wrong answer: {comparison.message}"
        return Verdict.FAILED, f"wrong answer (output line {comparison.output_line})"

    def give_up(self, verdict: Verdict, why: str) -> Outcome:
        return self.settled(verdict, why, 0.0)
