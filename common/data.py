"""Where training problems come from, and the order they are drawn in.

The sampler is a pure function of (seed, position): a resumed run that restores the position
sees exactly the prompts an uninterrupted run would have seen.
"""

from __future__ import annotations

import random

from common.config import DataConfig
from common.tasks import synthetic_problems
from common.types import Problem


def load_problems(config: DataConfig) -> list[Problem]:
    """The problems named by ``data.source``."""
    if config.source == "synthetic":
        problems = synthetic_problems()
    else:
        raise ValueError(f"data.source {config.source!r} is not available yet; use 'synthetic'")
    if config.max_problems:
        problems = problems[: config.max_problems]
    return problems


class PromptSampler:
    """Draws problems epoch by epoch, each epoch a fresh permutation seeded by (seed, epoch)."""

    def __init__(self, num_problems: int, seed: int, position: int = 0) -> None:
        self.num_problems = num_problems
        self.seed = seed
        self.position = position

    def _order(self, epoch: int) -> list[int]:
        order = list(range(self.num_problems))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    def next_indices(self, count: int) -> list[int]:
        """The next ``count`` problem indices; advances the position."""
        indices = []
        for pos in range(self.position, self.position + count):
            epoch, offset = divmod(pos, self.num_problems)
            indices.append(self._order(epoch)[offset])
        self.position += count
        return indices
