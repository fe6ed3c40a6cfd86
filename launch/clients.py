"""Typed clients for the actors the driver calls: one method per call it makes.

The driver never holds a bare Ray handle of the learner or the sandbox pool: each call is
spelled once here, with its argument and return types, and whether it blocks or hands back an
``ObjectRef`` (where the caller overlaps it with other work: the learner's update feeds the
engines' loads before the step's metrics are fetched; the sandbox runs groups while others are
still generating). The rollout engines have theirs in :class:`launch.rollout_fleet.RolloutFleet`,
which adds recovery. Clients are made by :mod:`launch.actors`, the one module that creates
actors.
"""

from __future__ import annotations

import logging
from typing import Any

from common.types import ExecutionJob, ExecutionResult, TrainSample

logger = logging.getLogger(__name__)

ObjectRef = Any  # ray.ObjectRef, kept out of the signatures so this module imports without Ray


class LearnerClient:
    """The learner actor (``learner.learner.Learner``)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def ready(self) -> ObjectRef:
        return self.handle.__ray_ready__.remote()

    def train_and_export(self, samples: list[TrainSample]) -> tuple[ObjectRef, ObjectRef]:
        """One training step and the new weights: refs of (metrics, ``WeightUpdate``)."""
        return self.handle.train_and_export.options(num_returns=2).remote(samples)

    def export_weights(self) -> ObjectRef:
        """A ref of the current weights' ``WeightUpdate``."""
        return self.handle.export_weights.remote()

    def score(self, samples: list[TrainSample]) -> ObjectRef:
        """A ref of the policy's logprobs of fixed completions (the parity probe)."""
        return self.handle.score.remote(samples)

    def sequence_kl(self, samples: list[TrainSample]) -> tuple[float, list[float]]:
        """The learner's current beta and each sample's KL to the reference (summed)."""
        import ray

        return ray.get(self.handle.sequence_kl.remote(samples))

    def set_compute_threads(self, threads: int) -> None:
        """Through the ``control`` concurrency group: reaches the learner while it trains."""
        import ray

        call = self.handle.set_compute_threads.options(concurrency_group="control")
        ray.get(call.remote(threads))

    def save_checkpoint(self, path: str) -> None:
        import ray

        ray.get(self.handle.save_checkpoint.remote(path))

    def load_training_state(self, path: str) -> None:
        import ray

        ray.get(self.handle.load_training_state.remote(path))

    def kill(self) -> None:
        import ray

        ray.kill(self.handle, no_restart=True)


class SandboxClient:
    """The sandbox pool actor (``sandbox.pool.SandboxPool``)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def ready(self) -> ObjectRef:
        return self.handle.__ray_ready__.remote()

    def run(self, jobs: list[ExecutionJob], stop_at_first_failure: bool) -> ObjectRef:
        """A ref of the jobs' results, in order."""
        return self.handle.run.remote(jobs, stop_at_first_failure=stop_at_first_failure)

    def execute(self, jobs: list[ExecutionJob]) -> list[ExecutionResult]:
        """Pass/fail only (stops at the first failing test): what evaluation needs."""
        import ray

        return ray.get(self.run(jobs, stop_at_first_failure=True))

    def stats(self) -> dict[str, float]:
        import ray

        return ray.get(self.handle.stats.remote())

    def describe(self) -> str:
        import ray

        return ray.get(self.handle.describe.remote())

    def close(self, timeout_s: float = 30) -> None:
        """Let the pool kill its workers and remove its directory, then end the actor."""
        import ray

        try:
            ray.get(self.handle.close.remote(), timeout=timeout_s)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            logger.warning("sandbox pool did not close cleanly: %s", exc)
        ray.kill(self.handle, no_restart=True)
