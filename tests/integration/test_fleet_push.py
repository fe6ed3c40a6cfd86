"""A weight push survives an actor dying mid-load, and the restarted actor loads it once.

Real Ray (a restartable actor, really killed); the engine is a stand-in that only counts loads,
since what is tested is the fleet's recovery, not vLLM.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import private_ray

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


def test_actor_killed_during_a_push_is_restarted_and_loads_the_update_once():
    import ray

    from launch.rollout_fleet import RolloutFleet

    with private_ray():
        actor = (
            ray.remote(max_restarts=-1, max_task_retries=0)(SlowLoader).options(num_cpus=0).remote()
        )
        ray.get(actor.ready.remote())
        fleet = RolloutFleet(config=None, model_path="", run_id="push-test")
        fleet.actors = [actor]
        try:
            pending = fleet.start_push(ray.put({"version": 3}))
            ray.kill(actor, no_restart=False)  # dies in the middle of the load
            pushed = fleet.finish_push(pending)
            assert pushed == {"version": 3.0, "load_s": 1.0}
            assert fleet.counters["faults/rollout_restarts"] == 1
            assert ray.get(actor.load_count.remote()) == 1  # the restarted actor, loaded once
        finally:
            ray.kill(actor, no_restart=True)
