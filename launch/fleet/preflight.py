"""Before and while a run's actors start: can the cluster hold what the config asks for, and
waits that end with the names of the actors that did not come up.

Without this a config asking for more than the cluster has hangs: Ray keeps the actor that does
not fit pending forever. So :func:`check_resources` compares the actors the run asks for
(:func:`run_asks`) with the nodes Ray reports (:func:`shortfall`, a pure function of both) before
anything starts, and refuses in one line; every later wait (:func:`wait_started`) ends by
``ray.start_timeout_s`` naming the late actors and where they stand.

The check counts each node's *total* resources: an actor waiting for resources other jobs hold
is the timeout's business. A cluster with an autoscaler that reports its limits is only warned
about when its current nodes fall short, and refused when even its limits do.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import ray

from common.config import Config, ConfigError

logger = logging.getLogger(__name__)

_EPS = 1e-9  # resources are floats (fractional GPUs): compare with a tolerance
_NODES_SHOWN = 6  # a message lists this many nodes, then counts the rest


class PlacementError(ConfigError):
    """The cluster cannot hold the run's actors: found before they start, or when they did not
    start within ``ray.start_timeout_s``."""


@dataclass(frozen=True)
class Ask:
    """What one kind of actor asks Ray for: ``count`` actors of ``num_cpus``/``num_gpus`` each.

    ``grouped``: each gets a bundle of the run's placement group (``launch.fleet.actors``'
    ``Placement``), so a strict strategy constrains it. ``section`` is the config table whose
    ``num_cpus``/``num_gpus`` set it, for the message; ``note`` says why an actor asks for
    several GPUs.
    """

    role: str
    count: int
    num_cpus: float
    num_gpus: float
    grouped: bool
    section: str
    note: str = ""


@dataclass(frozen=True)
class Node:
    """One live node's total resources, by the address Ray knows it by."""

    address: str
    num_cpus: float
    num_gpus: float


@dataclass(frozen=True)
class Shortfall:
    """Why the asks do not fit the nodes: one line (``text: hint``) and the run's totals, which
    an autoscaler's limits are compared with."""

    text: str
    hint: str
    needs: dict[str, float]

    def __str__(self) -> str:
        return f"{self.text}: {self.hint}"


def bundle(num_cpus: float, num_gpus: float) -> dict[str, float]:
    """A placement-group bundle holding exactly an actor's resources."""
    return {k: v for k, v in (("CPU", num_cpus), ("GPU", num_gpus)) if v > 0}


def colocated_bundle(config: Config) -> dict[str, float]:
    """The bundle a colocated learner rank and engine share (``rollout.colocate``): both
    actors' CPUs and, on GPU hosts, one whole GPU, which they split by their ``num_gpus``
    fractions (the config checks that those sum to at most 1)."""
    learner, rollout = config.learner, config.rollout
    gpus = 1.0 if learner.num_gpus + rollout.num_gpus > 0 else 0.0
    return bundle(learner.num_cpus + rollout.num_cpus, gpus)


def run_asks(config: Config) -> list[Ask]:
    """Every actor of the run that asks for resources, as ``Placement.create`` and the
    ``start_*`` functions of ``launch.fleet.actors`` start them (the metrics actor asks for
    nothing and is left out)."""
    learner, rollout, strategy = config.learner, config.rollout, config.ray.placement
    note = ""
    if rollout.tensor_parallel_size > 1:
        note = f"tensor_parallel_size {rollout.tensor_parallel_size}"
    asks = [
        Ask(
            "learner",
            learner.num_ranks,
            learner.num_cpus,
            learner.num_gpus,
            grouped=strategy != "none" or learner.num_ranks > 1,
            section="learner",
        ),
        Ask(
            "rollout",
            rollout.num_actors,
            rollout.num_cpus,
            rollout.num_gpus,
            grouped=strategy != "none",
            section="rollout",
            note=note,
        ),
        Ask("sandbox", 1, config.sandbox.num_cpus, 0.0, False, "sandbox"),
    ]
    if rollout.colocate:  # one bundle per pair, as Placement reserves it
        pair = colocated_bundle(config)
        cpus, gpus = pair.get("CPU", 0.0), pair.get("GPU", 0.0)
        asks[:2] = [
            Ask("learner + rollout (colocated)", learner.num_ranks, cpus, gpus, True, "rollout")
        ]
    for name, options in config.reward.scorer_terms().items():
        section = f"reward.terms.{name}.options"
        asks.append(Ask(f"scorer {name}", 1, options.num_cpus, options.num_gpus, False, section))
    return [ask for ask in asks if ask.num_cpus > 0 or ask.num_gpus > 0]


def shortfall(asks: list[Ask], nodes: list[Node], strategy: str) -> Shortfall | None:
    """Why ``asks`` cannot be placed on ``nodes`` under ``ray.placement = strategy``, or None.

    In order: a total the cluster lacks; one actor bigger than every node (a tensor-parallel
    engine's GPUs must share a node); a strict strategy the nodes cannot honour; and last a
    best-fit packing of every actor onto the nodes, the placement group's first.
    """
    for resource in ("GPU", "CPU"):
        need, have = _total(asks, resource), sum(_amount(n, resource) for n in nodes)
        if need > have + _EPS:
            return _total_shortfall(asks, nodes, resource, need, have)
    for ask in asks:
        if not any(_fits(node, ask.num_cpus, ask.num_gpus) for node in nodes):
            return _actor_too_big(asks, ask, nodes)
    return _strict_shortfall(asks, nodes, strategy) or _packing_shortfall(asks, nodes, strategy)


def _amount(node: Node, resource: str) -> float:
    return node.num_gpus if resource == "GPU" else node.num_cpus


def _each(ask: Ask, resource: str) -> float:
    return ask.num_gpus if resource == "GPU" else ask.num_cpus


def _total(asks: list[Ask], resource: str) -> float:
    return sum(ask.count * _each(ask, resource) for ask in asks)


def _fits(node: Node, num_cpus: float, num_gpus: float) -> bool:
    return node.num_cpus + _EPS >= num_cpus and node.num_gpus + _EPS >= num_gpus


def _count(amount: float, resource: str) -> str:
    """``1 GPU``, ``2 GPUs``, ``0.5 GPU``."""
    return f"{amount:g} {resource}{'' if amount == 1 else 's'}"


def _breakdown(asks: list[Ask], resource: str) -> str:
    """``learner 1 x 1, rollout 2 x 1, sandbox 4``: who asks for ``resource``, count x each
    for the roles that have several actors."""
    parts = []
    for ask in asks:
        each = _each(ask, resource)
        if each > 0:
            several = ask.role in ("learner", "rollout") or ask.count > 1
            parts.append(
                f"{ask.role} {ask.count} x {each:g}" if several else f"{ask.role} {each:g}"
            )
    return ", ".join(parts)


def _nodes_text(nodes: list[Node], resource: str) -> str:
    """``node 10.0.0.1: 1, node 10.0.0.2: 0`` (the first few, then how many more)."""
    shown = [f"node {n.address}: {_amount(n, resource):g}" for n in nodes[:_NODES_SHOWN]]
    if len(nodes) > _NODES_SHOWN:
        shown.append(f"{len(nodes) - _NODES_SHOWN} more nodes")
    return ", ".join(shown) or "no live node"


def _needs(asks: list[Ask]) -> dict[str, float]:
    return {resource: _total(asks, resource) for resource in ("CPU", "GPU")}


def _total_shortfall(
    asks: list[Ask], nodes: list[Node], resource: str, need: float, have: float
) -> Shortfall:
    text = (
        f"the run needs {_count(need, resource)} ({_breakdown(asks, resource)}) and the "
        f"cluster has {have:g} ({_nodes_text(nodes, resource)})"
    )
    return Shortfall(text, _hint(asks, resource, have), _needs(asks))


def _hint(asks: list[Ask], resource: str, have: float) -> str:
    """What to change when the cluster lacks ``resource`` in all."""
    if resource == "CPU":
        return (
            "lower the num_cpus above, or add nodes (a local cluster: ray.num_cpus = 0 offers "
            "what the actors ask for)"
        )
    if have <= 0:
        return (
            "the cluster has no GPU: set the num_gpus above to 0 to run on CPU, or join a "
            "cluster with GPUs (ray.address)"
        )
    roles = {ask.role for ask in asks if ask.num_gpus > 0}
    if {"learner", "rollout"} <= roles:
        return (
            "set rollout.colocate = true with learner.num_gpus = rollout.num_gpus = 0.5 to "
            "share one GPU (as configs/*-1gpu.toml), or add a GPU node"
        )
    return "lower rollout.num_actors or learner.num_ranks, or add a GPU node"


def _actor_too_big(asks: list[Ask], ask: Ask, nodes: list[Node]) -> Shortfall:
    """One actor of ``ask`` fits no node (its resources must all be on one)."""
    note = f" ({ask.note})" if ask.note else ""
    text = (
        f"a {ask.role} actor asks for {_count(ask.num_gpus, 'GPU')} and "
        f"{_count(ask.num_cpus, 'CPU')} on one node{note} and no node has both (GPUs: "
        f"{_nodes_text(nodes, 'GPU')}; CPUs: {_nodes_text(nodes, 'CPU')})"
    )
    hint = f"lower {ask.section}.num_gpus or {ask.section}.num_cpus, or add a larger node"
    if ask.note:
        hint = "lower rollout.tensor_parallel_size and rollout.num_gpus, or add a larger node"
    return Shortfall(text, hint, _needs(asks))


def _strict_shortfall(asks: list[Ask], nodes: list[Node], strategy: str) -> Shortfall | None:
    """``strict_pack`` needs the placement group on one node, ``strict_spread`` a node per
    bundle."""
    grouped = [ask for ask in asks if ask.grouped]
    bundles = sum(ask.count for ask in grouped)
    if strategy == "strict_pack":
        cpus, gpus = _total(grouped, "CPU"), _total(grouped, "GPU")
        if not any(_fits(node, cpus, gpus) for node in nodes):
            text = (
                f"ray.placement = 'strict_pack' puts the placement group's {bundles} bundles "
                f"({_count(gpus, 'GPU')}, {_count(cpus, 'CPU')}) on one node and no node has "
                f"that much (GPUs: {_nodes_text(nodes, 'GPU')}; CPUs: {_nodes_text(nodes, 'CPU')})"
            )
            return Shortfall(text, "use ray.placement = 'pack'", _needs(asks))
    if strategy == "strict_spread" and bundles > len(nodes):
        text = (
            f"ray.placement = 'strict_spread' puts each of the placement group's {bundles} "
            f"bundles on its own node and the cluster has {len(nodes)} node(s)"
        )
        return Shortfall(text, "use ray.placement = 'spread', or add nodes", _needs(asks))
    return None


def _packing_shortfall(asks: list[Ask], nodes: list[Node], strategy: str) -> Shortfall | None:
    """Best fit of every actor onto the nodes, the placement group's bundles first (they are
    reserved before any other actor starts), biggest first. A heuristic: it may miss a packing
    Ray would find only in contrived mixes of sizes, and Ray's own scheduler packs no better."""
    units = asks
    if strategy == "strict_pack":  # the group is one unit: _strict_shortfall found it a node
        grouped = [ask for ask in asks if ask.grouped]
        whole = Ask("placement group", 1, _total(grouped, "CPU"), _total(grouped, "GPU"), True, "")
        units = [whole, *(ask for ask in asks if not ask.grouped)]
    free = [[node.num_cpus, node.num_gpus] for node in nodes]
    spread_used: set[int] = set()  # nodes holding a bundle of a strict_spread group
    for ask in sorted(units, key=lambda a: (not a.grouped, -a.num_gpus, -a.num_cpus)):
        strict_spread = ask.grouped and strategy == "strict_spread"
        for _ in range(ask.count):
            room = [
                (gpus, cpus, i)
                for i, (cpus, gpus) in enumerate(free)
                if cpus + _EPS >= ask.num_cpus
                and gpus + _EPS >= ask.num_gpus
                and not (strict_spread and i in spread_used)
            ]
            if not room:
                return _no_room(asks, ask, nodes)
            best = min(room)[2]  # the fullest node that fits: keeps big nodes for big actors
            free[best][0] -= ask.num_cpus
            free[best][1] -= ask.num_gpus
            if strict_spread:
                spread_used.add(best)
    return None


def _no_room(asks: list[Ask], ask: Ask, nodes: list[Node]) -> Shortfall:
    """Each actor fits some node, the totals fit, but not every actor at once."""
    wanted = [r for r in ("GPU", "CPU") if _each(ask, r) > 0]
    inventory = "; ".join(f"{r}s: {_breakdown(asks, r)} on {_nodes_text(nodes, r)}" for r in wanted)
    text = (
        f"the run's actors do not fit on the cluster's nodes together: the {ask.role} "
        f"({asks_text(ask.num_cpus, ask.num_gpus)} each) finds no room left ({inventory})"
    )
    return Shortfall(text, "lower what the actors ask for, or add nodes", _needs(asks))


def cluster_nodes() -> list[Node]:
    """The connected cluster's live nodes and their total CPUs and GPUs."""
    return [
        Node(
            node["NodeManagerAddress"],
            node["Resources"].get("CPU", 0.0),
            node["Resources"].get("GPU", 0.0),
        )
        for node in ray.nodes()
        if node["Alive"]
    ]


def autoscaler_limits() -> dict[str, float] | None:
    """The most of each resource the cluster's autoscaler may grow it to, or None when it has
    none (a local cluster, or ``ray start`` by hand). Ray keeps this in a private table (read by
    Ray Train the same way); any failure to read it counts as no autoscaler."""
    try:
        return ray._private.state.state.get_max_resources_from_cluster_config()
    except Exception:  # a private API: an older or newer Ray may lack or change it
        return None


def check_resources(config: Config) -> None:
    """Refuse (:class:`PlacementError`) a config whose actors the connected cluster cannot
    hold; with an autoscaler that may add what is missing, warn and let the run wait for it
    (up to ``ray.start_timeout_s`` per wait)."""
    problem = shortfall(run_asks(config), cluster_nodes(), config.ray.placement)
    if problem is None:
        return
    limits = autoscaler_limits()
    if limits is None:
        raise PlacementError(str(problem))
    beyond = [r for r, need in problem.needs.items() if need > limits.get(r, 0) + _EPS]
    if beyond:
        most = ", ".join(_count(limits.get(r, 0), r) for r in beyond)
        raise PlacementError(
            f"{problem.text}, and its autoscaler adds at most {most}: {problem.hint}"
        )
    logger.warning(
        "%s now; the cluster's autoscaler may add nodes: waiting for them (up to "
        "ray.start_timeout_s = %g s per wait)",
        problem.text,
        config.ray.start_timeout_s,
    )


@dataclass(frozen=True)
class Starting:
    """An actor being started: its name, a ref that resolves once it is up, its handle (to ask
    Ray where it is) and what it asked for (``1 CPU, 1 GPU``)."""

    name: str
    ready: Any
    handle: Any
    asks: str


def asks_text(num_cpus: float, num_gpus: float = 0.0) -> str:
    """``1 CPU, 1 GPU``; ``no resources`` for an actor that asks for none."""
    parts = [_count(n, r) for n, r in ((num_cpus, "CPU"), (num_gpus, "GPU")) if n > 0]
    return ", ".join(parts) or "no resources"


def wait_started(starting: list[Starting], timeout_s: float) -> None:
    """Wait until every actor of ``starting`` is up, at most ``timeout_s`` in all; then raise
    :class:`PlacementError` naming those that are not. An actor whose constructor failed
    raises its error at once, as ``ray.get`` would."""
    pending = {item.ready: item for item in starting}
    deadline = time.monotonic() + timeout_s
    while pending:
        left = max(0.0, deadline - time.monotonic())
        done, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        if not done:
            late = [(item.name, item.asks, actor_state(item.handle)) for item in pending.values()]
            raise PlacementError(start_timeout_message(late, timeout_s))
        try:
            ray.get(done[0])
        except ray.exceptions.RayActorError as exc:
            raise user_error(pending[done[0]].name, exc) or exc from None
        del pending[done[0]]


#: The errors an actor's constructor raises for a setting the user can change: the driver ends
#: the run with their one line (exit status 2), not Ray's stack trace.
USER_ERRORS = ("ConfigError", "GroupUnreachable")


def user_error(name: str, exc: Exception) -> ConfigError | None:
    """``exc`` (an actor that died in its constructor) as one line naming actor ``name``, when
    the constructor raised one of :data:`USER_ERRORS` (Ray passes on its type's name and message
    as the last line of its text, not the exception)."""
    last = str(getattr(exc, "error_msg", "") or exc).strip().splitlines()[-1:]
    kind, _, message = (last[0] if last else "").partition(": ")
    kind = kind.rsplit(".", 1)[-1]  # ``common.rendezvous.GroupUnreachable``: its module's
    return ConfigError(f"{name} could not start: {message}") if kind in USER_ERRORS else None


def actor_state(handle: Any) -> str:
    """Where an actor that is not up yet stands, in a few words: ``unplaced`` (Ray found no
    node with its resources free), ``loading on <address>`` (its constructor runs), or Ray's
    state name (``RESTARTING``, ``DEAD``); ``unknown`` when Ray cannot say. Read from the GCS's
    actor table, which needs no dashboard (the state API does)."""
    try:
        info = ray._private.state.actors(actor_id=handle._actor_id.hex())
    except Exception:  # a private API, and the handle may be a test's stand-in
        return "unknown"
    return _state(info)


def actor_states(handles: list[Any]) -> list[str]:
    """:func:`actor_state` of each handle, from one read of this job's actor table: a fleet's
    check before each generation costs one GCS round trip, not one per engine."""
    try:
        job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
        table = ray._private.state.actors(job_id=job)
    except Exception:  # as actor_state
        return ["unknown"] * len(handles)
    return [_state(table.get(_hex(handle), {})) for handle in handles]


def _hex(handle: Any) -> str:
    actor_id = getattr(handle, "_actor_id", None)  # None: a test's stand-in
    return actor_id.hex() if actor_id is not None else ""


def _state(info: dict) -> str:
    state, address = info.get("State", ""), (info.get("Address") or {}).get("IPAddress", "")
    if state in ("PENDING_CREATION", "DEPENDENCIES_UNREADY"):
        return f"loading on {address}" if address else "unplaced"
    return state or "unknown"


def start_timeout_message(late: list[tuple[str, str, str]], timeout_s: float) -> str:
    """One line for actors that did not start in time: each one's name, what it asked for and
    where it stands (see :func:`actor_state`), then what to do about each kind."""
    described = "; ".join(f"{name} ({asks}): {state}" for name, asks, state in late)
    causes = []
    if any(state == "unplaced" for _, _, state in late):
        causes.append(
            "Ray could not place the unplaced ones (no node has their resources free: see "
            "`ray status`; lower what they ask for or add nodes)"
        )
    if any(state.startswith("loading") for _, _, state in late):
        causes.append(
            "the loading ones are still in their constructor (a large model on a cold node: "
            "raise ray.start_timeout_s)"
        )
    advice = "; ".join(causes) or "see `ray status` and the actors' logs"
    return (
        f"{len(late)} actor(s) did not start within {timeout_s:g} s (ray.start_timeout_s): "
        f"{described}; {advice}"
    )


def wait_placed(group: Any, bundles: dict[str, dict[str, float]], timeout_s: float) -> None:
    """Wait until the placement group holding ``bundles`` (actor name -> bundle) is reserved,
    at most ``timeout_s``; then raise :class:`PlacementError` naming what it waits for."""
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise PlacementError(placement_timeout_message(bundles, timeout_s)) from None


def placement_timeout_message(bundles: dict[str, dict[str, float]], timeout_s: float) -> str:
    """One line naming the bundles a placement group still waits for."""
    described = ", ".join(
        f"{name} ({asks_text(b.get('CPU', 0.0), b.get('GPU', 0.0))})" for name, b in bundles.items()
    )
    return (
        f"the run's placement group was not reserved within {timeout_s:g} s "
        f"(ray.start_timeout_s): it waits for bundles for {described}, and no set of nodes "
        "has them free (see `ray status`: other jobs may hold them; ray.placement decides "
        "how they may be spread)"
    )
