"""A weight push survives an actor dying mid-load, and an actor Ray restarts between a push and
the next generation never samples from the base model.

Real Ray (restartable actors, really killed). The fleet's recovery is tested on stand-ins that
count loads and tag completions with their version; the last test does it with a real engine.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from actor.rollout_worker import StaleWeightsError
from common.types import Completion, RolloutRequest, TrainSample
from tests.integration.helpers import crash_and_wait, private_ray, short_config, taken_back
from tests.integration.test_weight_push import BF16_TOLERANCE, _mean_abs_diff

pytestmark = pytest.mark.integration


class SlowLoader:
    """Counts weight loads; a load takes long enough to be killed in the middle of it."""

    def __init__(self) -> None:
        self.version, self.loads = 0, 0

    def ready(self) -> int:
        return self.version

    def update_weights(self, update: dict) -> dict[str, float]:
        time.sleep(1.0)
        self.version, self.loads = update["version"], self.loads + 1
        return {"version": float(self.version), "seconds": 1.0}

    def load_count(self) -> int:
        return self.loads

    def generate_stream(self, requests: list[RolloutRequest], min_version: int = 0):
        if self.version < min_version:  # the same refusal as RolloutWorker.generate_stream
            raise StaleWeightsError(f"version {self.version} < {min_version}")
        yield [[_completion(request, self.version)] for request in requests]

    def generate(self, requests: list[RolloutRequest], min_version: int = 0) -> list[Completion]:
        finished = [g for groups in self.generate_stream(requests, min_version) for g in groups]
        return [c for group in finished for c in group]


def _completion(request: RolloutRequest, version: int) -> Completion:
    return Completion(request.request_id, 0, [1], [2], [-0.5], "x", "stop", version)


def _restartable(cls):
    import ray

    actor = ray.remote(max_restarts=-1, max_task_retries=0)(cls).options(num_cpus=0).remote()
    ray.get(actor.ready.remote())
    return actor


def _restart(actor) -> None:
    """Kill ``actor`` (which has loaded an update) as a crash would and wait until Ray has
    brought it back, at version 0."""
    loaded, restarted = crash_and_wait(actor, lambda a: a.ready.remote())
    assert loaded > 0 and restarted == 0


@contextlib.contextmanager
def _stand_in_fleet():
    """A fleet of one restartable :class:`SlowLoader` on a private cluster: (fleet, actor)."""
    import ray

    from common.config import load_config
    from launch.fleet.rollout_fleet import RolloutFleet

    with private_ray():
        actor = _restartable(SlowLoader)
        # the defaults: a restart waits ray.start_timeout_s, as the product's fleet does
        fleet = RolloutFleet(config=load_config(None, []), model_path="", run_id="stand-in")
        fleet.actors = [actor]
        try:
            yield fleet, actor
        finally:
            ray.kill(actor, no_restart=True)


def test_actor_killed_during_a_push_is_restarted_and_loads_the_update_once():
    import ray

    with _stand_in_fleet() as (fleet, actor):
        pending = fleet.start_push(ray.put({"version": 3}))
        ray.kill(actor, no_restart=False)  # dies in the middle of the load
        pushed = fleet.finish_push(pending)
        assert pushed == {"version": 3.0, "load_s": 1.0}
        assert fleet.counters["faults/rollout_restarts"] == 1
        assert ray.get(actor.load_count.remote()) == 1  # the restarted actor, loaded once


def test_actor_restarted_between_push_and_generation_gets_the_update_before_generating():
    import ray

    with _stand_in_fleet() as (fleet, actor):
        fleet.push(ray.put({"version": 2}))
        _restart(actor)  # quietly back at version 0: no call of the fleet saw it die
        completions = fleet.generate([RolloutRequest("p0", (1,), (7,))])
        assert [c.weight_version for c in completions] == [2]
        assert fleet.counters["faults/rollout_restarts"] == 1
        assert fleet.counters["faults/rollout_retries"] == 1
        assert ray.get(actor.load_count.remote()) == 1


def test_real_engine_restarted_after_a_push_generates_from_the_pushed_weights(
    tiny_model_path, tmp_path
):
    import ray

    from bench.learner.perturb import PerturbableLearner
    from common.config import LearnerConfig
    from launch.fleet.rollout_fleet import RolloutFleet

    config = short_config(tmp_path, "stale-engine", tiny_model_path, 1)
    learner = PerturbableLearner(tiny_model_path, LearnerConfig(num_cpus=1))
    learner.perturb_weights_(1e-2, seed=0)
    with private_ray():
        fleet = RolloutFleet(config, tiny_model_path, "stale-engine")
        fleet.start(1)
        try:
            actor = fleet.actors[0]
            # which weights are live: the engine's logprobs of a fixed sequence (the parity
            # probe's own call), bitwise the same for the same weights
            probe = [TrainSample([1, 2, 3], [4, 5, 6], [0.0] * 3, 0.0, 0)]
            base = ray.get(actor.score.remote(probe))
            fleet.push(ray.put(learner.export_weights()))
            pushed = ray.get(actor.score.remote(probe))
            assert pushed[0] == 1 and pushed[1] != base[1]
            _restart(actor)
            assert ray.get(actor.score.remote(probe)) == base  # the update is lost
            completions = fleet.generate([RolloutRequest("p0", (1, 2, 3), (7, 8))])
            assert {c.weight_version for c in completions} == {1}
            assert ray.get(actor.score.remote(probe)) == pushed
            assert fleet.counters["faults/rollout_restarts"] == 1
        finally:
            fleet.shutdown()


def test_collective_push_from_two_learner_ranks_reaches_both_engines(tiny_model_path, tmp_path):
    """weights.transport = "collective" as ``launch.train`` starts it (``start_fleet``): two
    learner ranks, two engines, one transfer group. A training step takes the learner away
    from the engines (the tied-embedding model: its LM head is the embedding); the push
    through the group brings both engines to its weights; an engine that Ray restarts
    rejoins a re-formed group and is given them again before it generates. Its first
    generation holds 4 tokens (two samples of a 2-token prompt): on AMX hosts that is a pass
    no oneDNN matmul runs in before the attention (actor/amx.py).

    Then an engine dies in the middle of a push, split into its steps to fix their order:
    the engines' loads are queued (they wait in the broadcast), engine 0 is killed, the
    learner's broadcast starts. Rank 0's broadcast fails; it must finish its walk of the
    weights (rank 1 gathers with it) and close the group (engine 1 waits in it); the push
    completes through a group formed again with engine 1, engine 0 is left out until Ray has
    restarted it and then taken back with the weights, and the learner ranks are still in
    step for the next training step. Without that, rank 1 waits in a gather for rank 0 and the
    push runs into weights.push_timeout_s."""
    import ray

    from launch.fleet.fleet import start_fleet

    config = short_config(
        tmp_path, "collective", tiny_model_path, 1,
        "--weights.transport", "collective",
        "--learner.num_ranks", "2",
        "--learner.num_cpus", "0.5",
        "--rollout.num_actors", "2",
        "--learner.lr", "0.05",
        "--weights.bucket_mib", "0.01",  # many buckets: a walk rank 0 could leave half-done
        "--weights.push_timeout_s", "120",
    )  # fmt: skip
    probe = [TrainSample([5, 6, 7, 8], [9, 10, 11, 12], [0.0] * 4, 0.0, 0)]
    batch = [
        TrainSample([5, 6, 7], [i + 20, i + 30], [-4.0, -4.0], 1.0 if i % 2 else -1.0, 0, i // 2)
        for i in range(8)
    ]
    with private_ray():
        fleet = start_fleet(config, tiny_model_path, "collective")
        try:

            def gaps() -> list[float]:
                learner = fleet.learner.get(fleet.learner.score(probe))[0]
                engines = [ray.get(a.score.remote(probe))[1][0] for a in fleet.rollout.actors]
                return [_mean_abs_diff(engine, learner) for engine in engines]

            assert max(gaps()) < BF16_TOLERANCE  # the same base model everywhere
            metrics_ref, update = fleet.learner.train_and_export(batch)
            assert fleet.learner.get(metrics_ref)["train/num_samples"] == 8
            assert min(gaps()) > 10 * BF16_TOLERANCE, "the engines are stale before the push"
            assert fleet.rollout.push(update)["version"] == 1
            assert max(gaps()) < BF16_TOLERANCE
            _restart(fleet.rollout.actors[1])
            completions = fleet.rollout.generate(
                [RolloutRequest("p0", (5, 6, 7), (1, 2)), RolloutRequest("p1", (5, 6), (3, 4))]
            )
            assert {c.weight_version for c in completions} == {1}
            assert fleet.rollout.counters["faults/rollout_restarts"] == 1
            assert max(gaps()) < BF16_TOLERANCE

            rollout = fleet.rollout
            metrics_ref, update = fleet.learner.train_and_export(batch)
            fleet.learner.get(metrics_ref)
            rollout.latest_update = update  # what start_push does, in a fixed order
            pending = {i: a.update_weights.remote(update) for i, a in enumerate(rollout.actors)}
            ray.kill(rollout.actors[0], no_restart=False)
            with pytest.raises(
                (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
            ):
                ray.get(pending[0])
            rollout._transmits = rollout.transfer.transmit()
            assert rollout.finish_push(pending)["version"] == 2
            assert rollout.live() == [1]  # engine 0 is left out while Ray restarts it
            taken_back(rollout, 0, wait_s=300)
            assert rollout.counters["faults/rollout_restarts"] >= 2
            assert max(gaps()) < BF16_TOLERANCE
            metrics_ref, update = fleet.learner.train_and_export(batch)
            assert fleet.learner.get(metrics_ref)["train/num_samples"] == 8
            assert rollout.push(update)["version"] == 3
            assert max(gaps()) < BF16_TOLERANCE
        finally:
            fleet.shutdown()
