"""One train step's advantages from its rewards, in the order the driver applies them: KL in the
reward, tie noise (judged on the raw rewards, so a KL charged first does not hide a tie), the
baseline (the group mean or the Kalman filter), then ``reward_scale`` (docs/rewards.md).

A completion without a reward (no verdict) gets no advantage, and neither does one without a
token to train on; the latter's reward still counts in its group's statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from algorithm.advantage.group import kl_penalised_rewards, masked_group_advantages
from algorithm.advantage.kalman import KalmanBaseline
from algorithm.advantage.noise import tie_noise
from common.config import AdvantageConfig


def kl_shaped_rewards(
    rewards: Sequence[float | None],  # (N,)
    sequence_kl: Sequence[float | None],  # (N,) the learner's KL per completion; None: unmeasured
    beta: float,
) -> tuple[list[float | None], dict[str, float]]:
    """r_i - beta * KL_i (in float64) where both are known, the reward as is elsewhere; and
    ``train/seq_kl_mean``, the mean KL over the completions charged."""
    charged = [
        i
        for i, (r, kl) in enumerate(zip(rewards, sequence_kl, strict=True))
        if r is not None and kl is not None
    ]
    kl = [sequence_kl[i] for i in charged]
    penalised = kl_penalised_rewards(
        torch.tensor([rewards[i] for i in charged], dtype=torch.float64),
        torch.tensor(kl, dtype=torch.float64),
        beta,
    )
    shaped = list(rewards)
    for i, value in zip(charged, penalised.tolist(), strict=True):
        shaped[i] = value
    return shaped, {"train/seq_kl_mean": sum(kl) / max(len(kl), 1)}


def step_advantages(
    rewards: Sequence[float | None],  # (N,) grouped contiguously; None: no verdict
    trainable: Sequence[bool],  # (N,) False: no completion token to train on
    group_size: int,
    config: AdvantageConfig,
    *,
    step: int,
    seed: int,
    keys: Sequence[int] = (),  # the problem of each group (the Kalman baseline's state)
    baseline: KalmanBaseline | None = None,
    sequence_kl: Sequence[float | None] | None = None,  # (N,) KL in the reward when given
    beta: float = 0.0,
) -> tuple[list[float | None], dict[str, float]]:
    """Each completion's advantage (None: not trained on) and the shaping's metrics, following
    the module docstring. ``baseline`` None is GRPO's group mean; the tie noise is seeded by the
    run's ``seed`` and the ``step``, so a run is reproducible."""
    shaped: list[float | None] = list(rewards)
    metrics: dict[str, float] = {}
    if sequence_kl is not None:
        shaped, metrics = kl_shaped_rewards(rewards, sequence_kl, beta)
    if config.tie_noise > 0:
        shaped, touched = tie_noise(
            shaped,
            group_size,
            config.tie_noise,
            config.tie_noise_below,
            f"{seed}/{step}",
            raw=rewards,
        )
        metrics["advantage/tie_noise_frac"] = touched / max(len(shaped) // group_size, 1)
    if baseline is not None:
        advantages = baseline.advantages(shaped, group_size, keys, step)
    else:
        advantages = masked_group_advantages(shaped, group_size, config.eps, config.scale)
    return [
        advantage * config.reward_scale if advantage is not None and trained else None
        for advantage, trained in zip(advantages, trainable, strict=True)
    ], metrics
