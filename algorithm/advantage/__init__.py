"""The algorithm's driver side: from a step's rewards to each sample's advantage.

``group`` (group-relative advantages), ``kalman`` (a running per-problem baseline), ``dynamic``
(which prompts a step samples), ``noise`` (tie noise) and ``step`` (one train step's advantages,
the above in the order the driver applies them). The loss is ``algorithm/loss.py``'s.
"""

from algorithm.advantage.dynamic import Draw, GroupAccumulator, sample_groups
from algorithm.advantage.group import (
    group_advantages,
    is_informative,
    kl_penalised_rewards,
    masked_group_advantages,
    zero_std_fraction,
)
from algorithm.advantage.kalman import KalmanBaseline, kalman_advantages, running_baseline
from algorithm.advantage.noise import tie_noise
from algorithm.advantage.step import kl_shaped_rewards, step_advantages

__all__ = [
    "Draw",
    "GroupAccumulator",
    "KalmanBaseline",
    "group_advantages",
    "is_informative",
    "kalman_advantages",
    "kl_penalised_rewards",
    "kl_shaped_rewards",
    "masked_group_advantages",
    "running_baseline",
    "sample_groups",
    "step_advantages",
    "tie_noise",
    "zero_std_fraction",
]
