"""The rollout fleet survives a killed actor and can be resized during a run (1 -> 2 -> 1); the
sandbox pool survives being killed too."""

from __future__ import annotations

import glob
import os
import tempfile
from dataclasses import dataclass

import pytest

from launch.loop.control import request_resize
from tests.integration.helpers import before_steps, crash_and_wait, read_jsonl, short_config

pytestmark = pytest.mark.integration

STEPS = 12


def _pid(_actor) -> int:
    return os.getpid()


@dataclass
class EventfulRun:
    records: list[dict]  # metrics.jsonl
    sandbox_pids: list[int]  # the pool's process before the kill and after its restart


@pytest.fixture(scope="module")
def eventful_run(tmp_path_factory, tiny_model_path):
    """One run in which the fleet grows to 2 actors, loses one to a kill, and shrinks to 1."""
    import ray

    from launch.train import train

    config = short_config(tmp_path_factory.mktemp("runs"), "faults", tiny_model_path, STEPS)
    run_dir = config.run_dir

    def kill_first_actor(_driver) -> None:
        """As a crash would (Ray restarts it, max_restarts), and back before step 5 calls it: it
        comes back with the base model (version 0) and must refuse to sample from it."""
        actor = ray.get_actor(f"rollout-{config.run.name}-0")
        before, after = crash_and_wait(actor, lambda a: a.ready.remote())
        assert after == 0 < before

    sandbox_pids = []

    def kill_sandbox_pool(_driver) -> None:
        """Kill the pool's process as a crash would; note its pid before and after the restart."""
        pool = ray.get_actor(f"sandbox-{config.run.name}")
        sandbox_pids.extend(crash_and_wait(pool, lambda a: a.__ray_call__.remote(_pid)))

    events = {
        2: lambda _driver: request_resize(run_dir, 2),
        3: kill_sandbox_pool,
        5: kill_first_actor,
        8: lambda _driver: request_resize(run_dir, 1),
    }
    with before_steps(events):
        train(config)
    return EventfulRun(read_jsonl(run_dir / "metrics.jsonl"), sandbox_pids)


def test_killed_actor_is_restarted_and_every_step_completes(eventful_run):
    records = eventful_run.records
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["faults/rollout_restarts"] for r in records] == [0] * 4 + [1] * 8
    # Nothing silently dropped: every step trained on the full batch.
    assert all(r["train/num_samples"] == 32 or r["reward/masked_frac"] > 0 for r in records)


def test_fleet_grows_and_shrinks_during_the_run(eventful_run):
    records = eventful_run.records
    sizes = [r["rollout/num_actors"] for r in records]
    assert sizes == [1] + [2] * 6 + [1] * 5


def test_new_and_restarted_actors_serve_current_weights(eventful_run):
    records = eventful_run.records
    # A stale engine would sample from old weights: the learner/sampler gap would jump.
    assert max(r["train/logprob_diff_mean"] for r in records) < 0.05


def test_killed_sandbox_pool_is_restarted_and_no_reward_is_lost(eventful_run):
    records, sandbox_pids = eventful_run.records, eventful_run.sandbox_pids
    assert len(sandbox_pids) == 2 and sandbox_pids[0] != sandbox_pids[1]  # really killed
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    # the call the dead pool was serving ran again on the new one: every sample was judged
    assert all(r["reward/masked_frac"] == 0 for r in records)
    assert [r["sandbox/pool_restarts"] for r in records] == [0] * 2 + [1] * (STEPS - 2)
    # the new pool removed the directory the killed one could not
    assert glob.glob(os.path.join(tempfile.gettempdir(), f"sandbox-{sandbox_pids[0]}-*")) == []
