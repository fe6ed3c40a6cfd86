"""Inner optimisation epochs over one rollout batch (PPO's mu): splitting and metric averaging.

Every optimiser step takes its ratio against the same pi_old, computed once before the first
epoch, which is what makes the clip meaningful from the second step on. Each epoch visits every
sample once, in a fresh order seeded by (seed, step, epoch), so runs are reproducible. Each
mini-batch is normalised by its own counts (it is its own optimiser step); the Dr. GRPO length
normaliser stays one constant for the whole batch.
"""

from __future__ import annotations

import random
from collections import defaultdict

from torch import Tensor

from learner.batching import MicroBatch
from learner.sharding import Ranks

#: Loss metrics averaged over the step's completion tokens (each micro-batch by its share).
_AVERAGED = ("kl", "clip_frac", "ratio_mean", "entropy", "tis_weight_mean", "tis_clip_frac")


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


class MicroBatchSums:
    """One optimiser step's metrics, accumulated micro-batch by micro-batch.

    The loss is already normalised by the whole step's counts, so it is summed; the other loss
    metrics are per-token means, weighted by each micro-batch's share of the step's completion
    tokens. With several ranks :meth:`metrics` adds up their sums (a collective).
    """

    def __init__(self, total_tokens: int, num_samples: int) -> None:
        self.total_tokens, self.num_samples = total_tokens, num_samples
        self._sums = dict.fromkeys(
            ("loss", *_AVERAGED, "abs_diff", "threads", "micro_batches"), 0.0
        )

    def add(self, batch: MicroBatch, metrics: dict[str, float], old: Tensor, threads: int) -> None:
        """One micro-batch: ``grpo_loss``'s metrics and pi_old's logprobs (B, T)."""
        sums = self._sums
        sums["threads"] += threads
        sums["micro_batches"] += 1
        share = batch.num_completion_tokens / self.total_tokens
        sums["loss"] += metrics["loss"]
        for key in _AVERAGED:
            sums[key] += metrics.get(key, 0.0) * share
        diff = (old - batch.sampler_logprobs).abs() * batch.completion_mask
        sums["abs_diff"] += diff.sum().item()

    def metrics(self, ranks: Ranks, tis: bool) -> dict[str, float]:
        """The step's ``train/*`` dict, summed over ``ranks``; TIS metrics only when ``tis``."""
        sums = ranks.sum(dict(self._sums))  # a copy: one rank's sum is its own dict
        abs_diff, threads = sums.pop("abs_diff"), sums.pop("threads")
        micro_batches = sums.pop("micro_batches")
        if not tis:
            del sums["tis_weight_mean"], sums["tis_clip_frac"]
        return {
            **{f"train/{k}": v for k, v in sums.items()},
            "train/logprob_diff_mean": abs_diff / self.total_tokens,
            "train/num_tokens": float(self.total_tokens),
            "train/num_samples": float(self.num_samples),
            "train/compute_threads_mean": threads / micro_batches,
            "train/micro_batches": float(micro_batches),
        }
