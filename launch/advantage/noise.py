"""Tie noise: a heuristic from the users' DGRO script for groups whose rewards all agree.

A group whose G rewards are equal (all pass, all fail) gives GRPO no gradient: its advantages
are 0. With ``advantage.tie_noise = sigma`` every scored reward of such a group (population std
at most ``advantage.tie_noise_below``) gets independent N(0, sigma^2) noise before advantages
are computed. The noise is zero-mean, so it adds no reward in expectation, but after group
normalisation the tied group's completions get advantages of either sign: the policy is pushed
toward some of its own samples and away from others, an exploration kick rather than a learning
signal. It is a heuristic: it adds variance to the gradient, and the right sigma is small next
to the reward scale. Off by default; the noise is seeded by the run's seed and the step, so a
run is reproducible.
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
) -> tuple[list[float | None], int]:
    """``rewards`` with noise on the groups at most ``below`` apart (module docstring), and how
    many groups got it. ``None`` rewards (no verdict) stay ``None`` and out of the std; a group
    with fewer than two scored rewards has no baseline and is left alone."""
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    generator = random.Random(seed)
    noisy = list(rewards)
    touched = 0
    for start in range(0, len(rewards), group_size):
        scored = [i for i in range(start, start + group_size) if rewards[i] is not None]
        values = [rewards[i] for i in scored]
        if len(values) < 2 or statistics.pstdev(values) > below:
            continue
        touched += 1
        for i in scored:
            noisy[i] = rewards[i] + generator.gauss(0.0, sigma)
    return noisy, touched
