"""Group-relative advantages (``algorithm/advantage/group.py``) against values worked out by hand
(the arithmetic is in the comments): group std, batch std and none, ``reward_scale``, masked
samples, the zero-variance rule and KL in the reward; and the rewards' float64 precision kept,
against a plain-Python float64 reference."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from algorithm.advantage import (
    group_advantages,
    kl_penalised_rewards,
    masked_group_advantages,
    zero_std_fraction,
)

# Three groups of G=4: mixed, uniform (0.1 is not exact in binary), one outlier.
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.1, 0.1, 0.1, 0.1, 0.0, 0.0, 0.0, 2.0])


def test_group_std_advantages_by_hand():
    adv = group_advantages(REWARDS, group_size=4, eps=0.0)
    # group 1: mean 0.5, population std 0.5 -> +-1
    # group 3: mean 0.5, centred (-.5, -.5, -.5, 1.5), var (3 * .25 + 2.25) / 4 = .75
    s = math.sqrt(0.75)
    expected = [1, -1, -1, 1, 0, 0, 0, 0, -0.5 / s, -0.5 / s, -0.5 / s, 1.5 / s]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


def test_group_std_advantages_include_eps():
    adv = group_advantages(REWARDS[:4], group_size=4, eps=1e-4)
    torch.testing.assert_close(
        adv, torch.tensor([1.0, -1, -1, 1], dtype=torch.float64) * 0.5 / 0.5001
    )


def test_uniform_group_gets_exactly_zero_advantage():
    for scale in ("group_std", "batch_std", "none"):
        adv = group_advantages(REWARDS, group_size=4, scale=scale)
        assert torch.isfinite(adv).all()
        assert (adv[4:8] == 0).all(), scale
    all_equal = group_advantages(torch.full((4,), 0.3), group_size=4)
    assert (all_equal == 0).all() and not all_equal.isnan().any()


def test_population_std_gives_unit_advantages_for_pairs():
    # Bessel's correction would give +-0.707 here; population std gives +-1.
    adv = group_advantages(torch.tensor([1.0, 0.0]), group_size=2, eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0], dtype=torch.float64))


def test_batch_std_advantages_by_hand():
    rewards = REWARDS.clone()
    rewards[4:8] = 0.5
    adv = group_advantages(rewards, group_size=4, eps=0.0, scale="batch_std")
    # batch mean 6/12 = .5; squared deviations 7 * .25 + 2.25 = 4 -> var 1/3
    s = math.sqrt(1 / 3)
    expected = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0, 0, 0, 0]
    expected += [-0.5 / s, -0.5 / s, -0.5 / s, 1.5 / s]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


def test_unscaled_advantages_are_centred_rewards():
    adv = group_advantages(REWARDS, group_size=4, scale="none")
    expected = [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, -0.5, -0.5, -0.5, 1.5]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))


def test_zero_std_fraction():
    assert zero_std_fraction(REWARDS.tolist(), 4) == pytest.approx(1 / 3)


def test_rewards_not_a_multiple_of_group_size_is_refused():
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(torch.zeros(6), group_size=4)


def test_reward_scale_multiplies_advantages():
    # DGRO: A = (r - mean) * reward_scale / (std + eps); uniform groups stay exactly 0
    adv = group_advantages(REWARDS, group_size=4, eps=0.0, scale="group_std", reward_scale=0.5)
    base = group_advantages(REWARDS, group_size=4, eps=0.0, scale="group_std")
    torch.testing.assert_close(adv, 0.5 * base)
    assert adv[:4].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert (adv[4:8] == 0).all()


def test_kl_in_reward_arithmetic_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    kl = torch.tensor([2.0, 0.0, 0.0, 4.0])
    penalised = kl_penalised_rewards(rewards, kl, beta=0.1)
    # 1 - .2, 0 - 0, 1 - 0, 1 - .4
    torch.testing.assert_close(penalised, torch.tensor([0.8, 0.0, 1.0, 0.6], dtype=torch.float64))
    # Group 2 was uniform (1, 1) and gets a signal from the penalty alone: +-1 with group std.
    adv = group_advantages(penalised, group_size=2, eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="same shape"):
        kl_penalised_rewards(rewards, kl[:3], beta=0.1)


# ---- masked groups (samples without a verdict) ---------------------------------------------------


def test_advantages_are_normalised_per_group_by_hand():
    # group 1: [1, 0, 0, 1] mean 0.5, population std 0.5 -> +-1 (eps 0)
    # group 2: [0.5, 0.5, 0.5, 0.5] zero variance -> exactly 0, not NaN
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5]
    advantages = masked_group_advantages(rewards, group_size=4, eps=0.0)
    assert advantages[:4] == pytest.approx([1.0, -1.0, -1.0, 1.0])
    assert advantages[4:] == [0.0, 0.0, 0.0, 0.0]
    assert not any(math.isnan(a) for a in advantages)


def test_masked_samples_stay_out_of_the_group_statistics():
    # None is "no reward" (sandbox failure): the group is normalised over [1, 0] alone.
    rewards = [1.0, None, 0.0, None]
    advantages = masked_group_advantages(rewards, group_size=4, eps=0.0)
    assert advantages == [pytest.approx(1.0), None, pytest.approx(-1.0), None]


def test_group_with_one_reward_has_no_baseline():
    assert masked_group_advantages([None, 1.0, None, None], 4, eps=1e-4) == [None] * 4


def test_batch_std_scale_divides_by_the_std_of_all_rewards():
    rewards = [1.0, 0.0, 0.0, 0.0]  # batch mean 0.25, population std sqrt(3)/4
    advantages = masked_group_advantages(rewards, 2, eps=0.0, scale="batch_std")
    std = math.sqrt(3) / 4
    assert advantages == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0])


def test_zero_std_fraction_counts_uniform_groups():
    assert zero_std_fraction([1.0, 1.0, 0.0, 1.0, None, 0.0], group_size=2) == pytest.approx(2 / 3)


# ---- float64 precision ---------------------------------------------------------------------------


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
