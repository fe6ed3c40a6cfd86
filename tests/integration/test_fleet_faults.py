"""The rollout fleet survives a killed actor and can be resized during a run (1 -> 2 -> 1)."""

from __future__ import annotations

import pytest

from launch.control import request_resize
from tests.integration.helpers import read_jsonl, short_config, when_step_reached

pytestmark = pytest.mark.integration

STEPS = 12


@pytest.fixture(scope="module")
def eventful_run(tmp_path_factory, tiny_model_path):
    """One run in which the fleet grows to 2 actors, loses one to a kill, and shrinks to 1."""
    import ray

    from launch.train import train

    config = short_config(tmp_path_factory.mktemp("runs"), "faults", tiny_model_path, STEPS)
    run_dir = config.run_dir

    def kill_first_actor() -> None:
        actor = ray.get_actor(f"rollout-{config.run.name}-0")
        ray.kill(actor, no_restart=False)  # a crash: Ray restarts it (max_restarts)

    watchers = [
        when_step_reached(run_dir, 2, lambda: request_resize(run_dir, 2)),
        when_step_reached(run_dir, 5, kill_first_actor),
        when_step_reached(run_dir, 8, lambda: request_resize(run_dir, 1)),
    ]
    train(config)
    for watcher in watchers:
        watcher.join(timeout=5)
    return read_jsonl(run_dir / "metrics.jsonl")


def test_killed_actor_is_restarted_and_every_step_completes(eventful_run):
    assert [r["step"] for r in eventful_run] == list(range(1, STEPS + 1))
    assert eventful_run[-1]["faults/rollout_restarts"] >= 1
    # Nothing silently dropped: every step trained on the full batch.
    assert all(r["train/num_samples"] == 32 or r["reward/masked_frac"] > 0 for r in eventful_run)


def test_fleet_grows_and_shrinks_during_the_run(eventful_run):
    sizes = [r["rollout/num_actors"] for r in eventful_run]
    assert sizes[0] == 1 and 2 in sizes and sizes[-1] == 1


def test_new_and_restarted_actors_serve_current_weights(eventful_run):
    # A stale engine would sample from old weights: the learner/sampler gap would jump.
    assert max(r["train/logprob_diff_mean"] for r in eventful_run) < 0.05
