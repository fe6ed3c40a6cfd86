"""Turn the child's records and the worker's account of the process into a verdict.

This runs in the pool front, the only place that knows the expected values. The child's
records are untrusted data: a record that is malformed, out of order or missing simply
fails its test. What happened to the process (deadline, output cap, a signal) is reported by
the worker, which the child cannot influence.
"""

from __future__ import annotations

import reprlib
import signal

from common.types import ExecutionResult, Verdict
from sandbox import testplan
from sandbox.canonical import rebuild

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 8, 8
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 80, 80, 40

_KIND_VERDICT = {
    "assert": Verdict.FAILED,
    "unserialisable": Verdict.FAILED,
    "memory": Verdict.MEMORY_LIMIT,
    "runtime": Verdict.RUNTIME_ERROR,
    "syntax": Verdict.SYNTAX_ERROR,
}


class Judgement:
    """Accumulates per-test verdicts for one execution of one job."""

    def __init__(self, plans: list[testplan.TestPlan], stop_at_first_failure: bool) -> None:
        self.plans = plans
        self.stop_at_first_failure = stop_at_first_failure
        self.verdicts: list[Verdict] = []
        self.loaded = False
        self.load_verdict: Verdict | None = None
        self.detail = ""
        self.stopped = False

    def on_record(self, record: dict) -> bool:
        """Judge one record; returns True when the execution can be stopped early."""
        if self.stopped or self.load_verdict is not None:
            return self.stopped
        kind = record.get("t")
        if kind == "loaded":
            self.loaded = True
        elif kind == "load_error":
            self.load_verdict = _KIND_VERDICT.get(record.get("kind"), Verdict.RUNTIME_ERROR)
            self.detail = _text(record.get("exc"))
        elif (
            kind == "test"
            and self.loaded
            and record.get("i") == len(self.verdicts) < len(self.plans)
        ):
            self._judge_test(record)
        if self.stop_at_first_failure and any(v is not Verdict.PASSED for v in self.verdicts):
            self.stopped = True
        return self.stopped

    def _judge_test(self, record: dict) -> None:
        plan = self.plans[len(self.verdicts)]
        verdict = Verdict.FAILED
        if "kind" in record:
            verdict = _KIND_VERDICT.get(record["kind"], Verdict.RUNTIME_ERROR)
            if verdict is Verdict.SYNTAX_ERROR:
                verdict = Verdict.RUNTIME_ERROR
            self._note(f"test {len(self.verdicts)}: {_text(record.get('exc'))}")
        elif plan.form == "exec":
            verdict = Verdict.PASSED if record.get("ok") is True else Verdict.FAILED
        else:
            verdict = self._compare(plan, record.get("values"))
        self.verdicts.append(verdict)

    def _compare(self, plan: testplan.TestPlan, values: object) -> Verdict:
        if not isinstance(values, list) or len(values) != len(plan.child["exprs"]):
            self._note(f"test {len(self.verdicts)}: malformed record")
            return Verdict.FAILED
        try:
            rebuilt = [rebuild(v) for v in values]
            if testplan.judge(plan, rebuilt):
                return Verdict.PASSED
        except Exception as exc:  # a rebuilt value the assertion cannot handle fails it
            self._note(f"test {len(self.verdicts)}: {type(exc).__name__} while judging")
            return Verdict.FAILED
        # What the candidate computed, for the feedback of a multi-turn episode: the program's
        # own output (never an expected value), shortened without building a huge repr.
        got = ", ".join(_SHORT.repr(value) for value in rebuilt)
        self._note(f"test {len(self.verdicts)}: assertion failed, got {got}")
        return Verdict.FAILED

    def _note(self, text: str) -> None:
        if not self.detail:
            self.detail = text[:300]

    def finish(self, status: str, signum: int, duration_ms: float) -> ExecutionResult:
        """Combine the records with how the process ended."""
        total = len(self.plans)
        if self.load_verdict is not None:
            return ExecutionResult(self.load_verdict, 0, total, [], duration_ms, self.detail)
        verdicts = list(self.verdicts)
        if self.stopped:
            first_bad = next(i for i, v in enumerate(verdicts) if v is not Verdict.PASSED)
            verdicts = verdicts[: first_bad + 1]
        elif len(verdicts) < total:
            ended = _ending_verdict(status, signum)
            self._note(
                f"{'test ' + str(len(verdicts)) if self.loaded else 'program'}: {status}"
                + (f" (signal {signum})" if signum else "")
            )
            if not self.loaded:
                return ExecutionResult(ended, 0, total, [], duration_ms, self.detail)
            verdicts.append(ended)
        passed = sum(v is Verdict.PASSED for v in verdicts)
        overall = next((v for v in verdicts if v is not Verdict.PASSED), Verdict.PASSED)
        if total == 0 and not self.loaded:
            overall = _ending_verdict(status, signum)
        return ExecutionResult(overall, passed, total, verdicts, duration_ms, self.detail)


def _ending_verdict(status: str, signum: int) -> Verdict:
    """Why a child stopped before reporting every test."""
    if status == "timeout":
        return Verdict.TIMEOUT
    if status == "output_limit" or signum == signal.SIGXFSZ:
        return Verdict.OUTPUT_LIMIT
    if signum in (signal.SIGKILL, signal.SIGXCPU):  # not sent by the worker: the CPU limit
        return Verdict.TIMEOUT
    return Verdict.RUNTIME_ERROR


def _text(value: object) -> str:
    return value[:300] if isinstance(value, str) else ""
