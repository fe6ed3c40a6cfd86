"""A run whose groups all score the same says so once (launch.loop.flat_steps)."""

from __future__ import annotations

import logging

from launch.loop.flat_steps import FLAT_STEPS, FlatSteps


def _record(step: int, zero_std: float, reward: float | None = 0.0) -> dict:
    return {"step": step, "train/zero_std_frac": zero_std, "reward/mean": reward}


def test_flat_steps_in_a_row_warn_once_with_the_steps_and_the_meaning(caplog):
    flat = FlatSteps()
    with caplog.at_level(logging.WARNING, logger="launch.loop.flat_steps"):
        said = [flat.observe(_record(step, 1.0)) for step in range(1, 3 * FLAT_STEPS)]
    messages = [m for m in said if m is not None]
    assert len(messages) == 1 and len(caplog.records) == 1
    assert messages[0].startswith(f"steps 1-{FLAT_STEPS}: in every group all completions")
    assert "no completion earned any reward" in messages[0]
    assert said.index(messages[0]) == FLAT_STEPS - 1  # said at the step that ends the streak


def test_a_step_that_teaches_restarts_the_count():
    flat = FlatSteps(limit=3)
    assert flat.observe(_record(1, 1.0)) is None
    assert flat.observe(_record(2, 1.0)) is None
    assert flat.observe(_record(3, 0.9)) is None  # one informative group: the streak ends
    assert flat.observe(_record(4, 1.0)) is None
    assert flat.observe(_record(5, 1.0)) is None
    assert flat.observe(_record(6, 1.0)).startswith("steps 4-6:")


def test_the_meaning_follows_the_reward():
    full = FlatSteps(limit=1).observe(_record(1, 1.0, reward=1.0))
    mixed = FlatSteps(limit=1).observe(_record(1, 1.0, reward=0.5))
    assert "nothing left to learn" in full
    assert "rollout.group_size" in mixed and "(reward 0.500)" in mixed


def test_a_learning_run_never_warns():
    flat = FlatSteps(limit=2)
    assert all(flat.observe(_record(s, 0.5, 0.3)) is None for s in range(1, 100))
