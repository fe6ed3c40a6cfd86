"""The execution reward (``sandbox/reward.py``): binary and partial, masked on ``infra_error``."""

from __future__ import annotations

from common.types import ExecutionResult, Verdict
from sandbox.reward import execution_reward


def result(verdict, passed=0, total=4):
    return ExecutionResult(verdict, passed, total)


def test_reward_binary_and_partial():
    assert execution_reward(result(Verdict.PASSED, 4), "binary") == 1.0
    assert execution_reward(result(Verdict.FAILED, 3), "binary") == 0.0
    assert execution_reward(result(Verdict.FAILED, 3), "partial") == 0.75
    assert execution_reward(result(Verdict.TIMEOUT, 0), "partial") == 0.0


def test_reward_masks_infra_error():
    assert execution_reward(result(Verdict.INFRA_ERROR), "binary") is None
    assert execution_reward(result(Verdict.INFRA_ERROR), "partial") is None
