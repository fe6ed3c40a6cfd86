"""Tie noise (``algorithm.advantage.tie_noise``): a heuristic from the users' DGRO script for groups
whose rewards all agree, which give GRPO no gradient.

Every scored reward of such a group (population std of its *raw* rewards at most
``tie_noise_below``: a KL charged in the reward does not hide a tie) gets independent
N(0, sigma^2) noise before advantages are computed: zero-mean, so no reward in expectation, but
an exploration kick of either sign. With ``scale = "group_std"`` the noised group's advantages
are of size 1 whatever sigma is. The noise is seeded by the run's seed and the step.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence


def tie_noise(
    rewards: Sequence[float | None],
    group_size: int,
    sigma: float,
    below: float,
    seed: str,
    raw: Sequence[float | None] | None = None,
) -> tuple[list[float | None], int]:
    """``rewards`` with noise on the groups at most ``below`` apart (module docstring), and how
    many groups got it; ties are judged on ``raw`` (the rewards before shaping) when given.
    ``None`` rewards (no verdict) stay ``None`` and out of the std; a group with fewer than two
    scored rewards has no baseline and is left alone."""
    judged = rewards if raw is None else raw
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    generator = random.Random(seed)
    noisy = list(rewards)
    touched = 0
    for start in range(0, len(rewards), group_size):
        scored = [i for i in range(start, start + group_size) if rewards[i] is not None]
        values = [judged[i] for i in scored]
        if len(values) < 2 or statistics.pstdev(values) > below:
            continue
        touched += 1
        for i in scored:
            noisy[i] = rewards[i] + generator.gauss(0.0, sigma)
    return noisy, touched
