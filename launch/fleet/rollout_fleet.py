"""The rollout fleet: N vLLM actors that can die, restart, grow and shrink during a run.

Guarantees the driver relies on:

- every request of a step gets its completions, or the step fails loudly: a share whose actor
  died is retried on the restarted actor (Ray ``max_restarts``) or on a live one, never dropped;
- an actor never serves with stale weights: a restarted or newly added actor first receives the
  latest weight update (its engine starts from the base model, weight version 0). Every
  generation call carries the version the fleet last confirmed loaded everywhere, so an actor
  Ray restarted quietly between two calls refuses it (``StaleWeightsError``) instead of
  sampling from the base model, and is recovered like a crashed one;
- a lost node costs its engines' share of the work, not the run: an actor Ray reports not alive
  (its node died, and Ray restarts it only once a node can take it) is left out of generation
  and pushes while the others go on, and taken back, with the current weights, when Ray has
  brought it back (:meth:`RolloutFleet.check`, before every generation; ``rollout/live_actors``);
- every fault is logged and counted (``faults/rollout_restarts``, ``faults/rollout_retries``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray

from actor.rollout_worker import StaleWeightsError
from common.config import Config
from common.types import Completion, RolloutRequest, TrainSample
from launch.fleet.actors import rollout_name, start_rollout_worker
from launch.fleet.preflight import (
    PlacementError,
    Starting,
    actor_states,
    asks_text,
    wait_started,
)
from launch.fleet.weight_sync import LearnerTransmitError

if TYPE_CHECKING:
    from launch.fleet.weight_sync import TransferGroup

logger = logging.getLogger(__name__)

_RETRIES = 3
_DIED = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
#: Errors of a generation call that recovering the actor (restart wait, latest weights) and
#: retrying its share can fix: the actor died, or came back from a restart stale.
_RECOVERABLE = (*_DIED, StaleWeightsError)
#: Ray's states (:func:`actor_states`) of an actor that cannot serve until Ray brings it back.
_GONE = ("RESTARTING", "DEAD", "unplaced")


class RolloutFleet:
    """Owns the rollout actors of a run (see the module docstring)."""

    def __init__(self, config: Config, model_path: str, run_id: str, placement=None) -> None:
        self.config = config
        self.placement = placement
        self.model_path = model_path
        self.run_id = run_id
        self.actors: list[Any] = []
        self.latest_update: Any = None  # ObjectRef of the last WeightUpdate pushed
        self.version = 0  # the weight version every actor has confirmed loading
        self.counters = {"faults/rollout_restarts": 0, "faults/rollout_retries": 0}
        self._next_index = 0
        # Actors left out until Ray brings them back: index -> their pending ``ready`` call.
        self.out: dict[int, Any] = {}
        # weights.transport = "collective": the group each push goes through, formed again
        # whenever the actors change (launch/fleet/weight_sync.py); None for the object store.
        self.transfer: TransferGroup | None = None
        self._transmits: list[Any] = []
        # rollout.colocate: the engines sleep while the learner steps; the next push wakes
        # them around its load (_queue_load), and wake_s is the slowest engine's wake.
        self.asleep = False
        self.wake_s = 0.0
        self.sleeps = self.wakes = 0  # fleet-wide, so far (colocate/sleeps, colocate/wakes)
        self._wakes: dict[int, list[Any]] = {}

    # -- membership -------------------------------------------------------------------------
    def _spawn(self) -> Any:
        index = self._next_index
        self._next_index += 1
        return start_rollout_worker(
            self.config, self.model_path, self.run_id, index, self.placement
        )

    def start(self, count: int) -> None:
        """Start ``count`` actors and wait until their engines are up."""
        self.resize(count)

    def resize(self, count: int) -> None:
        """Grow or shrink to ``count`` actors; new ones get the latest weights before serving.
        New engines have ``ray.start_timeout_s`` to come up: at the start of a run the error
        (:class:`PlacementError`) names those that did not; a running fleet drops them, says
        why, and goes on at its size (a resize must not end the run)."""
        if count < 1:
            raise ValueError(f"the rollout fleet needs at least one actor, got {count}")
        if count == len(self.actors):
            return
        if count < len(self.actors):
            for actor in self.actors[count:]:
                ray.kill(actor, no_restart=True)
            self.actors = self.actors[:count]
            self.out = {i: ref for i, ref in self.out.items() if i < count}
            if self.transfer is not None:  # the rest keep their weights: a smaller group
                self.transfer.form(self.serving)
        else:
            first = self._next_index
            new = [self._spawn() for _ in range(count - len(self.actors))]
            try:
                self._wait_started(new, first)
            except PlacementError as exc:
                for actor in new:
                    ray.kill(actor, no_restart=True)
                if not self.actors:
                    raise
                logger.warning("rollout fleet stays at %d actor(s): %s", len(self.actors), exc)
                return
            if self.latest_update is not None and self.transfer is None:
                ray.get([actor.update_weights.remote(self.latest_update) for actor in new])
            self.actors.extend(new)
            if self.transfer is not None:
                self.reform()
        logger.info("rollout fleet resized to %d actor(s)", count)

    def _wait_started(self, new: list[Any], first: int) -> None:
        """Wait for the engines just spawned (indices from ``first`` on) to be up."""
        rollout = self.config.rollout
        asks = asks_text(rollout.num_cpus, rollout.num_gpus)
        starting = [
            Starting(rollout_name(self.run_id, first + i), actor.ready.remote(), actor, asks)
            for i, actor in enumerate(new)
        ]
        wait_started(starting, self.config.ray.start_timeout_s)

    def reform(self) -> dict[str, float]:
        """Form the collective transport's group again from the learner and every actor, then
        give every actor the learner's current weights through it (after a push, as a load
        record: the version and the slowest load)."""
        assert self.transfer is not None
        self.transfer.form(self.serving)
        if self.latest_update is None:
            return {"version": 0.0, "seconds": 0.0}
        pushed = self.push(self.transfer.learner.export_weights())
        return {"version": pushed["version"], "seconds": pushed["load_s"]}

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []

    # -- work ---------------------------------------------------------------------------------
    def push(self, update_ref: Any) -> dict[str, float]:
        """Load a weight update into every actor (one object in the store, read by all).

        Returns the version now served and the slowest engine's own load time
        (``load_s``: decode, reload, re-pack; without the wait for a generation in progress).
        The driver never fetches the update itself, only the engines do.
        """
        return self.finish_push(self.start_push(update_ref))

    def start_push(self, update_ref: Any) -> dict[int, Any]:
        """Queue the update's load on every actor; :meth:`finish_push` waits for them.

        The update may still be being produced: Ray runs each load as soon as its object
        exists, so a push queued while the learner exports costs no round trip after it.
        """
        self.latest_update = update_ref
        pending = {i: self._queue_load(i, update_ref) for i in self.live()}
        self.asleep = False
        if self.transfer is not None:  # the learner's side of the same broadcast
            self._transmits = self.transfer.transmit()
        return pending

    def _queue_load(self, index: int, update_ref: Any) -> Any:
        """Queue actor ``index``'s load of the update; a sleeping engine's weights wake
        before it and its KV cache after it (an actor runs its calls in order), as vLLM's
        RL examples do: the update reaches resident weights, and the cache is allocated only
        once the update's buffers are gone."""
        actor = self.actors[index]
        if not self.asleep:
            return actor.update_weights.remote(update_ref)
        wake_weights = actor.wake.remote(["weights"])
        load = actor.update_weights.remote(update_ref)
        self._wakes[index] = [wake_weights, actor.wake.remote(["kv_cache"])]
        return load

    def sleep(self, level: int) -> float:
        """Every engine asleep while the learner on its GPU steps (``rollout.colocate``); the
        slowest engine's seconds. An actor that died meanwhile comes back awake (Ray restarts
        it), and the next push recovers it."""
        self.asleep = True
        self.sleeps += 1
        seconds = _values([actor.sleep.remote(level) for actor in self.serving], self._turn_s)
        return max(seconds, default=0.0)

    @property
    def _turn_s(self) -> float:
        """The longest one engine's sleep or wake may take."""
        return self.config.weights.push_timeout_s

    def wake(self) -> float:
        """Every engine awake without a push (before a generation the driver asks for while
        they sleep); the slowest engine's seconds."""
        self.asleep = False
        self.wakes += 1
        calls = [actor.wake.remote(None) for actor in self.serving]
        return max(_values(calls, self._turn_s), default=0.0)

    def _finish_wakes(self) -> None:
        """Wait for the wakes :meth:`_queue_load` queued; ``wake_s``: the slowest engine's."""
        wakes, self._wakes = self._wakes, {}
        if wakes:
            self.wake_s = max(sum(_values(refs, self._turn_s)) for refs in wakes.values())
            self.wakes += 1

    def finish_push(self, pending: dict[int, Any]) -> dict[str, float]:
        """Wait for the loads :meth:`start_push` queued; an actor that died meanwhile is
        restarted and given the update (see :meth:`push` for what is returned).

        With the ``collective`` transport every wait ends by ``weights.push_timeout_s`` (a hung
        group member holds the others): an engine still loading then is killed and recovered as
        a dead one. The learner's broadcast is awaited first; one that failed while every engine
        was fine, or still runs at the deadline, is a learner failure
        (:class:`LearnerTransmitError`). Object-store loads may wait behind a generation (async
        runs): they have no deadline.
        """
        limit = self.config.weights.push_timeout_s if self.transfer is not None else None
        deadline = time.monotonic() + (limit or 0.0)
        broke = None
        transmits, self._transmits = self._transmits, []
        if self.transfer is not None:
            try:
                self.transfer.wait(transmits, deadline)
            except LearnerTransmitError as exc:
                broke = exc
        loads: list[dict[str, float]] = []
        lost, hung = [], []
        for index, ref in pending.items():
            try:
                left = None if limit is None else max(0.0, deadline - time.monotonic())
                loads.append(ray.get(ref, timeout=left))
            except ray.exceptions.GetTimeoutError:
                hung.append(index)
            except _DIED:
                lost.append(index)
            except ray.exceptions.RayTaskError:
                if self.transfer is None:
                    raise
                lost.append(index)  # its broadcast broke (a member died): receives again
        for index in hung:
            logger.warning("rollout actor %d did not load the update in time: killing it", index)
            ray.kill(self.actors[index], no_restart=False)
            lost.append(index)
        if broke is not None and (broke.hung or not lost):
            self._wakes = {}  # the learner's restart pushes again and wakes them anew
            raise broke  # the learner's side: restarting it re-forms the group and pushes
        for index in lost:
            if len(self.live()) > 1:  # the others go on; check() takes it back later
                self._leave_out(index, "its load failed")
                if self.transfer is not None:  # the group lost a member: formed again
                    loads.append(self.reform())
            else:
                loads.append(self._recover(index))  # it reloads latest_update, this update
        self._finish_wakes()
        version = max(load["version"] for load in loads)
        self.version = int(version)
        return {"version": version, "load_s": max(load["seconds"] for load in loads)}

    def start_score(self, samples: list[TrainSample]) -> dict[int, Any]:
        """Queue ``RolloutWorker.score`` of fixed sequences on every actor (the parity probe);
        each answers ``(weight version, logprobs)`` once its earlier calls are done."""
        return {i: self.actors[i].score.remote(samples) for i in self.live()}

    def generate(self, requests: list[RolloutRequest]) -> list[Completion]:
        """Every completion of ``requests``, in no particular order (:meth:`generate_stream`
        collected: the same split across actors and the same recovery)."""
        return [c for groups in self.generate_stream(requests) for group in groups for c in group]

    def generate_stream(self, requests: list[RolloutRequest]) -> Iterator[list[list[Completion]]]:
        """Split requests across actors, all generating at once, and yield requests' groups as
        soon as an engine has finished them (Ray streaming generators; groups an engine finished
        in the same step arrive in one list), so rewards can start while the rest is generating.

        A share whose actor fails mid-stream is retried, after recovery, for the requests
        whose groups had not arrived yet; groups already yielded are kept.
        """
        self.check()
        if self.asleep:
            self.wake()
        live = self.live()
        streams = {}
        for k, index in enumerate(live):
            share = requests[k :: len(live)]
            if share:
                actor = self.actors[index]
                call = actor.generate_stream.options(num_returns="streaming")
                stream = call.remote(share, self.version)
                streams[stream] = (index, share)
        received: set[str] = set()
        while streams:
            [stream], _ = ray.wait(list(streams), num_returns=1)
            index, share = streams[stream]
            try:
                groups = ray.get(next(stream))
            except StopIteration:
                del streams[stream]
                continue
            except _RECOVERABLE as exc:
                del streams[stream]
                missing = [r for r in share if r.request_id not in received]
                yield _groups(self._retry_share(index, missing, exc))
                continue
            received.update(group[0].request_id for group in groups)
            yield groups

    def _retry_share(
        self, index: int, share: list[RolloutRequest], error: Exception
    ) -> list[Completion]:
        """``share`` again after actor ``index`` failed it: on another serving actor, the
        failed one left out (a lost node's actor may not come back for long); on the same one
        after its recovery when it is the only one."""
        for _ in range(_RETRIES):
            logger.warning("rollout actor %d failed (%s); retrying", index, type(error).__name__)
            self.counters["faults/rollout_retries"] += 1
            index %= len(self.actors)
            others = [i for i in self.live() if i != index]
            if others and not isinstance(error, StaleWeightsError):
                self._leave_out(index, type(error).__name__)
                index = others[0]
            else:
                self._recover(index)
            try:
                return ray.get(self.actors[index].generate.remote(share, self.version))
            except _RECOVERABLE as exc:
                error = exc
        raise RuntimeError(f"rollout actor {index} failed {_RETRIES + 1} times: {error}") from error

    # -- health -------------------------------------------------------------------------------
    def live(self) -> list[int]:
        """The indices of the actors serving (all but those left out)."""
        return [i for i in range(len(self.actors)) if i not in self.out]

    @property
    def serving(self) -> list[Any]:
        return [self.actors[i] for i in self.live()]

    def check(self) -> None:
        """Leave out the actors Ray reports restarting (their node died: Ray restarts them once
        a node can take them), and take back, with the current weights, those whose ``ready``
        call has answered since. Never waits, unless no actor serves: then it waits for one
        as a restart does (``ray.start_timeout_s``)."""
        live = self.live()
        for index, state in zip(live, actor_states([self.actors[i] for i in live]), strict=True):
            if state in _GONE:
                self._leave_out(index, f"Ray reports it {state}")
        for index, ready in list(self.out.items()):
            if not ray.wait([ready], timeout=0)[0]:
                continue
            try:
                version = ray.get(ready)
            except _RECOVERABLE:
                self.out[index] = self.actors[index].ready.remote()  # it died again: wait on
                continue
            if self.out.pop(index, None) is not None:  # (an async run's push may race it)
                self._reload(index, version)
        if self.actors and not self.live():
            index = min(self.out)
            self.out.pop(index, None)
            self._recover(index)

    def _leave_out(self, index: int, why: str) -> None:
        if index in self.out:
            return
        logger.warning(
            "rollout actor %d left out (%s): %d of %d serve until Ray brings it back",
            index, why, len(self.actors) - len(self.out) - 1, len(self.actors),
        )  # fmt: skip
        self.out[index] = self.actors[index].ready.remote()

    def _recover(self, index: int) -> dict[str, float]:
        """Wait for Ray to restart actor ``index`` and give it the current weights; the load's
        record (``version``, ``seconds``; version 0 and no load before any push).

        A restart loads the engine again, maybe on another (cold) node, as a start does: it
        gets the same ``ray.start_timeout_s``."""
        actor = self.actors[index]
        timeout_s = self.config.ray.start_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                version = ray.get(actor.ready.remote(), timeout=60)
                break
            except (*_DIED, ray.exceptions.GetTimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"rollout actor {index} did not come back within {timeout_s:g} s "
                        "(ray.start_timeout_s)"
                    ) from exc
                time.sleep(1.0)
        return self._reload(index, version)

    def _reload(self, index: int, version: int) -> dict[str, float]:
        """Give actor ``index``, back from a restart at weight ``version``, the current
        weights; the load's record."""
        actor = self.actors[index]
        self.counters["faults/rollout_restarts"] += 1
        load = {"version": float(version), "seconds": 0.0}
        if self.transfer is not None:
            load = self.reform()
        elif self.latest_update is not None:
            load = ray.get(actor.update_weights.remote(self.latest_update))
        logger.warning(
            "rollout actor %d restarted (engine at version %d), weights reloaded", index, version
        )
        return load


def _values(refs: list[Any], timeout_s: float) -> list[float]:
    """The values of sleep or wake calls on rollout actors, leaving out those whose actor died
    (its restart is recovered by the next push or generation); a call still running after
    ``timeout_s`` (``weights.push_timeout_s``) ends the run instead of hanging it."""
    values = []
    deadline = time.monotonic() + timeout_s
    for ref in refs:
        try:
            values.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
        except _DIED as exc:
            logger.warning("a rollout actor died during sleep or wake: %s", type(exc).__name__)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"a rollout engine's sleep or wake did not finish within {timeout_s:g} s "
                "(weights.push_timeout_s, rollout.colocate)"
            ) from None
    return values


def _groups(completions: list[Completion]) -> list[list[Completion]]:
    """Completions (request then sample order) split into one list per request."""
    groups: dict[str, list[Completion]] = {}
    for completion in completions:
        groups.setdefault(completion.request_id, []).append(completion)
    return list(groups.values())
