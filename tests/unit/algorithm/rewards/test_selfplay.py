"""The saboteur's reward (``algorithm/rewards/selfplay.py``): its bug's hardness for the fixers,
0 for an invalid bug, masked where nothing is known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from algorithm.rewards.selfplay import bug_hardness, saboteur_rewards


def check(status: str) -> SimpleNamespace:
    return SimpleNamespace(status=status, valid=status == "valid")


def test_saboteur_rewards_are_the_fixers_failure_rate_or_masked():
    statuses = ["valid", "valid", "valid", "not_a_wrong_answer", "still_passes", "infra_error"]
    keys = ["a", "a", "b", "c", "d", "e"]
    # "a" measured (fixers solved a quarter of it), "b" valid but not measured
    checks = [check(status) for status in statuses]
    assert saboteur_rewards(checks, keys, {"a": 0.75}) == [0.75, 0.75, None, 0.0, 0.0, None]


def test_a_valid_bug_no_fixer_can_be_shown_earns_nothing():
    assert saboteur_rewards([check("valid")], [None], {}) == [0.0]


def test_hardness_is_one_minus_the_fixers_solve_rate_and_unknown_without_a_verdict():
    assert bug_hardness([True, False, False, False]) == pytest.approx(0.75)
    assert bug_hardness([True, True]) == 0.0
    assert bug_hardness([]) is None
