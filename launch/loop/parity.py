"""The parity probe: after every push, do the engines serve exactly the learner's weights?

``train/logprob_diff_mean`` compares the sampler's logprobs with the learner's before the update,
so in async mode it includes the policy's drift over the versions the samples are behind; it
cannot tell a broken push from staleness. The probe can: a few fixed prompt + completion
sequences (the first completions of the run's first batch, kept for the whole run) are scored
by the learner and by every engine after the push, both at the version just pushed and at
temperature 1 (vLLM's prompt logprobs are raw). ``weights/parity_probe_diff`` is the largest
mean |Δ logprob| over the engines: the numerics of a bf16 engine against an fp32 learner when
the push worked, the step's whole policy change when it did not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from common.types import Completion, TrainSample

if TYPE_CHECKING:
    from launch.fleet.clients import LearnerClient
    from launch.fleet.rollout_fleet import RolloutFleet

logger = logging.getLogger(__name__)


def mean_abs_diff(a: list[list[float]], b: list[list[float]]) -> float:
    """Mean |a - b| over every token of every sequence (the sequences pair up)."""
    diffs = [
        abs(x - y)
        for row_a, row_b in zip(a, b, strict=True)
        for x, y in zip(row_a, row_b, strict=True)
    ]
    return sum(diffs) / max(len(diffs), 1)


@dataclass
class PendingProbe:
    """The scoring calls queued for one measurement (Ray object refs)."""

    learner: Any
    engines: dict[int, Any]
    client: LearnerClient  # fetches the learner's answer, checking every rank


class ParityProbe:
    """Chooses the probe once and measures it after each push (see the module docstring)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.samples: list[TrainSample] = []

    def choose(self, completions: list[Completion]) -> None:
        """Keep the first ``size`` non-empty completions as the probe, unless one is kept."""
        if self.samples or not self.size:
            return
        chosen = [c for c in completions if c.token_ids][: self.size]
        self.samples = [TrainSample.of(c, raw=True) for c in chosen]

    def start(self, learner: LearnerClient, rollout: RolloutFleet) -> PendingProbe | None:
        """Queue the probe on the learner and on every engine, behind the push just queued
        (each actor runs its calls in the order this thread submitted them)."""
        if not self.samples:
            return None
        engines = rollout.start_score(self.samples)
        return PendingProbe(learner.score(self.samples), engines, learner)

    def finish(self, pending: PendingProbe | None, version: int) -> dict[str, float]:
        """``weights/parity_probe_diff``: the largest gap over the engines that answered."""
        if pending is None:
            return {}
        reference = pending.client.get(pending.learner)
        gaps = []
        for index, (engine_version, logprobs) in _answers(pending):
            if engine_version != version:
                logger.warning(
                    "parity probe: rollout actor %d serves weight version %d, the fleet pushed %d",
                    index,
                    engine_version,
                    version,
                )
            gaps.append(mean_abs_diff(logprobs, reference))
        return {"weights/parity_probe_diff": max(gaps)} if gaps else {}


def _answers(pending: PendingProbe) -> list[tuple[int, tuple[int, list[list[float]]]]]:
    """Each engine's answer, skipping one that died meanwhile (the fleet recovers it on its
    next call; its probe is measured again after the next push)."""
    answers = []
    for index, ref in pending.engines.items():
        try:
            answers.append((index, ray.get(ref)))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            logger.warning("parity probe: rollout actor %d did not answer (%s)", index, exc)
    return answers
