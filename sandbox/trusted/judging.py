"""Turn the child's records and the worker's account of the process into a verdict.

This runs in the pool front, the only place that knows the expected values. The records are
untrusted: a record the harness never sends is tampering and fails the test it arrived for
(the whole program before ``loaded``); a missing one fails as the process ended. Nothing a
record holds may raise out of here: one completion must never stop the pool. What happened to
the process (deadline, output cap, a signal) comes from the worker, beyond the child's reach.
"""

from __future__ import annotations

import math
import reprlib
import signal

from common.types import ExecutionResult, Verdict
from sandbox.trusted import testplan
from sandbox.wire import frames
from sandbox.wire.canonical import MAX_NODES, rebuild

# Ints shown in full up to here; past it, only their size: str() of a large int raises, and the
# child sends ints as hex, with no such limit.
_REPR_INT_BITS = 3_000  # ~900 digits


class _ShortRepr(reprlib.Repr):
    """``reprlib`` whose int repr cannot raise, however large the int."""

    def repr_int(self, x: int, level: int) -> str:
        bits = x.bit_length()
        if bits > _REPR_INT_BITS:
            sign = "negative " if x < 0 else ""
            return f"<{sign}int of about {int(bits * math.log10(2)) + 1} digits>"
        return super().repr_int(x, level)


_SHORT = _ShortRepr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 8, 8
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 80, 80, 40

# The most JSON arrays the harness puts in a record, besides its one object (``frames.record``
# refuses a record with more before decoding it): the ``values`` list, and per value, what
# ``canonicalise`` writes for at most MAX_NODES nodes: two per node (a tagged list and its
# body) and one per dict item, at most half as many as nodes. This bounds what a 2 MiB record
# decodes to (docs/sandbox.md, "Records").
RECORD_ARRAYS = 1
ARRAYS_PER_VALUE = 2 * MAX_NODES + MAX_NODES // 2

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
        self.wrong: list[bool] = []  # per judged test: failed by a wrong answer (see finish)
        self.loaded = False
        self.load_verdict: Verdict | None = None
        self.detail = ""
        self.stopped = False

    def on_record(self, record: object) -> bool:
        """Judge one record; returns True when the execution can be stopped early. A child's
        record arrives as the bytes it wrote and is decoded here, one at a time and only while
        it can still change the outcome, after ``frames.record`` has checked that it holds no
        more than the harness sends at this point; one the server made itself is a dict."""
        if self.stopped or self.load_verdict is not None:
            return self.stopped
        if self.loaded and len(self.verdicts) >= len(self.plans):
            return False
        if isinstance(record, (bytes, bytearray)):
            record = frames.record(record, self._most_arrays())
        judged = len(self.verdicts)
        try:
            self._judge_record(record)
        except Exception as exc:  # what the child sent must not raise out of the pool
            if len(self.verdicts) == judged:
                self._tampered(f"{type(exc).__name__} while judging")
        if self.stop_at_first_failure and any(v is not Verdict.PASSED for v in self.verdicts):
            self.stopped = True
        return self.stopped

    def _most_arrays(self) -> int:
        """The most JSON arrays the harness's next record holds: a test's values
        (``ARRAYS_PER_VALUE`` each) once the program loaded, none in any other record."""
        if not self.loaded:
            return 0
        values = len(self.plans[len(self.verdicts)].child.get("exprs", ()))
        return RECORD_ARRAYS + ARRAYS_PER_VALUE * values

    def _judge_record(self, record: object) -> None:
        kind = record.get("t") if type(record) is dict else None
        if kind == "end":  # the harness ends only after its last test
            if not self.loaded or len(self.verdicts) < len(self.plans):
                self._tampered("an end before the last test")
            return
        if kind == "loaded" and not self.loaded:
            self.loaded = True
        elif kind == "load_error" and not self.loaded and _known(record.get("kind")):
            self.load_verdict = _KIND_VERDICT[record["kind"]]
            self.detail = _text(record.get("exc"))
        elif kind == "test" and self.loaded and _is_index(record.get("i"), len(self.verdicts)):
            if len(self.verdicts) < len(self.plans):
                self._judge_test(record)
        else:
            self._tampered("a record the harness never sends")

    def _tampered(self, why: str) -> None:
        """A record only a program writing to the value pipe could produce: it fails the test
        it arrived for, or the whole program before it loaded (``failed``, not ``infra_error``,
        which the reward would mask). After the last test it can change nothing."""
        if not self.loaded:
            self.load_verdict = Verdict.FAILED
            self._note(f"program: {why}")
        elif len(self.verdicts) < len(self.plans):
            self._note(f"test {len(self.verdicts)}: {why}")
            self._append(Verdict.FAILED, wrong=False)

    def _append(self, verdict: Verdict, wrong: bool) -> None:
        self.verdicts.append(verdict)
        self.wrong.append(wrong)

    def _judge_test(self, record: dict) -> None:
        plan = self.plans[len(self.verdicts)]
        verdict = Verdict.FAILED
        wrong = False
        if "kind" in record:
            if not _known(record["kind"]):
                self._tampered("a record the harness never sends")
                return
            verdict = _KIND_VERDICT[record["kind"]]
            if verdict is Verdict.SYNTAX_ERROR:
                verdict = Verdict.RUNTIME_ERROR
            # An exec-form test's own assert statement failed; any other AssertionError was
            # raised by the program (a value-form test holds no assert the child runs).
            wrong = plan.form == "exec" and record["kind"] == "assert" and record.get("own") is True
            self._note(f"test {len(self.verdicts)}: {_text(record.get('exc'))}")
        elif plan.form == "exec":
            verdict = Verdict.PASSED if record.get("ok") is True else Verdict.FAILED
        else:
            verdict, wrong = self._compare(plan, record.get("values"))
        self._append(verdict, wrong)

    def _compare(self, plan: testplan.TestPlan, values: object) -> tuple[Verdict, bool]:
        """The trusted assertion on the child's values, and whether a failure is a wrong
        answer (the assertion ran and was false, not a malformed record or a value it could
        not judge)."""
        if not isinstance(values, list) or len(values) != len(plan.child["exprs"]):
            self._note(f"test {len(self.verdicts)}: malformed record")
            return Verdict.FAILED, False
        try:
            rebuilt = [rebuild(v) for v in values]
            if testplan.judge(plan, rebuilt):
                return Verdict.PASSED, False
        except Exception as exc:  # a rebuilt value the assertion cannot handle fails it
            self._note(f"test {len(self.verdicts)}: {type(exc).__name__} while judging")
            return Verdict.FAILED, False
        # What the candidate computed, for the feedback of a multi-turn episode: the program's
        # own output (never an expected value), shortened without building a huge repr.
        try:
            got = ", ".join(_SHORT.repr(value) for value in rebuilt)
        except Exception:  # reprlib falls back on repr(), which a value may still refuse
            got = "a value that cannot be shown"
        self._note(f"test {len(self.verdicts)}: assertion failed, got {got}")
        return Verdict.FAILED, True

    def _note(self, text: str) -> None:
        if not self.detail:
            self.detail = _text(text)

    def finish(self, status: str, signum: int, duration_ms: float) -> ExecutionResult:
        """Combine the records with how the process ended."""
        total = len(self.plans)
        if self.load_verdict is not None:
            return ExecutionResult(self.load_verdict, 0, total, [], duration_ms, self.detail)
        verdicts = list(self.verdicts)
        # The worker ended it on a record past the harness's last: the program wrote records of
        # its own, which fails it even when every test had passed (the last one fails then, so
        # that no partial credit stays whole).
        flooded = status == frames.TOO_MANY_RECORDS and not self.stopped
        if flooded:
            where = f"test {min(len(verdicts), total - 1)}" if self.loaded and total else "program"
            self._note(f"{where}: more records than the harness sends")
        if self.stopped:
            first_bad = next(i for i, v in enumerate(verdicts) if v is not Verdict.PASSED)
            verdicts = verdicts[: first_bad + 1]
        elif flooded and total and len(verdicts) == total and verdicts[-1] is Verdict.PASSED:
            verdicts[-1] = Verdict.FAILED
        elif len(verdicts) < total:
            ended = ending_verdict(status, signum)
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
            overall = ending_verdict(status, signum)
        if flooded and overall is Verdict.PASSED:  # no test at all
            overall = Verdict.FAILED
        wrong_answers = sum(self.wrong[: len(verdicts)])  # a test the process ended in is none
        return ExecutionResult(
            overall, passed, total, verdicts, duration_ms, self.detail, wrong_answers
        )


def ending_verdict(status: str, signum: int) -> Verdict:
    """Why a child stopped before reporting every test (for a whole program, any ending but
    the end of its output: ``sandbox/trusted/processes.py``)."""
    if status == "memory":  # its execution cgroup's OOM killer struck (sandbox/trusted/cgroups.py)
        return Verdict.MEMORY_LIMIT
    if status == frames.TOO_MANY_RECORDS:  # records of the program's own
        return Verdict.FAILED
    if status == "timeout":
        return Verdict.TIMEOUT
    if status == "output_limit" or signum == signal.SIGXFSZ:
        return Verdict.OUTPUT_LIMIT
    if signum in (signal.SIGKILL, signal.SIGXCPU):  # not sent by the worker: the CPU limit
        return Verdict.TIMEOUT
    return Verdict.RUNTIME_ERROR


def _known(kind: object) -> bool:
    """Whether ``kind`` is one the harness reports (checked before any lookup: a list or a dict
    is not hashable)."""
    return type(kind) is str and kind in _KIND_VERDICT


def _is_index(value: object, expected: int) -> bool:
    return type(value) is int and value == expected


def _text(value: object) -> str:
    """At most 300 characters of the child's text, encodable as UTF-8: a lone surrogate (JSON's
    ``"\\ud800"``) would raise wherever the detail is written or tokenised later."""
    if type(value) is not str:
        return ""
    return value[:300].encode("utf-8", "backslashreplace").decode("utf-8")[:300]
