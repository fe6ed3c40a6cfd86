"""The learning rate of every optimiser step: warmup, then constant, linear or cosine decay.

Counted in optimiser steps, so the schedule means the same whatever the epochs, and a pure
function of the step, so there is no scheduler state to keep in sync with the optimiser's (the
learner saves the count in its checkpoints). Warmup is linear from ``lr / warmup`` at the first
step (which already learns) to ``lr`` at step ``warmup``; decay then runs to ``min_lr`` at the
last step and stays there.
"""

from __future__ import annotations

import math
from typing import Literal

Schedule = Literal["constant", "linear", "cosine"]


def learning_rate(
    step: int,
    lr: float,
    schedule: Schedule = "constant",
    warmup: int = 0,
    total: int = 0,
    min_lr: float = 0.0,
) -> float:
    """The learning rate of optimiser step ``step`` (0-based) of ``total``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    if total <= warmup:
        raise ValueError(
            f"a {schedule} schedule needs more optimiser steps ({total}) than warmup ({warmup})"
        )
    progress = min(1.0, (step - warmup) / max(1, total - warmup - 1))
    if schedule == "linear":
        decay = 1.0 - progress
    elif schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown lr_schedule {schedule!r}; use constant, linear or cosine")
    return min_lr + (lr - min_lr) * decay
