"""Dynamic sampling (DAPO, Yu et al. 2025): keep only groups that carry a learning signal.

A group whose rewards are all equal gets advantage 0 for every completion: it costs a rollout
and a backward pass and teaches nothing, and as the policy improves more and more groups are
all-correct, so the effective batch shrinks. Dynamic sampling drops those groups and samples
more prompts, round after round, until the batch holds ``target_groups`` informative groups or
``max_rounds`` rounds have run (then the batch is trained on as it is, smaller: an easy or hard
plateau must not stall training forever).

Pure logic, no Ray and no torch: the driver passes a function that samples and scores a given
number of groups; tests pass a fake. Given a deterministic sampler the result is deterministic:
groups are accepted in the order they are returned, and the surplus of the last round (more
informative groups than still needed) is discarded from its end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from algorithm.advantage.group import is_informative

Group = TypeVar("Group")


@dataclass
class GroupAccumulator:
    """Accepts groups round by round until ``target_groups`` informative ones are kept."""

    target_groups: int
    max_rounds: int
    rounds: int = 0
    dropped_groups: int = 0
    surplus_groups: int = 0
    kept: list[tuple[int, int]] = field(default_factory=list)  # (round, index in that round)

    def __post_init__(self) -> None:
        if self.target_groups < 1:
            raise ValueError(f"target_groups ({self.target_groups}) must be at least 1")
        if self.max_rounds < 1:
            raise ValueError(
                f"max_sampling_rounds ({self.max_rounds}) must be at least 1: the first round is "
                "the ordinary rollout"
            )

    @property
    def needed(self) -> int:
        """Informative groups still missing from the batch."""
        return max(self.target_groups - len(self.kept), 0)

    @property
    def done(self) -> bool:
        """Full, or out of rounds."""
        return self.needed == 0 or self.rounds >= self.max_rounds

    def add_round(self, group_rewards: Sequence[Sequence[float | None]]) -> list[int]:
        """Record one round's groups; return the indices (within the round) that are kept."""
        if self.done:
            raise RuntimeError("add_round after the accumulator is done (full or out of rounds)")
        accepted: list[int] = []
        for index, rewards in enumerate(group_rewards):
            if not is_informative(rewards):
                self.dropped_groups += 1
            elif len(accepted) < self.needed:
                accepted.append(index)
            else:
                self.surplus_groups += 1
        self.kept.extend((self.rounds, index) for index in accepted)
        self.rounds += 1
        return accepted

    def metrics(self) -> dict[str, float]:
        """``train/*`` statistics of this batch's sampling."""
        return {
            "train/dropped_groups": float(self.dropped_groups),
            "train/sampling_rounds": float(self.rounds),
            "train/kept_groups": float(len(self.kept)),
            "train/surplus_groups": float(self.surplus_groups),
        }


def dynamic_sample(
    sample_round: Callable[[int, int], Sequence[Group]],
    rewards_of: Callable[[Group], Sequence[float | None]],
    target_groups: int,
    max_rounds: int,
    oversample: float = 1.0,
) -> tuple[list[Group], dict[str, float]]:
    """Sample rounds until ``target_groups`` informative groups are kept (or rounds run out).

    ``sample_round(round_index, num_groups)`` samples and scores ``num_groups`` new prompts'
    groups (round 0 is the ordinary rollout of ``target_groups``). Later rounds ask for
    ``ceil(needed * oversample)`` groups: oversampling > 1 trades rollout work for fewer rounds
    when many groups are uniform. Returns the kept groups in acceptance order and the metrics.
    """
    if oversample < 1.0:
        raise ValueError(f"oversample ({oversample}) must be >= 1: fewer groups than needed")
    accumulator = GroupAccumulator(target_groups, max_rounds)
    kept: list[Group] = []
    while not accumulator.done:
        wanted = target_groups if accumulator.rounds == 0 else accumulator.needed
        if accumulator.rounds > 0:
            wanted = math.ceil(wanted * oversample)
        groups = list(sample_round(accumulator.rounds, wanted))
        accepted = accumulator.add_round([rewards_of(g) for g in groups])
        kept.extend(groups[i] for i in accepted)
    return kept, accumulator.metrics()
