"""What the pool dispatches: one execution of a job on one worker, and how it is judged.

A ``function`` job is one execution; a ``stdio`` job one per test (``stdio.py``). The pool
drives both through the same calls, so it never asks which kind it holds:

- ``begin(config)``: a fresh attempt; returns the ``run`` message's fields (never an expected
  value or an answer) and ``backstop_s``, the worker's own deadline;
- ``on_record(record)`` / ``on_output(data)``: what the execution sent while it ran;
  ``on_record`` returns True to stop it early;
- ``finish(message)`` / ``give_up(verdict, why)``: the execution ended, or failed twice; each
  returns the job's result once it has one (else None) and the tasks to run next.
"""

from __future__ import annotations

import logging

from common.config import SandboxConfig
from common.types import ExecutionJob, ExecutionResult, Verdict
from sandbox.trusted import testplan
from sandbox.trusted.judging import Judgement

log = logging.getLogger(__name__)

BACKSTOP_S = 10.0  # extra time a worker gets beyond the job's own deadline before it is killed

Outcome = tuple[ExecutionResult | None, list]


class FunctionTask:
    """A ``function`` job: one execution, its tests judged from the child's records."""

    def __init__(self, index: int, job: ExecutionJob, stop_at_first_failure: bool) -> None:
        self.index = index
        self.job = job
        self.stop_at_first_failure = stop_at_first_failure
        self.attempts = 0
        self.plans: list[testplan.TestPlan] | None = None  # made at the first dispatch
        self.judgement: Judgement | None = None

    def begin(self, config: SandboxConfig) -> dict:
        self.attempts += 1
        if self.plans is None:  # planned here, while the workers already run
            self.plans = _plan(self.job)
        self.judgement = Judgement(self.plans, self.stop_at_first_failure)
        message = {
            "code": self.job.code,
            "setup_code": self.job.setup_code,
            "parts": [plan.child for plan in self.plans],
            "stream": self.stop_at_first_failure,
            "timeout_s": config.timeout_s,
            "test_timeout_s": min(config.test_timeout_s, config.timeout_s),
            "max_output_bytes": config.max_output_bytes,
            "backstop_s": config.timeout_s + BACKSTOP_S,
        }
        if any(plan.form == "exec" for plan in self.plans):  # tests that are code: not in the
            message["split"] = True  # program's process (sandbox/isolated/split.py)
            message["shared"], message["classes"] = testplan.shared_classes(self.job.setup_code)
            message["ask"] = testplan.program_names(self.job.setup_code, self.job.tests)
        return message

    def on_record(self, record: object) -> bool:
        return self.judgement.on_record(record)  # never raises: a bad record fails a test

    def on_output(self, data: bytes) -> None:
        """A function job's output is discarded by the worker: nothing comes."""

    def finish(self, message: dict) -> Outcome:
        """The result from the judgement and the worker's ``done``. Should judging raise after
        all, that one result is ``failed``: an exception out of ``run`` would lose the results
        of the whole call."""
        duration_ms = float(message.get("duration_ms") or 0.0)
        try:
            status, signum = message.get("status", ""), int(message.get("signal") or 0)
            return self.judgement.finish(status, signum, duration_ms), []
        except Exception as exc:
            log.exception("sandbox: judging a result failed")
            detail = f"{type(exc).__name__} while judging"
            total = len(self.plans)
            return ExecutionResult(Verdict.FAILED, 0, total, [], duration_ms, detail), []

    def give_up(self, verdict: Verdict, why: str) -> Outcome:
        return ExecutionResult(verdict, 0, len(self.plans or ()), [], 0.0, why), []


def _plan(job: ExecutionJob) -> list[testplan.TestPlan]:
    shadowed = testplan.shadowed_names(job.code, job.tests)
    return [testplan.plan_test(test, job.setup_code, shadowed) for test in job.tests]
