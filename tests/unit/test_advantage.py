"""Advantages keep the rewards' float64 precision, against a plain-Python float64 reference."""

from __future__ import annotations

import statistics

import torch

from algorithm.advantage import group_advantages, kl_penalised_rewards, masked_group_advantages


def _reference(rewards: list[float], eps: float) -> list[float]:
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def test_kl_in_reward_on_an_all_passing_group_keeps_float64_precision():
    """Every completion passes (reward 1) and the KL charge makes the rewards 1 - beta*KL,
    nearly equal: fed through float32 (what this code did) the advantages, of size ~1, are
    1.3e-5 off the float64 reference; in float64 they are exact to rounding."""
    kl = [1.2, 1.25, 1.31, 1.18]
    beta, eps = 0.04, 1e-4
    ones = torch.ones(4, dtype=torch.float64)
    shaped = kl_penalised_rewards(ones, torch.tensor(kl, dtype=torch.float64), beta)
    assert shaped.dtype == torch.float64
    expected = _reference([1.0 - beta * k for k in kl], eps)
    assert max(abs(e) for e in expected) > 1.0
    got = group_advantages(shaped, 4, eps=eps)
    assert got.dtype == torch.float64
    assert max(abs(g - e) for g, e in zip(got.tolist(), expected, strict=True)) < 1e-12
    float32 = group_advantages(shaped.float(), 4, eps=eps)  # the same path, fed float32
    assert max(abs(g - e) for g, e in zip(float32.tolist(), expected, strict=True)) > 1e-6


def test_masked_advantages_keep_float64_precision():
    rewards = [1.0 - 1e-7, 1.0, None, 1.0 + 2e-7]
    got = masked_group_advantages(rewards, 4, eps=1e-9)
    expected = _reference([1.0 - 1e-7, 1.0, 1.0 + 2e-7], 1e-9)
    assert got[2] is None
    kept = [got[0], got[1], got[3]]
    assert max(abs(g - e) for g, e in zip(kept, expected, strict=True)) < 1e-6
