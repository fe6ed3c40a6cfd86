"""Which groups an asynchronous step trains on (``async.max_staleness``).

With ``async.max_staleness = K`` a group more than K weight versions behind the learner is
dropped, and counted; what is kept is off-policy by at most K versions, which the loss's TIS
weight corrects. A group's version is its oldest completion's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Versioned(Protocol):
    @property
    def weight_version(self) -> int: ...  # of the engine that generated it


class Generated(Protocol):
    @property
    def completions(self) -> Sequence[Versioned]: ...


Group = TypeVar("Group", bound=Generated)


def group_version(group: Generated) -> int:
    """The oldest weight version among a group's completions."""
    return min(c.weight_version for c in group.completions)


def split_stale(
    groups: Sequence[Group], learner_version: int, max_staleness: int
) -> tuple[list[Group], list[Group]]:
    """(kept, dropped): a group is dropped when the learner is more than ``max_staleness``
    weight versions ahead of the engine that generated it."""
    kept: list[Group] = []
    dropped: list[Group] = []
    for group in groups:
        stale = learner_version - group_version(group) > max_staleness
        (dropped if stale else kept).append(group)
    return kept, dropped


def staleness_metrics(
    kept: Sequence[Generated], dropped: Sequence[Generated], learner_version: int
) -> dict[str, float]:
    """``async/*``: how far behind the learner the trained samples were, and what was dropped."""
    ages = [learner_version - c.weight_version for g in kept for c in g.completions]
    return {
        "async/staleness_mean": sum(ages) / len(ages) if ages else 0.0,
        "async/staleness_max": float(max(ages, default=0)),
        "async/dropped_samples": float(sum(len(g.completions) for g in dropped)),
        "async/dropped_groups": float(len(dropped)),
    }
