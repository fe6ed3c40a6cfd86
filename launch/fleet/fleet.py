"""A run's actors, started together and shut down together."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import remove_placement_group

from common.config import Config
from launch.fleet.actors import (
    Placement,
    learner_name,
    start_learner,
    start_sandbox,
    start_scorers,
    wait_until_gone,
)
from launch.fleet.clients import LearnerClient, SandboxClient
from launch.fleet.preflight import Starting, asks_text, check_resources, wait_started
from launch.fleet.rollout_fleet import RolloutFleet
from launch.fleet.weight_sync import TransferGroup


@dataclass
class Fleet:
    """Every actor of a run, behind its client."""

    rollout: RolloutFleet
    learner: LearnerClient
    sandbox: SandboxClient
    placement: Placement | None = None
    scorers: dict[str, Any] = field(default_factory=dict)  # learned reward terms' actors
    counters: dict[str, int] = field(default_factory=lambda: {"faults/learner_restarts": 0})

    def restart_learner(self, config: Config, model_path: str, run_id: str, checkpoint: str):
        """Replace every learner rank by a new one resumed from ``checkpoint`` (after one rank
        died: the others cannot go on without it) and wait until they are ready."""
        self.learner.kill()
        wait_until_gone([learner_name(run_id, r) for r in range(config.learner.num_ranks)])
        self.learner = start_learner(config, model_path, run_id, self.placement, checkpoint)
        wait_started(learner_starting(config, run_id, self.learner), config.ray.start_timeout_s)
        self.counters["faults/learner_restarts"] += 1
        if self.rollout.transfer is not None:
            self.rollout.transfer.learner = self.learner
            self.rollout.transfer.form(self.rollout.actors)

    def shutdown(self) -> None:
        self.rollout.shutdown()
        self.sandbox.close()
        self.learner.kill()
        for handle in self.scorers.values():
            ray.kill(handle, no_restart=True)
        if self.placement is not None:
            remove_placement_group(self.placement.group)


def start_fleet(
    config: Config, model_path: str, run_id: str, resume_from: str | None = None
) -> Fleet:
    """Start the rollout workers, the learner (from checkpoint ``resume_from`` when given) and
    the sandbox pool; wait until all are ready.

    Refuses first (:class:`launch.fleet.preflight.PlacementError`) a config the cluster cannot
    hold; every wait after that ends by ``ray.start_timeout_s``, naming the actors not up.
    """
    check_resources(config)
    placement = Placement.create(config, run_id)
    sandbox = start_sandbox(config, run_id)
    learner = start_learner(config, model_path, run_id, placement, resume_from)
    rollout = RolloutFleet(config, model_path, run_id, placement)
    rollout.start(config.rollout.num_actors)
    scorers = start_scorers(config, run_id)
    asks = asks_text(config.sandbox.num_cpus)
    starting = [
        *learner_starting(config, run_id, learner),
        Starting(f"sandbox-{run_id}", sandbox.ready(), sandbox.handle, asks),
    ]
    wait_started(starting, config.ray.start_timeout_s)
    if config.weights.transport == "collective":
        rollout.transfer = TransferGroup(config, learner)
        rollout.transfer.form(rollout.actors)
    return Fleet(rollout, learner, sandbox, placement=placement, scorers=scorers)


def learner_starting(config: Config, run_id: str, learner: LearnerClient) -> list[Starting]:
    """The learner's ranks as actors being started, for :func:`wait_started`."""
    asks = asks_text(config.learner.num_cpus, config.learner.num_gpus)
    return [
        Starting(learner_name(run_id, rank), ref, handle, asks)
        for rank, (handle, ref) in enumerate(zip(learner.handles, learner.ready(), strict=True))
    ]
