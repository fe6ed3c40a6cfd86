"""Tie noise (``algorithm/advantage/noise.py``): only groups whose rewards are tied below the
threshold, judged on the raw rewards, seeded and zero-mean."""

from __future__ import annotations

import math

from algorithm.advantage import tie_noise


def test_tie_noise_touches_only_groups_below_the_threshold():
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5, None, None, 0.0, 1.0]
    noisy, touched = tie_noise(rewards, 3, sigma=0.1, below=1e-6, seed="0/1")
    assert touched == 2  # [1, 1, 1] and [0.5, 0.5, None]; [None, 0, 1] is not tied
    assert noisy[3:6] == rewards[3:6] and noisy[9:] == rewards[9:]
    assert noisy[8] is None
    moved = [noisy[i] - rewards[i] for i in (0, 1, 2, 6, 7)]
    assert all(0 < abs(d) < 0.5 for d in moved) and len(set(moved)) == 5
    assert tie_noise(rewards, 3, 0.1, 1e-6, "0/1") == (noisy, touched)  # seeded
    assert tie_noise(rewards, 3, 0.1, 1e-6, "0/2")[0] != noisy


def test_tie_noise_judges_ties_on_the_raw_rewards():
    raw = [1.0, 1.0, 0.0, 1.0]
    shaped = [0.97, 0.95, -0.02, 0.99]  # a KL charged in the reward breaks the exact tie
    noisy, touched = tie_noise(shaped, 2, sigma=0.1, below=1e-6, seed="s", raw=raw)
    assert touched == 1 and noisy[2:] == shaped[2:] and noisy[:2] != shaped[:2]
    assert tie_noise(shaped, 2, 0.1, 1e-6, "s")[1] == 0  # judged on the shaped ones: no tie


def test_tie_noise_threshold_and_zero_mean():
    rewards = [0.5, 0.52] * 4000
    noisy, touched = tie_noise(rewards, 2, sigma=0.05, below=0.0101, seed="x")
    assert touched == 4000  # each group's std is 0.01
    assert tie_noise(rewards, 2, 0.05, 0.0099, "x")[1] == 0
    # zero-mean: the mean shift of 8000 draws of std 0.05 (seeded: one fixed draw) is within 4
    # of its standard errors
    shift = sum(n - r for n, r in zip(noisy, rewards, strict=True)) / len(rewards)
    assert abs(shift) < 4 * 0.05 / math.sqrt(len(rewards))
