"""The learning-rate schedules (``learner/schedule.py``), hand-computed: linear warmup, then a
linear or cosine decay to ``min_lr`` at the last optimiser step."""

from __future__ import annotations

import math

import pytest

from learner.schedule import learning_rate


def test_warmup_rises_linearly_from_the_first_step():
    lr = 1e-3
    got = [learning_rate(step, lr, "constant", warmup=4) for step in range(6)]
    assert got == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_decay_runs_from_lr_after_warmup_to_min_lr_at_the_last_step(schedule):
    lr, floor = 1e-3, 1e-4
    at = {step: learning_rate(step, lr, schedule, 3, 12, floor) for step in range(14)}
    assert at[0] == pytest.approx(lr / 3) and at[2] == pytest.approx(lr)  # warmup
    assert at[3] == pytest.approx(lr)  # decay starts at lr
    # progress (step - 3) / (12 - 3 - 1): half way at step 7, for both shapes
    assert at[7] == pytest.approx((lr + floor) / 2)
    assert at[11] == pytest.approx(floor) and at[13] == pytest.approx(floor)  # then stays
    quarter = 0.75 if schedule == "linear" else 0.5 * (1 + math.cos(math.pi / 4))
    assert at[5] == pytest.approx(floor + (lr - floor) * quarter)


def test_a_decay_needs_steps_beyond_warmup():
    with pytest.raises(ValueError, match="more optimiser steps"):
        learning_rate(5, 1e-3, "cosine", warmup=4, total=4)
