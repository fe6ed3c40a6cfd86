"""The one module that creates the run's actors.

The role classes are plain Python classes; here they become Ray actors, with resources taken
from config (``ray.remote(**resources)(RolloutWorker)``), so the same classes run in unit tests
without Ray and on a GPU cluster with ``num_gpus=1``. Actors get readable names
(``learner-<run>``, further learner ranks ``learner-<run>-<rank>``, ``rollout-<run>-<i>``,
``sandbox-<run>``, ``scorer-<run>-<term>``, ``metrics-<run>``) for the dashboard. The driver
gets typed clients back (:mod:`launch.fleet.clients`); the rollout fleet gets its engines' handles,
which it wraps itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from actor.rollout_worker import RolloutWorker
from actor.scorer import RewardScorer
from common.config import Config
from common.memory.plan import card_reserve_gib
from common.model_files import ModelFiles, describe, fill, read_piece
from common.rendezvous import LOOPBACK, GroupStore, hold, interface_address, interface_of
from common.transport import transport_for
from common.types import ProcessGroupSpec
from launch.fleet.clients import LearnerClient, SandboxClient
from launch.fleet.cluster import ACTOR_ENV
from launch.fleet.preflight import (
    Starting,
    asks_text,
    bundle,
    colocated_bundle,
    wait_placed,
    wait_started,
)
from launch.fleet.scorer import resolve_scorer_path
from launch.loop.telemetry import DashboardMetrics
from learner.learner import Learner
from sandbox.trusted.pool import SandboxPool

logger = logging.getLogger(__name__)

#: For the stateless services, the sandbox pool, the reward scorers and the dashboard metrics
#: actor: Ray restarts a process that died and re-runs the call it was serving on the new one,
#: which is safe because their calls are pure functions of their arguments (the pool's result
#: cache only saves work; the gauges are set again by every record).
#: Bounded, so a call that kills its service every time fails the run instead of looping.
SERVICE_RESTARTS = {"max_restarts": -1, "max_task_retries": 3}


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


@dataclass
class Placement:
    """The run's placement group: one bundle per learner rank, one per initial rollout actor.

    Actors with no resources (a CPU-less sandbox front) and rollout actors added later by a
    resize are scheduled outside it; a restarted actor returns to its own bundle. Several
    learner ranks always get one (PACK unless ``ray.placement`` says otherwise, the learner's
    bundles alone with ``ray.placement = "none"``): rank 0's node must be known before the
    ranks start, to give them its address.

    With ``rollout.colocate`` learner rank i and rollout actor i share bundle i instead
    (:func:`colocated_bundle`), and the group is PACK under ``ray.placement = "none"`` too:
    a pair's fractional GPUs are only one card's when Ray reserves that card for both.
    """

    group: Any
    bundle_of: dict[str, int]

    @classmethod
    def create(cls, config: Config, run_id: str) -> Placement | None:
        learner, rollout = config.learner, config.rollout
        strategy = config.ray.placement
        if strategy == "none" and learner.num_ranks == 1 and not rollout.colocate:
            return None
        # (the actors sharing a bundle, the bundle), in bundle order
        members: list[tuple[list[str], dict[str, float]]] = []
        for rank in range(learner.num_ranks):
            if rollout.colocate:
                pair = [learner_name(run_id, rank), rollout_name(run_id, rank)]
                members.append((pair, colocated_bundle(config)))
            else:
                members.append(
                    ([learner_name(run_id, rank)], bundle(learner.num_cpus, learner.num_gpus))
                )
        if strategy != "none" and not rollout.colocate:
            for i in range(rollout.num_actors):
                members.append(
                    ([rollout_name(run_id, i)], bundle(rollout.num_cpus, rollout.num_gpus))
                )
        members = [(names, b) for names, b in members if b]  # an empty bundle is not Ray's
        if not members:
            return None
        strategy = "pack" if strategy == "none" else strategy
        group = placement_group([b for _, b in members], strategy=strategy.upper())
        named = {" + ".join(names): b for names, b in members}
        wait_placed(group, named, config.ray.start_timeout_s)
        return cls(group, {name: i for i, (names, _) in enumerate(members) for name in names})

    def strategy_for(self, name: str) -> Any:
        if name not in self.bundle_of:
            return "DEFAULT"
        return PlacementGroupSchedulingStrategy(
            placement_group=self.group, placement_group_bundle_index=self.bundle_of[name]
        )


def learner_name(run_id: str, rank: int) -> str:
    """Rank 0 keeps the single learner's name; the others are numbered after it."""
    return f"learner-{run_id}" if rank == 0 else f"learner-{run_id}-{rank}"


def rollout_name(run_id: str, index: int) -> str:
    """Rollout actor ``index``'s name (indices are never reused within a run)."""
    return f"rollout-{run_id}-{index}"


def wait_until_gone(names: list[str], timeout_s: float = 120) -> None:
    """Return once no live actor holds any of ``names`` (``ray.kill`` is asynchronous, and a
    replacement needs the name)."""
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"actor {name} is still alive {timeout_s:g} s after its kill")
            time.sleep(0.1)


_read_piece = ray.remote(num_cpus=0, max_retries=3)(read_piece)


@dataclass(frozen=True)
class NodeFiles:
    """Reads a piece of a file on Ray node ``node_id``'s host: the driver's, for an actor on a
    host without the model or a checkpoint; a learner's, for the driver gathering a checkpoint
    written there (``common/model_files.py``). A task pinned to that node."""

    node_id: str

    def __call__(self, root: str, relative: str, offset: int, size: int) -> bytes:
        pinned = NodeAffinitySchedulingStrategy(self.node_id, soft=False)
        task = _read_piece.options(scheduling_strategy=pinned)
        return ray.get(task.remote(root, relative, offset, size))


def model_files(model_path: str) -> ModelFiles:
    """The driver's model directory as actors on any host get it."""
    return describe(model_path, NodeFiles(ray.get_runtime_context().get_node_id()))


def gather_checkpoint(path: Path, written: list[dict]) -> list[str]:
    """What the learner ranks wrote of checkpoint ``path`` (``Learner.save_checkpoint``'s
    reports) fetched into ``path`` on this host where it is not there already (a rank on
    another host without a shared file system); the nodes fetched from."""
    fetched = []
    for report in written:
        files = ModelFiles(str(path), tuple(map(tuple, report["files"])), NodeFiles(report["node"]))
        if report["node"] and fill(files, path):
            fetched.append(report["node"])
    return fetched


def learner_actor_class():
    """The learner as a Ray actor class. Its ``control`` concurrency group lets
    ``set_compute_threads`` reach it while a ``train_step`` runs (every other method runs one at
    a time, in the default group)."""
    return ray.remote(concurrency_groups={"control": 1})(Learner)


def start_learner(
    config: Config,
    model_path: str,
    run_id: str,
    placement: Placement | None,
    resume_from: str | None = None,
) -> LearnerClient:
    """The learner's ranks (``learner.num_ranks`` actors, one bundle each), resumed from a
    checkpoint directory when given (not yet waited for)."""
    learner = config.learner
    group, store = None, None
    if learner.num_ranks > 1:
        assert placement is not None, "Placement.create gives several learner ranks a group"
        # The driver serves the ranks' store, bound the moment its port is picked, for as long
        # as the client below lives (a restarted learner gets a new one).
        host, interface = rendezvous_host(config.ray.group_interface)
        store = GroupStore(host)
        backend = "nccl" if learner.num_gpus > 0 else "gloo"
        group = [
            ProcessGroupSpec(store.address, rank, learner.num_ranks, backend, interface)
            for rank in range(learner.num_ranks)
        ]
    handles = []
    for rank in range(learner.num_ranks):
        name = learner_name(run_id, rank)
        options = actor_options(name, learner.num_cpus, learner.num_gpus, placement)
        handles.append(
            learner_actor_class()
            .options(**options)
            .remote(
                model_files(model_path),
                learner,
                loss=config.algorithm.loss,
                temperature=config.rollout.temperature,
                seed=config.run.seed,
                transport=config.weights.transport,
                export_dtype=config.model.dtype,
                adapter_dir=str((config.run_dir / "adapters").resolve()),
                bucket_bytes=config.bucket_bytes,
                total_steps=config.run.steps,
                group=group[rank] if group else None,
                resume_from=model_files(resume_from) if resume_from else None,
                card_reserve_gib=card_reserve_gib(config),
            )
        )
    return LearnerClient(handles, store)


def rendezvous_host(group_interface: str) -> tuple[str, str]:
    """Where a group's store listens on this node, and the interface its members' gloo and
    NCCL sockets use ('': their default), from ``ray.group_interface``: that interface's
    address and name when it names one; else loopback while the cluster has a single node
    (every member is on this machine: nothing needs to be reachable from outside), else this
    node's address as Ray knows it."""
    if group_interface:
        return interface_address(group_interface), group_interface
    if sum(1 for node in ray.nodes() if node["Alive"]) == 1:
        return LOOPBACK, interface_of(LOOPBACK)
    return ray.util.get_node_ip_address(), ""


def rendezvous_address(group_interface: str) -> tuple[str, str]:
    """A ``host:port`` on this node whose listening socket this process holds until its group's
    store takes it (``common.rendezvous.hold``), and the group's interface (run in learner rank
    0, which serves the transfer group's store)."""
    host, interface = rendezvous_host(group_interface)
    return hold(host, interface), interface


def start_sandbox(config: Config, run_id: str) -> SandboxClient:
    """The sandbox pool actor, a stateless service (not yet waited for)."""
    sandbox_cls = ray.remote(**SERVICE_RESTARTS)(SandboxPool).options(
        **actor_options(f"sandbox-{run_id}", config.sandbox.num_cpus)
    )
    return SandboxClient(sandbox_cls.remote(config.sandbox))


def start_rollout_worker(
    config: Config, model_path: str, run_id: str, index: int, placement: Placement | None
) -> Any:
    """Rollout actor ``index`` (one vLLM engine); Ray restarts it when it dies, and the fleet
    gives it the current weights."""
    rollout = config.rollout
    options = actor_options(
        rollout_name(run_id, index), rollout.num_cpus, rollout.num_gpus, placement
    )
    cls = ray.remote(max_restarts=-1, max_task_retries=0)(RolloutWorker)
    return cls.options(**options).remote(
        model_files(model_path),
        rollout,
        config.model,
        seed=config.run.seed,
        worker_index=index,
        lora_rank=config.served_lora_rank,
        transport=transport_for(config.weights.transport, config.learner.lora),
    )


def start_scorers(config: Config, run_id: str) -> dict[str, Any]:
    """One ready scorer actor per learned-scorer term, by term name (empty when none).

    Each asks for its term's ``num_cpus``/``num_gpus``; ``builtin:tiny-scorer`` is built offline
    under ``run.output_dir/_models`` first, like ``builtin:tiny``. Waits at most
    ``ray.start_timeout_s`` for them.
    """
    handles, starting = {}, []
    for name, options in config.reward.scorer_terms().items():
        path = resolve_scorer_path(options.path, Path(config.run.output_dir) / "_models")
        actor = f"scorer-{run_id}-{name}"
        remote_cls = ray.remote(**SERVICE_RESTARTS)(RewardScorer).options(
            **actor_options(actor, options.num_cpus, options.num_gpus)
        )
        handle = handles[name] = remote_cls.remote(model_files(path), options)
        asks = asks_text(options.num_cpus, options.num_gpus)
        starting.append(Starting(actor, handle.__ray_ready__.remote(), handle, asks))
    wait_started(starting, config.ray.start_timeout_s)
    return handles


def start_metrics(run_name: str) -> Any:
    """The dashboard-metrics actor (``launch.loop.telemetry.DashboardMetrics``)."""
    name = f"metrics-{run_name}"
    # After a learner restart the driver starts it again, moments after killing the last one.
    wait_until_gone([name], timeout_s=10)
    options = actor_options(name, num_cpus=0)
    # A service too: it only mirrors each record into gauges, which the next record sets again.
    return ray.remote(**SERVICE_RESTARTS)(DashboardMetrics).options(**options).remote(run_name)
