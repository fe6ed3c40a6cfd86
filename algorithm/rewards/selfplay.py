"""The self-play saboteur's reward (``selfplay.saboteur``): how hard its bug was for the fixers.

``launch.selfplay.saboteur`` poses the prompts and the sandbox judges each bug; this module turns
those verdicts into rewards. A saboteur sample earns its bug's *hardness*, ``1 - solve rate`` of
the fixer group the bug was posed to, and 0 for an invalid bug. Where nothing is known it earns
no reward (masked, not trained on), never 0: the sandbox broke while judging the bug, or a valid
bug got no fixer group (beyond ``selfplay.bugs_per_group``). A fixer's reward is its execution
reward, as any solver's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class JudgedBug(Protocol):
    """What the reward reads of a bug's check (``launch.selfplay.repairs.BugCheck``)."""

    @property
    def status(self) -> str: ...  # "valid", "infra_error" (nothing known) or why it is no bug

    @property
    def valid(self) -> bool: ...


def bug_hardness(passed: Sequence[bool]) -> float | None:
    """``1 - solve rate`` of a fixer group, ``passed`` one per sample the sandbox gave a verdict;
    None without any verdict (the difficulty was not measured)."""
    return 1.0 - sum(passed) / len(passed) if passed else None


def saboteur_rewards(
    checks: Sequence[JudgedBug], keys: Sequence[str | None], hardness: Mapping[str, float]
) -> list[float | None]:
    """Each saboteur sample's reward: 0 for an invalid bug, ``hardness`` of its bug (by its key,
    ``keys``) when a fixer group measured it, else None (masked). A bug without a key (one no
    fixer can be shown) is no valid bug: 0."""
    rewards: list[float | None] = []
    for check, key in zip(checks, keys, strict=True):
        if check.status == "infra_error":
            rewards.append(None)  # the sandbox broke: nothing is known about the bug
        elif not check.valid:
            rewards.append(0.0)
        else:
            rewards.append(hardness.get(key) if key is not None else 0.0)
    return rewards
