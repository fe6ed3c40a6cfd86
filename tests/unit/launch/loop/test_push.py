"""The three push orders (``launch.loop.push``): when the engines' loads are queued around the
learner's step, on a scripted fleet that logs every call."""

from __future__ import annotations

from types import SimpleNamespace

from common.types import TrainSample
from launch.loop.parity import ParityProbe
from launch.loop.push import TrainAndPush

SAMPLES = [TrainSample([1], [2], [0.0], 1.0, 0)]


def _fleet(calls: list[str]) -> SimpleNamespace:
    def train_and_export(samples):
        calls.append("train")
        return "metrics", "update"

    def get(ref):
        calls.append("metrics")
        return {"train/loss": 0.5, "time/weight_export_s": 0.25}

    def finish_push(pending):
        calls.append("loaded")
        return {"version": 7, "load_s": 0.0}

    learner = SimpleNamespace(train_and_export=train_and_export, get=get)
    rollout = SimpleNamespace(
        start_push=lambda update: calls.append(f"push {update}"), finish_push=finish_push
    )
    return SimpleNamespace(learner=learner, rollout=rollout)


def _colocation(calls: list[str]) -> SimpleNamespace:
    return SimpleNamespace(
        before_train=lambda: calls.append("sleep"), after_train=lambda: calls.append("offload")
    )


def test_synchronous_queues_the_push_before_the_metrics_come_back():
    calls: list[str] = []
    pushed = TrainAndPush(_fleet(calls), ParityProbe(0), None)(SAMPLES, 6, runs_ahead=False)
    assert calls == ["train", "push update", "metrics", "loaded"]
    assert pushed.version == 7 and pushed.metrics == {"train/loss": 0.5}
    assert pushed.marks["time/weight_export_s"] == 0.25
    assert set(pushed.marks) == {"time/train_s", "time/weight_export_s", "time/weight_sync_s"}


def test_async_queues_the_push_after_training_and_times_its_wait():
    calls: list[str] = []
    pushed = TrainAndPush(_fleet(calls), ParityProbe(0), None)(SAMPLES, 6, runs_ahead=True)
    assert calls == ["train", "metrics", "push update", "loaded"]
    assert pushed.version == 7 and pushed.marks["time/push_wait_s"] >= 0


def test_colocated_sleeps_the_engines_and_offloads_before_the_push_wakes_them():
    calls: list[str] = []
    push = TrainAndPush(_fleet(calls), ParityProbe(0), _colocation(calls))
    pushed = push(SAMPLES, 6, runs_ahead=False)
    assert calls == ["sleep", "train", "metrics", "offload", "push update", "loaded"]
    assert "time/push_wait_s" not in pushed.marks


def test_a_step_without_samples_trains_and_pushes_nothing():
    calls: list[str] = []
    pushed = TrainAndPush(_fleet(calls), ParityProbe(0), _colocation(calls))([], 6, False)
    assert calls == [] and pushed.version == 6 and pushed.metrics == {}
    assert set(pushed.marks.values()) == {0.0}
