"""Execution reward: a verdict becomes a scalar, or ``None`` when the pool itself broke."""

from __future__ import annotations

from common.types import ExecutionResult, Verdict


def execution_reward(result: ExecutionResult, mode: str) -> float | None:
    """``binary``: 1.0 iff every test passed. ``partial``: the fraction of tests passed.

    ``infra_error`` returns ``None``: the sample is masked out of the batch, never scored 0,
    because a crashed sandbox says nothing about the code.
    """
    if result.verdict is Verdict.INFRA_ERROR:
        return None
    if mode == "binary":
        return 1.0 if result.verdict is Verdict.PASSED else 0.0
    if mode == "partial":
        if result.verdict is Verdict.PASSED:
            return 1.0
        return result.tests_passed / result.tests_total if result.tests_total else 0.0
    raise ValueError(f"unknown reward mode {mode!r}: expected 'binary' or 'partial'")
