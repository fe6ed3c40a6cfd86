"""The driver of tests/integration/test_host_faults.py, submitted with ``ray job submit``:
``python -m launch.train`` as a user runs it (its ``main``), with the test's events at chosen
steps. Before such a step the driver writes ``<events>/<step>.want`` (JSON: what the test is to
do to the cluster) and waits for ``<step>.done``, which the test writes once it has done it and
Ray has seen it; then it waits for the fleet to be able to see it too (an engine Ray reports
restarting, an engine taken back), so each event lands at its step, never raced against the
run.

Events, each once (a learner restarted from a checkpoint redoes the steps after it):

- ``engine``: the host of an engine not on the head is killed whole;
- ``back``: a new host joins, and Ray restarts the lost engine there;
- ``grow``: a new host joins, then ``python -m launch.scale`` grows the fleet by one engine,
  which only that host can take;
- ``learner``: the learner's host, with the sandbox pool, is killed whole and a host that can
  take both joins.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import ray

from launch import train
from launch.fleet.actors import learner_name
from launch.fleet.preflight import actor_state
from tests.integration.helpers import before_steps, taken_back

WAIT_S = 600.0  # for the test or Ray; a step that never comes fails the test, not hangs it


def _ask(events: Path, step: int, want: dict) -> dict:
    """Write what step ``step`` wants done and wait for the test's answer."""
    events.mkdir(parents=True, exist_ok=True)
    (events / f"{step}.tmp").write_text(json.dumps(want))
    (events / f"{step}.tmp").rename(events / f"{step}.want")
    done, deadline = events / f"{step}.done", time.monotonic() + WAIT_S
    while not done.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer to step {step}'s {want}")
        time.sleep(0.5)
    return json.loads(done.read_text())


def _until(what: str, ready) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def _where(actor) -> tuple[str, str]:
    """The id and address of the node ``actor`` runs on (the GCS's actor table)."""
    address = ray._private.state.actors(actor_id=actor._actor_id.hex())["Address"]
    return address["NodeID"], address["IPAddress"]


class Events:
    """What each event step does in the driver (see the module docstring)."""

    def __init__(self, events: Path, steps: dict[str, int]) -> None:
        self.events, self.steps = events, steps
        self.lost = -1  # the index of the engine whose host was killed
        self.done: set[str] = set()

    def actions(self) -> dict:
        return {step: self._once(name) for name, step in self.steps.items()}

    def _once(self, name: str):
        def action(driver) -> None:
            if name not in self.done:
                self.done.add(name)
                getattr(self, name)(driver, self.steps[name])

        return action

    def engine(self, driver, step: int) -> None:
        actors = driver.fleet.rollout.actors
        where = [_where(actor) for actor in actors]
        head = ray.get_runtime_context().get_node_id()  # the driver's node
        self.lost = next(i for i, (node, _) in enumerate(where) if node != head)
        actor = actors[self.lost]
        _ask(self.events, step, {"kill": where[self.lost][1]})
        _until("Ray to report the engine restarting", lambda: actor_state(actor) == "RESTARTING")

    def back(self, driver, step: int) -> None:
        _ask(self.events, step, {"add": 1})
        taken_back(driver.fleet.rollout, self.lost, WAIT_S)  # by the fleet's own check

    def grow(self, driver, step: int) -> None:
        _ask(self.events, step, {"add": 1})
        wanted = str(len(driver.fleet.rollout.actors) + 1)
        scale = [sys.executable, "-m", "launch.scale", str(driver.run_dir), "--rollout-actors"]
        subprocess.run([*scale, wanted], check=True)  # as a user types it, on the driver's host

    def learner(self, driver, step: int) -> None:
        config = driver.config
        node, address = _where(ray.get_actor(learner_name(config.run.name, 0)))
        pool = ray.get_actor(f"sandbox-{config.run.name}")
        if _where(pool)[0] != node:
            raise RuntimeError("the sandbox pool is not on the learner's host (see the test)")
        cpus = int(config.learner.num_cpus + config.sandbox.num_cpus)
        _ask(self.events, step, {"kill": address, "add": cpus})


def main(events: Path, steps: dict[str, int], argv: list[str]) -> int:
    with before_steps(Events(events, steps).actions()):
        return train.main(argv)


if __name__ == "__main__":
    events, at, *argv = sys.argv[1:]
    steps = {name: int(step) for name, step in (pair.split("=") for pair in at.split(","))}
    sys.exit(main(Path(events), steps, argv))
