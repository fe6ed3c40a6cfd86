"""Which prompts a step samples: dynamic sampling (DAPO, Yu et al. 2025) and hot resampling.

Dynamic sampling (``algorithm.advantage.dynamic_sampling``) drops the groups whose rewards all tie
(they teach nothing) and samples more prompts, round after round, until the batch holds
``target_groups`` informative groups or ``max_sampling_rounds`` rounds have run (then the batch
is trained on as it is, smaller: a plateau must not stall training). Without it a step is one
round, every group kept.

Hot resampling (``low_variance_temperature``, a heuristic from the users' DGRO script): a later
round first samples the previous round's tied prompts again at that temperature, each prompt at
most once per step so prompts that always tie cannot crowd new ones out, then new prompts.

Pure logic, no Ray and no torch: :func:`sample_groups` asks a sampler for each round's groups and
a draw function for new prompts. Given a deterministic sampler the result is deterministic: the
surplus of the last round is discarded from its end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from algorithm.advantage.group import is_informative
from common.config import AdvantageConfig


class Scored(Protocol):
    """What the policy reads of a group: its prompt (an index into the training set) and its
    completions' rewards."""

    @property
    def index(self) -> int: ...

    @property
    def rewards(self) -> Sequence[float | None]: ...


Group = TypeVar("Group", bound=Scored)


@dataclass(frozen=True)
class Draw:
    """One call of the sampler: G completions for each prompt of ``indices`` in round ``round``
    (0: the ordinary rollout), at ``temperature`` (set: tied prompts sampled again hotter;
    None: the run's ``rollout.temperature``)."""

    round: int
    indices: list[int]
    temperature: float | None = None


@dataclass
class Sampled(Generic[Group]):
    """A step's groups: ``groups`` to train on, ``sampled`` every group of every round (those
    dynamic sampling dropped included: they were scored), and the sampling's metrics."""

    groups: list[Group]
    sampled: list[Group]
    metrics: dict[str, float]


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


def sample_groups(
    sample: Callable[[Draw], list[Group]],
    draw: Callable[[int], list[int]],
    target_groups: int,
    config: AdvantageConfig,
    oversample: float = 1.0,
) -> Sampled[Group]:
    """The step's groups, sampled round by round as the module docstring says.

    ``sample(draw)`` generates, executes and rewards G completions for each prompt of ``draw``
    and returns their groups in prompt order; ``draw(count)`` picks ``count`` new prompts (the
    curriculum's sampler). Round 0 asks for ``target_groups`` prompts, a later round for
    ``ceil(needed * oversample)``: oversampling > 1 trades rollout work for fewer rounds when
    many groups tie.
    """
    if oversample < 1.0:
        raise ValueError(f"oversample ({oversample}) must be >= 1: fewer groups than needed")
    if not config.dynamic_sampling:
        groups = _sample_round(sample, draw, Draw(0, []), target_groups)
        return Sampled(groups, list(groups), {})
    hot = config.low_variance_temperature
    accumulator = GroupAccumulator(target_groups, config.max_sampling_rounds)
    kept: list[Group] = []
    sampled: list[Group] = []
    previous: list[Group] = []  # the last round's groups
    resampled: list[int] = []  # prompts sampled again hot this step
    while not accumulator.done:
        round_index = accumulator.rounds
        wanted = target_groups
        if round_index:
            wanted = math.ceil(accumulator.needed * oversample)
        again = _tied_prompts(previous, resampled, wanted) if hot and round_index else []
        resampled.extend(again)
        previous = _sample_round(sample, draw, Draw(round_index, again, hot or None), wanted)
        sampled.extend(previous)
        accepted = accumulator.add_round([group.rewards for group in previous])
        kept.extend(previous[i] for i in accepted)
    metrics = accumulator.metrics()
    if hot:
        metrics["advantage/resampled_groups"] = float(len(resampled))
    return Sampled(kept, sampled, metrics)


def _tied_prompts(previous: list[Group], resampled: list[int], count: int) -> list[int]:
    """Up to ``count`` prompts of ``previous``'s tied groups, in order, but none sampled again
    hot already this step (``resampled``)."""
    tied = [group.index for group in previous if not is_informative(group.rewards)]
    return [index for index in tied if index not in resampled][:count]


def _sample_round(
    sample: Callable[[Draw], list[Group]],
    draw: Callable[[int], list[int]],
    again: Draw,
    wanted: int,
) -> list[Group]:
    """One round's ``wanted`` groups: the prompts ``again`` names first (sampled again hot),
    then new prompts for the rest at the run's temperature."""
    groups = list(sample(again)) if again.indices else []
    if wanted > len(again.indices):
        groups += sample(Draw(again.round, draw(wanted - len(again.indices))))
    return groups
