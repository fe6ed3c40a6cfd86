"""The KL coefficient (``algorithm/kl_control.py``), hand-computed: fixed, adaptive (PPO's
controller) and linear from ``beta`` to ``beta_final`` over the run; and where beta is charged
(``kl_in``): which KL steers it, the loss's weight, the reward's charge."""

from __future__ import annotations

import pytest

from algorithm.kl_control import KlControl, kl_in_reward
from common.config import LossConfig


def test_adaptive_beta_follows_ppos_controller():
    control = KlControl("adaptive", 0.1, target=0.01, horizon=100)
    # e = clip(KL / target - 1, -0.2, 0.2); beta *= 1 + e * n / horizon, n = 10 samples
    betas = [control.update(kl, 10, step) for step, kl in enumerate((0.02, 0.01, 0.005, 0.011))]
    want, beta = [], 0.1
    for error in (0.2, 0.0, -0.2, 0.1):
        beta *= 1 + error * 10 / 100
        want.append(beta)
    assert betas == pytest.approx(want, rel=1e-12)
    assert betas[0] == pytest.approx(0.102)


def test_linear_beta_goes_from_beta_to_beta_final_over_the_run():
    control = KlControl("linear", 0.1, beta_final=0.02, total_steps=5)
    betas = [control.update(0.0, 8, done) for done in range(1, 7)]
    assert betas == pytest.approx([0.08, 0.06, 0.04, 0.02, 0.02, 0.02])


def test_fixed_beta_never_moves_and_a_moving_beta_needs_one_to_start():
    control = KlControl("fixed", 0.05)
    assert [control.update(1.0, 8, k) for k in range(3)] == [0.05] * 3
    with pytest.raises(ValueError, match="needs beta > 0"):
        LossConfig(kl_control="adaptive", beta=0.0)
    with pytest.raises(ValueError, match=r"run\.steps"):
        KlControl("linear", 0.1, beta_final=0.0)


def test_the_kl_steers_beta_where_it_is_charged():
    in_loss = KlControl.of(LossConfig(beta=0.1, kl_control="adaptive"), total_steps=10)
    in_reward = KlControl.of(LossConfig(beta=0.1, kl_in="reward"), total_steps=10)
    assert (in_loss.loss_beta, in_reward.loss_beta) == (0.1, 0.0)
    assert in_loss.steering_kl(0.02, 0.5) == 0.02  # train/kl
    assert in_reward.steering_kl(0.02, 0.5) == 0.5  # the KL the rewards were charged
    assert in_reward.steering_kl(0.02, None) == 0.0  # none measured
    assert kl_in_reward(LossConfig(beta=0.1, kl_in="reward"))
    assert not kl_in_reward(LossConfig(beta=0.0, kl_in="reward"))  # no reference to measure
    assert not kl_in_reward(LossConfig(beta=0.1))
