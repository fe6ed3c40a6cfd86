"""One train step's advantages (``algorithm.advantage.step``): KL in the reward, tie noise, the
baseline and ``reward_scale`` in the driver's order, expected values worked out by hand."""

from __future__ import annotations

import pytest

from algorithm.advantage import KalmanBaseline, kl_shaped_rewards, step_advantages, tie_noise
from common.config import AdvantageConfig, KalmanConfig


def test_kl_shaped_rewards_charge_only_the_measured_rewarded_completions():
    # beta 0.1: 1 - 0.1 * 0.5 = 0.95 and 0 - 0.1 * 1.0 = -0.1; no verdict stays None, an
    # unmeasured completion (no token to train on) keeps its reward.
    shaped, metrics = kl_shaped_rewards([1.0, 0.0, None, 1.0], [0.5, 1.0, None, None], beta=0.1)
    assert shaped == pytest.approx([0.95, -0.1, None, 1.0])
    assert metrics == {"train/seq_kl_mean": pytest.approx(0.75)}


def test_kl_shaped_rewards_without_a_measured_completion_change_nothing():
    assert kl_shaped_rewards([None, 1.0], [None, None], 0.1) == (
        [None, 1.0],
        {"train/seq_kl_mean": 0.0},
    )


def test_step_advantages_centre_per_group_then_scale():
    # scale none (Dr. GRPO), reward_scale 2: group [1, 0] -> centred [0.5, -0.5] -> [1, -1];
    # group [1, 1] is uniform -> 0, and its second completion has no token to train on -> None.
    config = AdvantageConfig(scale="none", reward_scale=2.0)
    advantages, metrics = step_advantages(
        [1.0, 0.0, 1.0, 1.0], [True, True, True, False], 2, config, step=0, seed=0
    )
    assert advantages == pytest.approx([1.0, -1.0, 0.0, None])
    assert metrics == {}


def test_a_completion_without_trained_tokens_still_counts_in_its_group():
    # group mean of [1, 0] is 0.5 whatever is trained on: the first gets 0.5, not 0.
    config = AdvantageConfig(scale="none")
    advantages, _ = step_advantages([1.0, 0.0], [True, False], 2, config, step=0, seed=0)
    assert advantages == [0.5, None]


def test_kl_in_the_reward_ranks_the_drifted_completion_lower():
    # both pass; KL 0.2 vs 0.6 at beta 0.5 -> rewards 0.9 and 0.7 -> centred +-0.1 (scale none)
    config = AdvantageConfig(scale="none")
    advantages, metrics = step_advantages(
        [1.0, 1.0], [True, True], 2, config, step=0, seed=0, sequence_kl=[0.2, 0.6], beta=0.5
    )
    assert advantages == pytest.approx([0.1, -0.1])
    assert metrics == {"train/seq_kl_mean": pytest.approx(0.4)}


def test_tie_noise_is_judged_on_the_raw_rewards_and_seeded_by_run_and_step():
    # The KL charge separates the tied group [1, 1]; the noise still applies (ties are judged
    # before shaping), with the seed "<run seed>/<step>"; the untied group [1, 0] is left alone.
    config = AdvantageConfig(scale="none", tie_noise=0.1)
    rewards, kl = [1.0, 1.0, 1.0, 0.0], [0.2, 0.6, 0.0, 0.0]
    advantages, metrics = step_advantages(
        rewards, [True] * 4, 2, config, step=5, seed=7, sequence_kl=kl, beta=0.5
    )
    shaped, _ = kl_shaped_rewards(rewards, kl, 0.5)
    noisy, touched = tie_noise(shaped, 2, 0.1, config.tie_noise_below, "7/5", raw=rewards)
    assert touched == 1 and metrics["advantage/tie_noise_frac"] == 0.5
    mean = (noisy[0] + noisy[1]) / 2
    assert advantages == pytest.approx([noisy[0] - mean, noisy[1] - mean, 0.5, -0.5])
    again, _ = step_advantages(
        rewards, [True] * 4, 2, config, step=6, seed=7, sequence_kl=kl, beta=0.5
    )
    assert again[:2] != advantages[:2]


def test_the_kalman_baseline_replaces_the_group_mean():
    config = AdvantageConfig(baseline="kalman", scale="none", reward_scale=3.0)
    rewards, keys = [1.0, 1.0], [4]
    reference = KalmanBaseline(KalmanConfig(), "none").advantages(rewards, 2, keys, step=0)
    baseline = KalmanBaseline(KalmanConfig(), "none")
    advantages, _ = step_advantages(
        rewards, [True, True], 2, config, step=0, seed=0, keys=keys, baseline=baseline
    )
    # an all-passing group of a new problem: prior variance 1, observation variance 0.25 / 2,
    # gain 1 / 1.125 = 8/9, so the baseline moves from 0 to 8/9 and A = 3 * (1 - 8/9) = 1/3
    assert advantages == pytest.approx([3 * a for a in reference])
    assert advantages == pytest.approx([1 / 3, 1 / 3])
    assert 4 in baseline.states
