"""The Kalman baseline (``algorithm/advantage/kalman.py``): expected values worked out by hand."""

from __future__ import annotations

import pytest

from algorithm.advantage import KalmanBaseline, kalman_advantages
from common.config import KalmanConfig

KALMAN = KalmanConfig(
    process_noise=0.01, reward_variance=0.25, initial_mean=0.0, initial_variance=1.0
)


def test_kalman_first_visit_is_close_to_the_group_mean():
    advantages, states = kalman_advantages([1.0, 0.0, 1.0, 1.0], 4, [7], 1, {}, KALMAN)
    # R = 0.25 / 4 = 1/16; P = 1; K = 1 / (1 + 1/16) = 16/17; mean = 16/17 * 0.75 = 12/17
    assert states[7].mean == pytest.approx(12 / 17)
    assert states[7].variance == pytest.approx(1 / 17)  # (1 - K) * P
    assert advantages == pytest.approx([5 / 17, -12 / 17, 5 / 17, 5 / 17])


def test_kalman_carries_the_estimate_across_steps():
    _, states = kalman_advantages([1.0, 0.0, 1.0, 1.0], 4, [7], 1, {}, KALMAN)
    advantages, after = kalman_advantages([0.0, 0.0, None, 0.0], 4, [7], 3, states, KALMAN)
    prior = 1 / 17 + 0.01 * 2  # two steps since the last visit
    gain = prior / (prior + 0.25 / 3)  # three scored completions
    mean = 12 / 17 + gain * (0.0 - 12 / 17)
    assert after[7].mean == pytest.approx(mean)
    assert after[7].variance == pytest.approx((1 - gain) * prior)
    # an all-equal group still has a signal: it did worse than the problem's history
    assert advantages == pytest.approx([-mean, -mean, None, -mean])
    assert states[7].mean == pytest.approx(12 / 17)  # the input states are not modified


def test_kalman_group_std_scaling_and_masked_groups():
    config = KALMAN.model_copy(update={"std_floor": 0.1})
    advantages, states = kalman_advantages(
        [1.0, 0.0, None, None, 1.0, 1.0], 2, ["a", "b", "c"], 1, {}, config, scale="group_std"
    )
    # group a: R = 1/8, K = 8/9, mean = 4/9, std 0.5;  group c: std 0 -> floor 0.1
    assert advantages[:2] == pytest.approx([(5 / 9) / 0.5, (-4 / 9) / 0.5])
    assert advantages[2:4] == [None, None] and "b" not in states
    assert advantages[4] == pytest.approx((1 - 8 / 9) / 0.1)


def test_kalman_state_dict_round_trips_through_json():
    import json

    baseline = KalmanBaseline(KALMAN)
    baseline.advantages([1.0, 0.0], 2, [3], step=5)
    restored = KalmanBaseline(KALMAN)
    restored.load_state_dict(json.loads(json.dumps(baseline.state_dict())))
    assert restored.states == baseline.states
    assert restored.advantages([1.0, 1.0], 2, [3], 6) == baseline.advantages([1.0, 1.0], 2, [3], 6)
    assert baseline.stats()["baseline/problems"] == 1
