"""Inner optimisation epochs over one rollout batch (PPO's mu): splitting and metric averaging.

With ``ppo_epochs = mu`` and ``mini_batches = m`` one ``train_step`` takes mu * m optimiser
steps. pi_old (the learner's logprobs before the first update) and the reference logprobs are
computed once, without gradient, before the first epoch; every later step takes its ratio
against that same pi_old, which is what makes the clip meaningful from the second step on.
Each epoch visits every sample once, in a fresh order seeded by (seed, step, epoch), so runs are
reproducible. Each mini-batch is normalised by its own counts (it is its own optimiser step);
the Dr. GRPO length normaliser stays one constant for the whole batch.
"""

from __future__ import annotations

import random
from collections import defaultdict


def split_mini_batches(num_samples: int, mini_batches: int, seed: str) -> list[list[int]]:
    """A seeded shuffle of ``range(num_samples)`` dealt into ``mini_batches`` near-equal parts.

    More parts than samples would leave empty optimiser steps, so the count is capped.
    """
    if mini_batches < 1:
        raise ValueError(f"mini_batches ({mini_batches}) must be at least 1")
    order = list(range(num_samples))
    random.Random(seed).shuffle(order)
    parts = min(mini_batches, num_samples)
    return [sorted(order[k::parts]) for k in range(parts)]


class MetricMeans:
    """Running means of metric dicts (one dict per optimiser step)."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = defaultdict(float)
        self.count = 0

    def add(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._sums[key] += value
        self.count += 1

    def means(self) -> dict[str, float]:
        return {key: value / max(self.count, 1) for key, value in self._sums.items()}
