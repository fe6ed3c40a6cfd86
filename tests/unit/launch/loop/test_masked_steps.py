"""Steps with nothing to train on: their reward means are null in every metrics sink, they are
counted in a row, and ``run.max_masked_steps`` of them stop the run
(``launch.loop.masked_steps``)."""

from __future__ import annotations

import io
import json
import math
from types import SimpleNamespace

import pytest

from common.config import Config
from common.types import Completion, ExecutionResult, Problem, Verdict
from launch.loop.driver import Driver, StepTimer
from launch.loop.groups import GroupCollector
from launch.loop.masked_steps import MaskedStepLimit, is_masked, masked_cause
from launch.loop.metrics import MetricsLog, read_metrics
from launch.loop.telemetry import DashboardMetrics, Telemetry, gauge_values
from tests.unit.launch.loop.helpers import FakeRollout

INFRA = ExecutionResult(Verdict.INFRA_ERROR, 0, 1, [], 0.0, "sandbox worker died")
FAILED = ExecutionResult(Verdict.FAILED, 0, 1, [Verdict.FAILED])


def _record(step: int, scored: int, infra: float = 1.0) -> dict:
    return {
        "step": step,
        "reward/scored_completions": float(scored),
        "sandbox/verdict/infra_error": infra,
    }


# ---- counting ---------------------------------------------------------------------------------


def test_the_limit_is_reached_only_by_masked_steps_in_a_row():
    limit = MaskedStepLimit(3)
    assert limit.observe(_record(1, 0)) is None
    assert limit.observe(_record(2, 0)) is None
    assert limit.observe(_record(3, 5, infra=0.5)) is None  # one scored completion resets it
    assert [limit.observe(_record(s, 0)) for s in (4, 5)] == [None, None]
    reason = limit.observe(_record(6, 0))
    assert reason is not None
    assert reason.startswith("steps 4-6 had no sample to train on, run.max_masked_steps (3) in a")
    assert "every completion was a sandbox infra error; is the sandbox pool healthy?" in reason
    assert "\n" not in reason


def test_zero_never_stops_and_one_stops_at_the_first():
    never = MaskedStepLimit(0)
    assert all(never.observe(_record(s, 0)) is None for s in range(1, 50))
    assert MaskedStepLimit(1).observe(_record(7, 0)).startswith("step 7 had no sample")


def test_the_cause_tells_a_broken_sandbox_from_reward_terms_that_masked():
    assert "sandbox pool healthy" in masked_cause(_record(1, 0, infra=1.0))
    partly = masked_cause(_record(1, 0, infra=0.25))
    assert "25% of the sandbox's executions were infra errors" in partly
    assert "reward terms (reward.terms) returned None for the rest" in partly
    assert not is_masked({"step": 1})  # a record without the count (an old run) is not masked


# ---- what the collector counts ---------------------------------------------------------------


class ScriptedSandbox:
    def __init__(self, result: ExecutionResult) -> None:
        self.result = result

    def run(self, jobs, stop_at_first_failure):
        return [self.result] * len(jobs)


def _collector(monkeypatch, result: ExecutionResult, **advantage) -> GroupCollector:
    import ray

    monkeypatch.setattr(ray, "get", lambda value: value)
    config = Config.model_validate(
        {"rollout": {"group_size": 4, "batch_size": 8}, "algorithm": {"advantage": advantage}}
    )
    problem = Problem("p", "def answer():\n    return", ("assert answer() == 7",),
                      program_prefix="def answer():\n    return")  # fmt: skip
    fleet = SimpleNamespace(rollout=FakeRollout(), sandbox=ScriptedSandbox(result))
    return GroupCollector(config, fleet, [problem] * 4, [(1,)] * 4)


def test_a_step_of_infra_errors_scores_nothing_and_its_means_are_null(monkeypatch):
    collector = _collector(monkeypatch, INFRA)
    groups, metrics = collector.collect(1, lambda count: list(range(count)))
    assert [r for g in groups for r in g.rewards] == [None] * 8
    assert metrics["reward/scored_completions"] == 0
    assert collector.term_means["reward/execution/mean"] is None
    assert collector.term_means["reward/execution/masked_frac"] == 1.0


def test_groups_dynamic_sampling_dropped_as_tied_were_scored(monkeypatch):
    """Every group failed alike: none is kept, but the step was judged (not masked)."""
    collector = _collector(monkeypatch, FAILED, dynamic_sampling=True, max_sampling_rounds=2)
    groups, metrics = collector.collect(1, lambda count: list(range(count)))
    assert groups == [] and metrics["train/dropped_groups"] == 4
    assert metrics["reward/scored_completions"] == 16  # two rounds of two groups of four
    assert not is_masked({"step": 1, **metrics})


def test_the_step_record_has_no_reward_mean_without_a_reward():
    config = Config.model_validate({"rollout": {"group_size": 2, "batch_size": 4}})
    rollout = SimpleNamespace(counters={}, actors=[None, None], live=lambda: [1])
    fleet = SimpleNamespace(rollout=rollout, counters={})
    driver = SimpleNamespace(config=config, weight_version=3, fleet=fleet)
    timer = StepTimer(marks={"time/rollout_s": 1.0})
    completions = [Completion("r", 0, [1], [2], [0.0], "x", "stop", 3)] * 4
    record = Driver._record(driver, 5, completions, [None] * 4, {}, {}, timer)
    assert record["reward/mean"] is None and record["reward/std"] is None
    assert record["reward/masked_frac"] == 1.0
    assert (record["rollout/num_actors"], record["rollout/live_actors"]) == (2, 1)
    one = Driver._record(driver, 5, completions, [None, 0.5, None, None], {}, {}, timer)
    assert one["reward/mean"] == 0.5 and one["reward/std"] == 0.0


# ---- every sink -------------------------------------------------------------------------------


def test_metrics_jsonl_writes_null_and_the_progress_line_says_so(tmp_path):
    stream = io.StringIO()
    log = MetricsLog(tmp_path / "metrics.jsonl", total_steps=2, stream=stream)
    log.write({"step": 1, "reward/mean": None, "reward/std": None, "train/kl": math.nan})
    log.close()
    line = (tmp_path / "metrics.jsonl").read_text().strip()
    assert json.loads(line) == {"step": 1, "reward/mean": None, "reward/std": None,
                                "train/kl": None}  # fmt: skip
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["reward/mean"] is None
    assert "reward n/a" in stream.getvalue()


def test_gauges_go_to_nan_and_tensorboard_gets_no_point(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    record = {"step": 2, "reward/mean": None, "reward/masked_frac": 1.0, "faults/x": None}
    values = gauge_values(record)
    assert math.isnan(values["reward/mean"]) and values["reward/masked_frac"] == 1.0
    DashboardMetrics("test").record(record)  # Ray's gauges take NaN (no cluster needed)

    sent = []
    actor = SimpleNamespace(record=SimpleNamespace(remote=sent.append))
    telemetry = Telemetry(tmp_path, actor)
    telemetry.record({"step": 1, "reward/mean": 0.5})
    telemetry.record(record)
    telemetry._writer.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("reward/mean")] == [1]
    assert [e.step for e in events.Scalars("reward/masked_frac")] == [2]
    assert sent[-1] is record


def test_the_reward_curve_leaves_a_gap_for_a_step_without_reward(tmp_path):
    from launch.loop.plot import plot_rewards

    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "reward/mean": 0.25}, {"step": 2, "reward/mean": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert plot_rewards(path, tmp_path / "curve.png").stat().st_size > 0


@pytest.mark.parametrize("limit", [0, 3])
def test_max_masked_steps_is_a_run_setting(limit):
    assert Config.model_validate({"run": {"max_masked_steps": limit}}).run.max_masked_steps == limit
    assert Config().run.max_masked_steps == 3
