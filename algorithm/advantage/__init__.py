"""The algorithm's driver side, in one place: from a step's rewards to each sample's advantage.

- ``group``: group-relative advantages (group std, batch std, none), masked for samples without
  a verdict, the zero-variance rule (``is_informative``, ``zero_std_fraction``) and KL-in-reward
  shaping, all in float64;
- ``kalman``: the running per-problem baseline (``algorithm.advantage.baseline = "kalman"``);
- ``dynamic``: which prompts a step samples, round by round: dynamic sampling (DAPO), which drops
  the groups the zero-variance rule calls uninformative and samples more prompts, and hot
  resampling of tied prompts (``algorithm.advantage.low_variance_temperature``);
- ``noise``: tie noise (``algorithm.advantage.tie_noise``), a heuristic for groups whose rewards
  agree;
- ``step``: one train step's advantages, the above in the order the driver applies them (KL in
  the reward, tie noise, baseline, ``reward_scale``).

The learner only consumes advantages (``algorithm/loss.py`` holds the loss).
"""

from algorithm.advantage.dynamic import Draw, GroupAccumulator, Sampled, sample_groups
from algorithm.advantage.group import (
    AdvantageScale,
    group_advantages,
    is_informative,
    kl_penalised_rewards,
    masked_group_advantages,
    zero_std_fraction,
)
from algorithm.advantage.kalman import (
    BaselineState,
    KalmanBaseline,
    kalman_advantages,
    kalman_update,
    running_baseline,
)
from algorithm.advantage.noise import tie_noise
from algorithm.advantage.step import kl_shaped_rewards, step_advantages

__all__ = [
    "AdvantageScale",
    "BaselineState",
    "Draw",
    "GroupAccumulator",
    "KalmanBaseline",
    "Sampled",
    "group_advantages",
    "is_informative",
    "kalman_advantages",
    "kalman_update",
    "kl_penalised_rewards",
    "kl_shaped_rewards",
    "masked_group_advantages",
    "running_baseline",
    "sample_groups",
    "step_advantages",
    "tie_noise",
    "zero_std_fraction",
]
