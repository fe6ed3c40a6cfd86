"""A running per-problem baseline: a 1-D Kalman filter over each problem's mean reward, across
steps (after KRPO, Wang et al. 2025, which filters within a group; docs/rewards.md, "Baselines").

Each time a problem's group of n scored rewards with mean y is scored at step t:

1. predict (the policy moved since the last visit, at step s):
   ``P = variance + process_noise * (t - s)``;
2. update: gain ``K = P / (P + reward_variance / n)``, ``mean += K * (y - mean)``,
   ``variance = (1 - K) * P``;
3. advantage ``A_i = r_i - mean``, divided by ``max(std(group), kalman.std_floor)`` when
   ``algorithm.advantage.scale = "group_std"``.

``None`` rewards are left out of the observation and keep ``None`` advantages; a group with no
scored completion is not an observation at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from common.config import AdvantageConfig, KalmanConfig


@dataclass(frozen=True)
class BaselineState:
    mean: float
    variance: float
    step: int  # when it was last updated


def kalman_update(
    state: BaselineState, observation: float, count: int, step: int, config: KalmanConfig
) -> BaselineState:
    """The state after observing a group mean ``observation`` of ``count`` rewards at ``step``."""
    prior = state.variance + config.process_noise * max(step - state.step, 0)
    noise = config.reward_variance / count
    gain = prior / (prior + noise)
    return BaselineState(
        mean=state.mean + gain * (observation - state.mean),
        variance=(1.0 - gain) * prior,
        step=step,
    )


def kalman_advantages(
    rewards: Sequence[float | None],
    group_size: int,
    keys: Sequence[Hashable],
    step: int,
    states: dict,
    config: KalmanConfig,
    scale: str = "none",
) -> tuple[list[float | None], dict]:
    """Advantages against each problem's updated estimate; returns them and the new states.

    ``rewards`` are grouped contiguously, ``keys[k]`` names the problem of group k (the same
    problem may appear twice in one batch: its groups update the state in order). ``states`` is
    not modified. ``scale = "group_std"`` divides by max(group std, ``config.std_floor``).
    """
    if len(rewards) != group_size * len(keys):
        raise ValueError(
            f"{len(rewards)} rewards for {len(keys)} groups of {group_size}: one key per group"
        )
    states = dict(states)
    advantages: list[float | None] = [None] * len(rewards)
    for k, key in enumerate(keys):
        span = range(k * group_size, (k + 1) * group_size)
        scored = [rewards[i] for i in span if rewards[i] is not None]
        if not scored:
            continue
        state = states.get(key) or BaselineState(config.initial_mean, config.initial_variance, step)
        state = kalman_update(state, statistics.fmean(scored), len(scored), step, config)
        states[key] = state
        divisor = 1.0
        if scale == "group_std":
            divisor = max(statistics.pstdev(scored), config.std_floor)
        for i in span:
            if rewards[i] is not None:
                advantages[i] = (rewards[i] - state.mean) / divisor
    return advantages, states


class KalmanBaseline:
    """The filter's states for a run, with ``state_dict`` for checkpoints (JSON-safe)."""

    def __init__(self, config: KalmanConfig, scale: str = "none") -> None:
        self.config = config
        self.scale = scale
        self.states: dict[int, BaselineState] = {}

    def advantages(
        self, rewards: Sequence[float | None], group_size: int, keys: Sequence[int], step: int
    ) -> list[float | None]:
        """Advantages for one batch; updates the states of the problems in it."""
        advantages, self.states = kalman_advantages(
            rewards, group_size, keys, step, self.states, self.config, self.scale
        )
        return advantages

    def stats(self) -> dict[str, float]:
        """How certain the baselines are: mean posterior std over the problems seen so far."""
        if not self.states:
            return {}
        stds = [s.variance**0.5 for s in self.states.values()]
        return {"baseline/problems": len(stds), "baseline/std_mean": statistics.fmean(stds)}

    def state_dict(self) -> dict:
        return {str(k): [s.mean, s.variance, s.step] for k, s in self.states.items()}

    def load_state_dict(self, state: dict) -> None:
        self.states = {int(k): BaselineState(m, v, int(t)) for k, (m, v, t) in state.items()}


def running_baseline(config: AdvantageConfig) -> KalmanBaseline | None:
    """The run's per-problem baseline (``baseline = "kalman"``), or None for GRPO's group mean."""
    return KalmanBaseline(config.kalman, config.scale) if config.baseline == "kalman" else None
