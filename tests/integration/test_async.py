"""The one-step-off-policy pipeline (``async.max_staleness = 1``) on a real fleet.

Checked without timing: every trained sample is at most one weight version behind the learner,
nothing is dropped, the pipeline really ran ahead (some samples are one version behind), the
prompts are the ones synchronous mode draws, and a run stopped by SIGTERM while a batch was in
flight resumes onto the same prompts.

One pipelined run is checked for all of it: it is stopped by SIGTERM after step 3 and resumed
to the end, so its records hold steps pipelined before the stop (step 1 with nothing to overlap,
steps 2-3 run ahead) and after the resume. The synchronous run is the session's straight run
(``straight_run``, which test_resume compares against too).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.integration.helpers import STRAIGHT_STEPS, before_steps, read_jsonl, short_config

pytestmark = pytest.mark.integration

STEPS = STRAIGHT_STEPS  # the synchronous run's length: the pipelined run draws the same batches
ASYNC = ("--async.max_staleness", "1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path, straight_run):
    """(the synchronous run's config, the pipelined run's config, the step it was stopped at)."""
    from launch.train import train

    out = tmp_path_factory.mktemp("runs")
    # the learner narrowed to one thread while each next batch is generated, two otherwise
    narrowed = ("--async.learner_threads_during_rollout", "1", "--learner.num_cpus", "2")
    pipelined = short_config(
        out, "async", tiny_model_path, STEPS, *ASYNC, *narrowed, "--rollout.num_cpus", "0"
    )
    with before_steps({3: lambda _driver: os.kill(os.getpid(), signal.SIGTERM)}):
        train(pipelined)  # finishes step 3, checkpoints, stops
    state = json.loads((pipelined.run_dir / "checkpoint" / "driver_state.json").read_text())
    train(pipelined, resume=True)
    return straight_run, pipelined, state["step"]


def test_trained_samples_are_at_most_one_version_behind(runs):
    _, pipelined, *_ = runs
    records = read_jsonl(pipelined.run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["weight_version"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["async/staleness_max"] <= 1 for r in records)
    assert all(r["async/dropped_samples"] == 0 for r in records)
    assert all(r["train/num_samples"] == pipelined.rollout.batch_size for r in records)
    # step 1 has nothing to overlap with; later batches were generated while the learner
    # trained on the previous one, with the weights from before that update
    assert records[0]["async/staleness_max"] == 0
    assert any(r["async/staleness_mean"] == 1 for r in records[1:])
    # step 1 is on-policy: the engines serve exactly the learner's weights; later steps differ
    # by one update (what the TIS weight corrects)
    assert records[0]["train/logprob_diff_mean"] < 0.05
    assert all("train/tis_weight_mean" in r for r in records)
    # the producer asked for one thread while collecting and gave both back after (how many
    # micro-batches ran narrowed depends on timing, so only the bounds are checked)
    assert all(1.0 <= r["train/compute_threads_mean"] <= 2.0 for r in records)


def test_synchronous_mode_has_no_staleness(runs):
    sync, *_ = runs
    records = read_jsonl(sync.run_dir / "metrics.jsonl")
    assert all(r["async/staleness_max"] == 0 for r in records)


def test_async_draws_the_prompts_synchronous_mode_draws(runs):
    sync, pipelined, *_ = runs
    assert read_jsonl(pipelined.run_dir / "batches.jsonl") == read_jsonl(
        sync.run_dir / "batches.jsonl"
    )


def test_stopped_async_run_resumes_onto_the_same_prompts(runs):
    sync, stopped, stopped_at = runs
    assert stopped_at == 3
    resumed = read_jsonl(stopped.run_dir / "batches.jsonl")
    assert [b["step"] for b in resumed] == list(range(1, STEPS + 1))
    # the batch in flight at the stop was discarded and redrawn identically after the resume
    assert resumed == read_jsonl(sync.run_dir / "batches.jsonl")
    metrics = read_jsonl(stopped.run_dir / "metrics.jsonl")
    assert [m["weight_version"] for m in metrics] == list(range(1, STEPS + 1))
