"""The ``collective`` transport's group, kept whole while actors come and go.

One process group holds learner rank 0 (group rank 0) and every engine worker (the workers of
rollout actor ``i`` from ``1 + i * rollout.tensor_parallel_size`` on). A push is each engine's
receive paired with the learner's ``transmit``, queued together: they meet in the broadcast
(``common/transport/collective.py``). A group has a fixed size, so when the fleet changes (an
actor restarted by Ray, a resize) or the learner is restarted, the group is formed again from
everyone present; a new or restarted engine then gets the learner's current weights through
it (every engine does: a broadcast reaches the whole group).
"""

from __future__ import annotations

import time
from typing import Any

import ray

from common.config import Config
from common.transport.collective import backend_for, engine_init_info
from launch.fleet.actors import rendezvous_address
from launch.fleet.clients import LearnerClient, ObjectRef


class LearnerTransmitError(RuntimeError):
    """The learner's side of a push failed or did not finish while the engines were fine: a
    learner failure, answered as a rank's death is (restart from the last checkpoint)."""

    def __init__(self, message: str, *, hung: bool) -> None:
        super().__init__(message)
        self.hung = hung  # still broadcasting: nothing may wait on the learner before a restart


class TransferGroup:
    """Forms the group and pairs pushes with the learner's broadcast."""

    def __init__(self, config: Config, learner: LearnerClient) -> None:
        self.config = config
        self.learner = learner
        self.backend = backend_for(config.rollout.num_gpus)

    def form(self, actors: list[Any]) -> None:
        """(Re)form the group: learner rank 0 and every actor, all joining at once."""
        address, interface = ray.get(
            self.learner.handle.__ray_call__.remote(
                _address_of_actor, self.config.ray.group_interface
            )
        )
        workers = self.config.rollout.tensor_parallel_size  # per engine
        world = 1 + len(actors) * workers
        joins = self.learner.join_transfer(self.backend, address, world)
        bucket_bytes = self.config.bucket_bytes
        for index, actor in enumerate(actors):
            offset = 1 + index * workers
            info = engine_init_info(self.backend, address, offset, world, bucket_bytes, interface)
            joins.append(actor.join_transfer.remote(info))
        for ref in joins:
            self.learner.get(ref)

    def transmit(self) -> list[ObjectRef]:
        """Queue every learner rank's broadcast of its current weights."""
        return self.learner.transmit()

    def wait(self, transmits: list[ObjectRef], deadline: float) -> None:
        """Wait for every rank's broadcast until ``deadline`` (``time.monotonic``); raises
        :class:`LearnerTransmitError` when one failed or is still running then. A dead rank
        is reported as its ``RayActorError``, as everywhere."""
        timeout = max(0.0, deadline - time.monotonic())
        _, running = ray.wait(transmits, num_returns=len(transmits), timeout=timeout)
        if running:
            raise LearnerTransmitError(
                f"the learner's weight broadcast did not finish within weights.push_timeout_s "
                f"({self.config.weights.push_timeout_s:.0f}s)",
                hung=True,
            )
        for ref in transmits:
            try:
                self.learner.get(ref)
            except ray.exceptions.RayTaskError as exc:
                cause = str(exc.cause if exc.cause is not None else exc).splitlines()[0]
                raise LearnerTransmitError(cause, hung=False) from exc


def _address_of_actor(_actor: Any, group_interface: str) -> tuple[str, str]:
    """Run inside learner rank 0 (``__ray_call__``): a ``host:port`` on its node, held there
    until the group's store takes it, and the group's interface."""
    return rendezvous_address(group_interface)
