"""Step metrics beyond ``metrics.jsonl``: Ray dashboard gauges and TensorBoard events.

Every step metric becomes a ``ray.util.metrics`` gauge ``grpo_<name>`` (scraped as
``ray_grpo_reward_mean`` for ``reward/mean``, shown by ``launch/grafana_dashboard.json``); fault
counters are also Ray counters, and the step time a histogram. A metric not measured in a step
(``None``) sets its gauge to NaN, a gap in Grafana (left alone, the gauge would keep showing the
previous step's value as current), and writes no TensorBoard point.

The gauges live in a small actor (``metrics-<run>``), not in the driver: metrics recorded in a
driver process reach the Prometheus endpoint only intermittently, an actor's within one report
interval.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

import ray
from ray.util import metrics

logger = logging.getLogger(__name__)

_STEP_TIME_BOUNDARIES = [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600]


def prometheus_name(metric: str) -> str:
    """``reward/mean`` -> ``grpo_reward_mean``; ``eval/pass@1`` -> ``grpo_eval_pass_1``."""
    return "grpo_" + re.sub(r"[^a-zA-Z0-9_]+", "_", metric).strip("_")


class DashboardMetrics:
    """Ray metrics for step records; runs as the ``metrics-<run>`` actor."""

    def __init__(self, run_name: str) -> None:
        self._tags = {"run": run_name}
        self._gauges: dict[str, object] = {}
        self._counters: dict[str, object] = {}
        self._fault_totals: dict[str, float] = {}
        self._step_time = metrics.Histogram(
            "grpo_step_time_seconds",
            description="wall-clock time of a training step",
            boundaries=_STEP_TIME_BOUNDARIES,
            tag_keys=("run",),
        )

    def _gauge(self, name: str):
        if name not in self._gauges:
            self._gauges[name] = metrics.Gauge(
                prometheus_name(name), description=name, tag_keys=("run",)
            )
        return self._gauges[name]

    def _count_faults(self, name: str, total: float) -> None:
        if name not in self._counters:
            self._counters[name] = metrics.Counter(
                prometheus_name(name) + "_total", description=name, tag_keys=("run",)
            )
        increment = total - self._fault_totals.get(name, 0.0)
        if increment > 0:
            self._counters[name].inc(increment, tags=self._tags)
        self._fault_totals[name] = total

    def record(self, record: dict[str, float | None]) -> None:
        for name, value in gauge_values(record).items():
            self._gauge(name).set(value, tags=self._tags)
            if name.startswith("faults/") and math.isfinite(value):
                self._count_faults(name, value)
        if "time/step_s" in record:
            self._step_time.observe(float(record["time/step_s"]), tags=self._tags)


def _numeric(record: dict) -> dict[str, float]:
    """The record's measured numbers (``None``, strings and the like left out)."""
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float))}


def gauge_values(record: dict) -> dict[str, float]:
    """What each gauge is set to: the record's numbers, and NaN for a metric not measured."""
    return {**_numeric(record), **{k: math.nan for k, v in record.items() if v is None}}


class Telemetry:
    """Mirrors each step record to the dashboard actor and to TensorBoard event files."""

    def __init__(self, run_dir: Path, actor: Any) -> None:
        self._actor = actor  # a DashboardMetrics actor (launch.fleet.actors.start_metrics)
        self._pending = None
        self._writer = None
        try:
            # lazy: tensorboard is optional (the ImportError below)
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        except ImportError:
            logger.warning("tensorboard is not installed: no event files will be written")

    def record(self, record: dict[str, float | None]) -> None:
        self._pending = self._actor.record.remote(record)  # not awaited: off the step's path
        if self._writer is not None:
            step = int(record["step"])
            for name, value in _numeric(record).items():
                if name != "step":
                    self._writer.add_scalar(name, value, global_step=step)
            self._writer.flush()

    def close(self) -> None:
        """Wait for the last record to reach the gauges; a metrics actor lost for good (its
        node died, and with it the calls Ray would have retried) costs the gauges, not the run
        nor the error that may be ending it."""
        if self._pending is not None:
            try:
                ray.get(self._pending)
            except ray.exceptions.RayActorError as exc:
                logger.warning("the dashboard metrics actor is gone: %s", type(exc).__name__)
        ray.kill(self._actor)
        if self._writer is not None:
            self._writer.close()
