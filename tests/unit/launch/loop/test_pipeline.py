"""Async pipeline bookkeeping: the producer's ordering (which groups are too stale to train on:
tests/unit/algorithm/test_staleness.py).

No timing: the producer's ordering is checked through what it observed when it started each
batch, and blocking points are controlled with events.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from launch.loop.pipeline import Batch, OnDemandBatches, PipelinedBatches


def group(*versions: int) -> SimpleNamespace:
    return SimpleNamespace(completions=[SimpleNamespace(weight_version=v) for v in versions])


class Recorder:
    """A collect function that notes how many batches the driver had released when it started."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.released = 0
        self.started_after: dict[int, int] = {}
        self.fail_at = fail_at
        self.lock = threading.Lock()
        self.entered: dict[int, threading.Event] = {}

    def entered_event(self, step: int) -> threading.Event:
        with self.lock:
            return self.entered.setdefault(step, threading.Event())

    def __call__(self, step: int) -> Batch:
        with self.lock:
            self.started_after[step] = self.released
        self.entered_event(step).set()
        if step == self.fail_at:
            raise ValueError("sandbox exploded")
        return Batch(step, [group(step)], curriculum_state={"before": step})


def drive(pipeline, recorder: Recorder, steps: range) -> list[int]:
    taken = []
    for step in steps:
        taken.append(pipeline.take(step).step)
        with recorder.lock:
            recorder.released += 1
        pipeline.release()
    return taken


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_producer_runs_at_most_depth_batches_ahead(depth):
    recorder = Recorder()
    pipeline = PipelinedBatches(recorder, first=1, last=8, depth=depth)
    try:
        assert drive(pipeline, recorder, range(1, 9)) == list(range(1, 9))
    finally:
        pipeline.close()
    # batch s may start only once the driver has released batch s - depth
    for step, released in recorder.started_after.items():
        assert released >= step - depth, (step, released)


def test_depth_one_draws_after_the_previous_batch_was_observed():
    recorder = Recorder()
    pipeline = PipelinedBatches(recorder, first=3, last=6, depth=1)
    try:
        drive(pipeline, recorder, range(3, 7))
    finally:
        pipeline.close()
    assert recorder.started_after == {3: 0, 4: 1, 5: 2, 6: 3}


def test_a_producer_failure_surfaces_in_take():
    recorder = Recorder(fail_at=2)
    pipeline = PipelinedBatches(recorder, first=1, last=4, depth=1)
    try:
        drive(pipeline, recorder, range(1, 2))
        with pytest.raises(RuntimeError, match="batch of step 2 failed: sandbox exploded"):
            pipeline.take(2)
    finally:
        pipeline.close()


def test_resume_state_is_the_curriculum_before_the_batch_in_flight():
    recorder = Recorder()
    pipeline = PipelinedBatches(recorder, first=1, last=4, depth=1)
    try:
        drive(pipeline, recorder, range(1, 2))
        recorder.entered_event(2).wait()
        # batch 2 was started after step 1: a checkpoint after step 1 must redraw it
        assert pipeline.resume_state(1) == {"before": 2}
        assert pipeline.take(2).step == 2
        assert pipeline.resume_state(2) is None  # batch 3 not released yet
    finally:
        pipeline.close()


def test_close_stops_the_producer_without_collecting_further():
    recorder = Recorder()
    pipeline = PipelinedBatches(recorder, first=1, last=100, depth=1)
    drive(pipeline, recorder, range(1, 3))
    pipeline.close()
    assert max(recorder.started_after) <= 3


def test_paused_holds_the_producer_between_batches():
    recorder = Recorder()
    pipeline = PipelinedBatches(recorder, first=1, last=3, depth=1)
    try:
        pipeline.take(1)
        with pipeline.paused():
            pipeline.release()
            # the producer may not enter step 2 while paused
            assert not recorder.entered_event(2).wait(timeout=0.2)
        assert pipeline.take(2).step == 2
    finally:
        pipeline.close()


def test_on_demand_collects_when_asked():
    recorder = Recorder()
    batches = OnDemandBatches(recorder)
    assert batches.take(5).step == 5
    assert recorder.started_after == {5: 0}
    assert batches.resume_state(5) is None


def test_pipeline_refuses_depth_zero():
    with pytest.raises(ValueError, match="at least 1"):
        PipelinedBatches(Recorder(), 1, 2, depth=0)
