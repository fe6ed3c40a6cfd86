"""The rollout fleet: N vLLM actors that can die, restart, grow and shrink during a run.

Guarantees the driver relies on:

- every request of a step gets its completions, or the step fails loudly: a share whose actor
  died is retried on the restarted actor (Ray ``max_restarts``) or on a live one, never dropped;
- an actor never serves with stale weights: a restarted or newly added actor first receives the
  latest weight update (its engine starts from the base model, weight version 0);
- every fault is logged and counted (``faults/rollout_restarts``, ``faults/rollout_retries``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from common.config import Config
from common.types import Completion, RolloutRequest

logger = logging.getLogger(__name__)

_RETRIES = 3


class RolloutFleet:
    """Owns the rollout actors of a run (see the module docstring)."""

    def __init__(self, config: Config, model_path: str, run_id: str, placement=None) -> None:
        self.config = config
        self.placement = placement
        self.model_path = model_path
        self.run_id = run_id
        self.actors: list[Any] = []
        self.latest_update: Any = None  # ObjectRef of the last WeightUpdate pushed
        self.counters = {"faults/rollout_restarts": 0, "faults/rollout_retries": 0}
        self._next_index = 0

    # -- membership -------------------------------------------------------------------------
    def _spawn(self) -> Any:
        import ray

        from actor.rollout_worker import RolloutWorker
        from launch.cluster import actor_options

        index = self._next_index
        self._next_index += 1
        rollout = self.config.rollout
        options = actor_options(
            f"rollout-{self.run_id}-{index}", rollout.num_cpus, rollout.num_gpus, self.placement
        )
        cls = ray.remote(max_restarts=-1, max_task_retries=0)(RolloutWorker)
        return cls.options(**options).remote(
            self.model_path,
            rollout,
            self.config.model,
            seed=self.config.run.seed,
            worker_index=index,
        )

    def start(self, count: int) -> None:
        """Start ``count`` actors and wait until their engines are up."""
        self.resize(count)

    def resize(self, count: int) -> None:
        """Grow or shrink to ``count`` actors; new ones get the latest weights before serving."""
        import ray

        if count < 1:
            raise ValueError(f"the rollout fleet needs at least one actor, got {count}")
        if count == len(self.actors):
            return
        if count < len(self.actors):
            for actor in self.actors[count:]:
                ray.kill(actor, no_restart=True)
            self.actors = self.actors[:count]
        else:
            new = [self._spawn() for _ in range(count - len(self.actors))]
            ray.get([actor.ready.remote() for actor in new])
            if self.latest_update is not None:
                ray.get([actor.update_weights.remote(self.latest_update) for actor in new])
            self.actors.extend(new)
        logger.info("rollout fleet resized to %d actor(s)", count)

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []

    # -- work ---------------------------------------------------------------------------------
    def push(self, update_ref: Any) -> None:
        """Load a weight update into every actor (one object in the store, read by all)."""
        import ray

        self.latest_update = update_ref
        pending = {
            i: actor.update_weights.remote(update_ref) for i, actor in enumerate(self.actors)
        }
        for index, ref in pending.items():
            try:
                ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self._recover(index)  # the restarted actor receives latest_update there

    def generate(self, requests: list[RolloutRequest]) -> list[Completion]:
        """Split requests across actors; a failed share is retried after recovery."""
        import ray

        shares = [requests[i :: len(self.actors)] for i in range(len(self.actors))]
        completions: list[Completion] = []
        for index, share in enumerate(shares):
            if share:
                completions.extend(self._generate_share(index, share, ray))
        return completions

    def _generate_share(self, index: int, share: list[RolloutRequest], ray) -> list[Completion]:
        for attempt in range(_RETRIES + 1):
            actor = self.actors[index % len(self.actors)]
            try:
                return ray.get(actor.generate.remote(share))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                if attempt == _RETRIES:
                    raise RuntimeError(
                        f"rollout actor {index} failed {attempt + 1} times: {exc}"
                    ) from exc
                logger.warning(
                    "rollout actor %d failed (%s); recovering", index, type(exc).__name__
                )
                self.counters["faults/rollout_retries"] += 1
                self._recover(index % len(self.actors))
        raise AssertionError("unreachable")

    def _recover(self, index: int) -> None:
        """Wait for Ray to restart actor ``index`` and give it the current weights."""
        import ray

        actor = self.actors[index]
        deadline = time.monotonic() + 600
        while True:
            try:
                version = ray.get(actor.ready.remote(), timeout=60)
                break
            except (
                ray.exceptions.RayActorError,
                ray.exceptions.ActorUnavailableError,
                ray.exceptions.GetTimeoutError,
            ) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rollout actor {index} did not come back") from exc
                time.sleep(1.0)
        self.counters["faults/rollout_restarts"] += 1
        if self.latest_update is not None:
            ray.get(actor.update_weights.remote(self.latest_update))
        logger.warning(
            "rollout actor %d restarted (engine at version %d), weights reloaded", index, version
        )
