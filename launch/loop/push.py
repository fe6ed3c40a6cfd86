"""Train and push: one learner step, then its weights loaded into every engine.

The learner trains and exports in one call; the three push orders of :class:`TrainAndPush`
differ in when the engines' loads are queued (``RolloutFleet.start_push``): synchronous, on the
update before the learner's call returns; async, only after training (queued early, a load could
reach an engine before the producer's next generation, which would then wait for this step);
colocated, after the sleeping engines' learner has stepped and offloaded.

``time/train_s`` is the step without the export, ``time/weight_export_s`` the export,
``time/weight_sync_s`` the export plus the wait for the engines (async: their own load time, the
queueing being ``time/push_wait_s``). The parity probe is queued behind every push; a step
without samples pushes nothing, and the probe measures the weights the engines have.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from common.types import TrainSample
from launch.fleet.fleet import Fleet
from launch.loop.colocation import Colocation
from launch.loop.parity import ParityProbe, PendingProbe


@dataclass
class Pushed:
    """What a step's training and push left: the learner's metrics (the probe's among them),
    the step's ``time/*`` marks, and the weight version the engines now serve."""

    metrics: dict
    marks: dict[str, float]
    version: int


class TrainAndPush:
    """One learner step and its weights in every engine, in the run's push order (see the module
    docstring)."""

    def __init__(self, fleet: Fleet, probe: ParityProbe, colocation: Colocation | None) -> None:
        self.fleet = fleet
        self.probe = probe
        self.colocation = colocation

    def __call__(self, samples: list[TrainSample], version: int, runs_ahead: bool) -> Pushed:
        """Train on ``samples`` and push, the engines serving ``version`` until then;
        ``runs_ahead``: a producer collects the next batches meanwhile (async mode)."""
        if not samples:
            marks = dict.fromkeys(
                ("time/train_s", "time/weight_sync_s", "time/weight_export_s"), 0.0
            )
            return Pushed(self._parity(self._start_probe(), version), marks, version)
        if self.colocation is not None:
            return self.colocated(samples)
        if runs_ahead:
            return self.asynchronous(samples)
        return self.synchronous(samples)

    def synchronous(self, samples: list[TrainSample]) -> Pushed:
        """The loads queued on the update before the step's metrics come back."""
        start = time.perf_counter()
        metrics_ref, update = self.fleet.learner.train_and_export(samples)
        pending, probe = self._start_push(update)
        metrics = self.fleet.learner.get(metrics_ref)
        trained = time.perf_counter()
        push_s, report = self._finish_push(pending, probe, trained, metrics)
        return Pushed(metrics, _marks(metrics, start, trained, push_s), int(report["version"]))

    def asynchronous(self, samples: list[TrainSample]) -> Pushed:
        """The loads queued after training, behind the producer's generation."""
        start = time.perf_counter()
        metrics_ref, update = self.fleet.learner.train_and_export(samples)
        metrics = self.fleet.learner.get(metrics_ref)
        trained = time.perf_counter()
        pending, probe = self._start_push(update)
        push_s, report = self._finish_push(pending, probe, trained, metrics)
        load_s = min(push_s, report["load_s"])
        marks = _marks(metrics, start, trained, load_s)
        marks["time/push_wait_s"] = push_s - load_s
        return Pushed(metrics, marks, int(report["version"]))

    def colocated(self, samples: list[TrainSample]) -> Pushed:
        """The engines asleep during the step; the learner offloads before the push wakes them."""
        self.colocation.before_train()
        start = time.perf_counter()
        metrics_ref, update = self.fleet.learner.train_and_export(samples)
        metrics = self.fleet.learner.get(metrics_ref)
        self.colocation.after_train()
        trained = time.perf_counter()
        pending, probe = self._start_push(update)
        push_s, report = self._finish_push(pending, probe, trained, metrics)
        return Pushed(metrics, _marks(metrics, start, trained, push_s), int(report["version"]))

    def _start_push(self, update) -> tuple[dict, PendingProbe | None]:
        """Queue every engine's load of ``update``, then the parity probe behind it."""
        return self.fleet.rollout.start_push(update), self._start_probe()

    def _finish_push(
        self, pending: dict, probe: PendingProbe | None, since: float, metrics: dict
    ) -> tuple[float, dict[str, float]]:
        """Wait for the engines' loads: (seconds waited from ``since``, the push's report); the
        probe's metrics go into ``metrics``."""
        report = self.fleet.rollout.finish_push(pending)
        push_s = time.perf_counter() - since
        metrics.update(self._parity(probe, int(report["version"])))
        return push_s, report

    def _start_probe(self) -> PendingProbe | None:
        return self.probe.start(self.fleet.learner, self.fleet.rollout)

    def _parity(self, pending: PendingProbe | None, version: int) -> dict[str, float]:
        """The parity probe's metrics and the time its answers took after the push."""
        start = time.perf_counter()
        metrics = self.probe.finish(pending, version)
        if metrics:
            metrics["time/parity_probe_s"] = time.perf_counter() - start
        return metrics


def _marks(metrics: dict, start: float, trained: float, load_s: float) -> dict[str, float]:
    """``time/train_s`` (from ``start`` to ``trained``, less the export the learner's
    ``metrics`` report, taken out of them), ``time/weight_export_s``, and
    ``time/weight_sync_s``: the export plus ``load_s``, the engines' part after the step."""
    export_s = metrics.pop("time/weight_export_s")
    return {
        "time/train_s": trained - start - export_s,
        "time/weight_export_s": export_s,
        "time/weight_sync_s": export_s + load_s,
    }
