"""Connecting to Ray and placing the actors.

The actor classes are plain Python classes; this is the one place they become Ray actors, with
resources taken from config (``ray.remote(**resources)(RolloutWorker)``), so the same classes run
in unit tests without Ray and on a GPU cluster with ``num_gpus=1``. Actors get readable names
(``learner-<run>``, ``rollout-<run>-<i>``, ``sandbox-<run>``) for the dashboard.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.config import Config, RayConfig

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ACTOR_ENV = {
    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_CONFIGURE_LOGGING": "0",
}

#: For the stateless services, the sandbox pool and the reward scorers: Ray restarts a process
#: that died and re-runs the call it was serving on the new one, which is safe because their
#: calls are pure functions of their arguments (the pool's result cache only saves work).
#: Bounded, so a call that kills its service every time fails the run instead of looping.
SERVICE_RESTARTS = {"max_restarts": -1, "max_task_retries": 3}


def connect(config: RayConfig) -> None:
    """Join ``ray.address``, else the cluster of ``RAY_ADDRESS`` or of the last ``ray start`` on
    this machine, else start a local cluster in this process.

    Deliberately not ``ray.init(address="auto")``: its legacy fallback joins *any* Ray process
    found on the machine, such as another local run's in-process cluster, and this run would
    then die when that one finishes.
    """
    import ray
    from ray._private.services import get_ray_address_from_environment

    if ray.is_initialized():
        return
    address = config.address or get_ray_address_from_environment(None, None)
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        logger.info("connected to the Ray cluster at %s", address)
        return
    ray.init(
        num_cpus=config.num_cpus or None,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT), **ACTOR_ENV}},
    )
    logger.info("started a local Ray cluster")


def actor_options(
    name: str, num_cpus: float, num_gpus: float = 0.0, placement: Placement | None = None
) -> dict[str, Any]:
    """Ray options for one of our actors: a readable name, resources, the actor environment,
    and its bundle of the run's placement group when it has one."""
    options: dict[str, Any] = {
        "name": name,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "runtime_env": {"env_vars": ACTOR_ENV},
    }
    if placement is not None:
        options["scheduling_strategy"] = placement.strategy_for(name)
    return options


def bundle(num_cpus: float, num_gpus: float) -> dict[str, float]:
    """A placement-group bundle holding exactly an actor's resources."""
    return {k: v for k, v in (("CPU", num_cpus), ("GPU", num_gpus)) if v > 0}


@dataclass
class Placement:
    """The run's placement group: one bundle for the learner, one per initial rollout actor.

    Actors with no resources (a CPU-less sandbox front) and rollout actors added later by a
    resize are scheduled outside it; a restarted actor returns to its own bundle.
    """

    group: Any
    bundle_of: dict[str, int]

    @classmethod
    def create(cls, config: Config, run_id: str) -> Placement | None:
        import ray
        from ray.util.placement_group import placement_group

        if config.ray.placement == "none":
            return None
        learner, rollout = config.learner, config.rollout
        members = {f"learner-{run_id}": bundle(learner.num_cpus, learner.num_gpus)}
        for i in range(rollout.num_actors):
            members[f"rollout-{run_id}-{i}"] = bundle(rollout.num_cpus, rollout.num_gpus)
        members = {name: b for name, b in members.items() if b}
        if not members:
            return None
        group = placement_group(list(members.values()), strategy=config.ray.placement.upper())
        ray.get(group.ready(), timeout=600)
        return cls(group, {name: i for i, name in enumerate(members)})

    def strategy_for(self, name: str) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if name not in self.bundle_of:
            return "DEFAULT"
        return PlacementGroupSchedulingStrategy(
            placement_group=self.group, placement_group_bundle_index=self.bundle_of[name]
        )


@dataclass
class Fleet:
    """Handles to every actor of a run."""

    rollout: Any  # launch.rollout_fleet.RolloutFleet
    learner: Any
    sandbox: Any
    placement: Placement | None = None
    scorers: dict[str, Any] = field(default_factory=dict)  # learned reward terms' actors

    def shutdown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        self.rollout.shutdown()
        try:  # let the pool kill its workers and remove its temp directory before the kill
            ray.get(self.sandbox.close.remote(), timeout=30)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            logger.warning("sandbox pool did not close cleanly: %s", exc)
        for handle in (self.learner, self.sandbox, *self.scorers.values()):
            ray.kill(handle, no_restart=True)
        if self.placement is not None:
            remove_placement_group(self.placement.group)


def learner_actor_class():
    """The learner as a Ray actor class. Its ``control`` concurrency group lets
    ``set_compute_threads`` reach it while a ``train_step`` runs (every other method runs one at
    a time, in the default group)."""
    import ray

    from learner.learner import Learner

    return ray.remote(concurrency_groups={"control": 1})(Learner)


def start_fleet(config: Config, model_path: str, run_id: str) -> Fleet:
    """Start the rollout workers, the learner and the sandbox pool; wait until all are ready."""
    import ray

    from launch.groups import start_scorer
    from launch.rollout_fleet import RolloutFleet
    from sandbox.pool import SandboxPool

    placement = Placement.create(config, run_id)
    sandbox_cls = ray.remote(**SERVICE_RESTARTS)(SandboxPool).options(
        **actor_options(f"sandbox-{run_id}", config.sandbox.num_cpus)
    )
    sandbox = sandbox_cls.remote(config.sandbox)
    learner_cls = learner_actor_class().options(
        **actor_options(
            f"learner-{run_id}", config.learner.num_cpus, config.learner.num_gpus, placement
        )
    )
    learner = learner_cls.remote(
        model_path,
        config.learner,
        temperature=config.rollout.temperature,
        seed=config.run.seed,
        transport=config.weights.transport,
        export_dtype=config.model.dtype,
        adapter_dir=str((config.run_dir / "adapters").resolve()),
        bucket_bytes=config.bucket_bytes,
    )
    rollout = RolloutFleet(config, model_path, run_id, placement)
    rollout.start(config.rollout.num_actors)
    scorers = start_scorer(config, run_id)
    ray.get([handle.__ray_ready__.remote() for handle in (learner, sandbox, *scorers.values())])
    return Fleet(rollout, learner, sandbox, placement=placement, scorers=scorers)
