"""Typed clients for the actors the driver calls: one method per call it makes.

The driver never holds a bare Ray handle of the learner or the sandbox pool: each call is
spelled once here, with its types, and whether it blocks or hands back an ``ObjectRef`` (where
the caller overlaps it with other work). The rollout engines have theirs in
:class:`launch.fleet.rollout_fleet.RolloutFleet`, which adds recovery.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from common.types import ExecutionJob, ExecutionResult, TrainSample
from sandbox.trusted.shared_tests import SpecRefs

logger = logging.getLogger(__name__)

ObjectRef = Any  # ray.ObjectRef, kept out of the signatures so this module imports without Ray


class LearnerClient:
    """The learner's ranks (``learner.learner.Learner``, ``learner.num_ranks`` actors).

    Every call goes to every rank, in the same order: the ranks of a sharded learner step
    together and meet in collectives, so each needs every call. Rank 0's answer is the
    learner's (metrics are already summed over the ranks; only rank 0 sends weights). The
    other ranks' answers are only checked: a rank that failed fails the call at once, even
    while rank 0 still waits for it in a collective.
    """

    def __init__(self, handles: list[Any], store: Any = None) -> None:
        self.handles = handles
        # The ranks' group store (common.rendezvous.GroupStore) this process serves, kept as
        # long as the ranks are: they meet there again after forming (NCCL exchanges a
        # communicator's id there when it is first used).
        self.store = store
        self._followers: list[ObjectRef] = []  # the other ranks' pending calls

    @property
    def handle(self) -> Any:
        """Rank 0's actor handle."""
        return self.handles[0]

    def _fan_out(self, method: str, *args: Any, **options: Any) -> list[Any]:
        calls = [getattr(h, method).options(**options).remote(*args) for h in self.handles]
        for follower in calls[1:]:
            self._followers.extend(follower if isinstance(follower, list) else [follower])
        return calls

    def get(self, ref: ObjectRef) -> Any:
        """The value of a ref this client handed out (metrics, a score): ``ray.get(ref)``,
        raising at once when any rank's pending call failed.

        When one rank dies mid-step, the others' collectives fail too, and their error may
        arrive first: a failure is reported as the dead rank's ``RayActorError`` when a rank
        is dead (what a learner restart answers), else as it came.
        """
        remaining = list(dict.fromkeys([ref, *self._followers]))
        try:
            while ref in remaining:
                ready, remaining = ray.wait(remaining, num_returns=1)
                ray.get(ready)
            self._followers = remaining
            return ray.get(ref)
        except ray.exceptions.RayError as error:
            self._followers = []
            raise self._dead_rank_error() or error from error

    def _dead_rank_error(self, timeout_s: float = 30) -> Exception | None:
        """The ``RayActorError`` of a rank that is dead, if one is."""
        for handle in self.handles:
            try:
                ray.get(handle.__ray_ready__.remote(), timeout=timeout_s)
            except ray.exceptions.RayActorError as dead:
                return dead
            except ray.exceptions.GetTimeoutError:
                continue  # alive, busy: still inside the failed collective
        return None

    def ready(self) -> list[ObjectRef]:
        return [handle.__ray_ready__.remote() for handle in self.handles]

    def train_and_export(self, samples: list[TrainSample]) -> tuple[ObjectRef, ObjectRef]:
        """One training step and the new weights: refs of (metrics, ``WeightUpdate``); fetch
        the metrics with :meth:`get`."""
        return self._fan_out("train_and_export", samples, num_returns=2)[0]

    def export_weights(self) -> ObjectRef:
        """A ref of the current weights' ``WeightUpdate``."""
        return self._fan_out("export_weights")[0]

    def join_transfer(self, backend: str, address: str, world_size: int) -> list[ObjectRef]:
        """Every rank's entry into the ``collective`` transport's group (refs: each blocks
        until the engines join too)."""
        return self._fan_out("join_transfer", backend, address, world_size)

    def transmit(self) -> list[ObjectRef]:
        """Every rank's broadcast of the current weights (``collective`` transport)."""
        return self._fan_out("transmit")

    def score(self, samples: list[TrainSample]) -> ObjectRef:
        """A ref of the policy's logprobs of fixed completions (the parity probe)."""
        return self._fan_out("score", samples)[0]

    def sequence_kl(self, samples: list[TrainSample]) -> tuple[float, list[float]]:
        """The learner's current beta and each sample's KL to the reference (summed)."""
        return self.get(self._fan_out("sequence_kl", samples)[0])

    def set_compute_threads(self, threads: int) -> None:
        """Through the ``control`` concurrency group: reaches the learner while it trains."""
        calls = [
            h.set_compute_threads.options(concurrency_group="control").remote(threads)
            for h in self.handles
        ]
        ray.get(calls)

    def offload_optimizer(self) -> float:
        """Every rank's optimiser state to host memory; the slowest rank's seconds."""
        return max(self.get(call) for call in self._fan_out("offload_optimizer"))

    def reload_optimizer(self) -> float:
        """Every rank's optimiser state back on its device; the slowest rank's seconds."""
        return max(self.get(call) for call in self._fan_out("reload_optimizer"))

    def release_memory(self) -> float:
        """Every rank's cached device memory back to the driver; the slowest rank's seconds."""
        return max(self.get(call) for call in self._fan_out("release_memory"))

    def save_checkpoint(self, path: str) -> list[dict]:
        """Every rank writes its part (rank 0 the weights, each its optimiser shard) on its
        host; what each wrote there, and on which node, by rank."""
        return [self.get(call) for call in self._fan_out("save_checkpoint", path)]

    def discard(self, path: str, ranks: list[int]) -> None:
        """Ranks ``ranks`` delete their host's copy of checkpoint ``path`` (the driver has
        its own)."""
        for rank in ranks:
            self.get(self.handles[rank].discard.remote(path))

    def kill(self) -> None:
        for handle in self.handles:
            ray.kill(handle, no_restart=True)


class SandboxClient:
    """The sandbox pool actor (``sandbox.trusted.pool.SandboxPool``)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._refs = SpecRefs(ray.put)
        self.pool_restarts = 0  # since the job started: a pool reports its own restart once

    def ready(self) -> ObjectRef:
        return self.handle.__ray_ready__.remote()

    def run(self, jobs: list[ExecutionJob], stop_at_first_failure: bool) -> ObjectRef:
        """A ref of the jobs' results, in order. Whole programs' tests go by reference: each
        problem's once per run to the pool's node (``sandbox/trusted/shared_tests.py``)."""
        if all(job.stdio is None for job in jobs):
            return self.handle.run.remote(jobs, stop_at_first_failure=stop_at_first_failure)
        bare, refs = self._refs.split(jobs)
        return self.handle.run.remote(
            bare, stop_at_first_failure=stop_at_first_failure, stdio_refs=refs
        )

    def execute(self, jobs: list[ExecutionJob]) -> list[ExecutionResult]:
        """Every test of every job: what evaluation needs (pass@k per test group)."""
        return ray.get(self.run(jobs, stop_at_first_failure=False))

    def stats(self) -> dict[str, float]:
        """The pool's counters since the last call, ``sandbox/pool_restarts`` since the job
        started: kept here, a restart counted in a step that is then redone (after a learner
        restart) is not lost with that step's record."""
        out = ray.get(self.handle.stats.remote())
        self.pool_restarts += int(out.get("sandbox/pool_restarts", 0))
        return {**out, "sandbox/pool_restarts": float(self.pool_restarts)}

    def describe(self) -> str:
        return ray.get(self.handle.describe.remote())

    def close(self, timeout_s: float = 30) -> None:
        """Let the pool kill its workers and remove its directory, then end the actor."""
        try:
            ray.get(self.handle.close.remote(), timeout=timeout_s)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            logger.warning("sandbox pool did not close cleanly: %s", exc)
        ray.kill(self.handle, no_restart=True)
