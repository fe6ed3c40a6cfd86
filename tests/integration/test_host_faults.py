"""Hosts lost and hosts added while the demo trains across emulated hosts
(``launch/tools/hosts.py``), each at a chosen step (``hosts_faults.py``, the job's driver, asks
for each and waits), never on a timer:

- before step ``engine`` the host of an engine (not the head: the driver is there) is killed
  whole; the run goes on with the other engine (before this test, the next generation waited
  for the lost engine to restart, which needs a node that can take it, and ended the run
  after ``ray.start_timeout_s``);
- before step ``back`` a new host joins: Ray restarts the lost engine there, which fetches the
  model, and the fleet takes it back with the current weights;
- before step ``grow`` another host joins and ``python -m launch.scale`` grows the fleet by one
  engine, which only that host can take;
- before step ``learner`` the learner's host, with the sandbox pool, is killed whole and a host
  that can take both joins: the learner restarts there from the last checkpoint, which it
  fetches from the driver's host, and Ray restarts the pool there; no reward is lost.

The head and the first worker offer one CPU, the second worker three: the learner asks two (so
it is there), each engine one, the sandbox pool one (only the learner's host has one left); a
lost actor has nowhere to go until a host joins. Marked ``cluster`` (runs last) and
``hosts_run`` (``make test-cluster``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.model_files import COMPLETE
from launch.tools import hosts as emulated
from tests.integration.helpers import REPO, read_jsonl

pytestmark = [
    pytest.mark.integration,
    pytest.mark.cluster,
    pytest.mark.hosts_run,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]
STEPS = {"engine": 4, "back": 8, "grow": 12, "learner": 17}
CHECKPOINT_EVERY = 5  # the learner restarts from step 15's checkpoint
KILL_AT, ADD_AT, GROW_AT = STEPS["engine"], STEPS["back"], STEPS["grow"]
NODE_TIMEOUT_S = 120.0  # a node joins in seconds here; Ray marks a dead one in ~30
JOB_TIMEOUT_S = 1800.0  # the run takes ~6 minutes here: a hung run fails, not blocks CI


@pytest.fixture(scope="module")
def cluster():
    hosts = emulated.Hosts()
    try:
        hosts.make(2)
        emulated.start_cluster(hosts, cpus=1, timeout_s=NODE_TIMEOUT_S, more={"w2": 3})
        yield hosts
    finally:
        hosts.down()


def _serve(hosts: emulated.Hosts, events: Path, done: dict) -> None:
    """Do what the job's driver asks for in ``events`` (see hosts_faults.py)."""
    for want in sorted(events.glob("*.want")):
        step = int(want.stem)
        if step in done:
            continue
        asked = json.loads(want.read_text())
        nodes = len(emulated.alive_nodes(hosts))
        if "kill" in asked:
            [name] = [h.name for h in hosts.hosts.values() if h.address == asked["kill"]]
            assert name != emulated.HEAD, "the driver's host"
            hosts.kill(name)
            nodes -= 1
            emulated.wait_for_nodes(hosts, nodes, NODE_TIMEOUT_S)
        if "add" in asked:
            name = hosts.add_worker().name
            emulated.join(hosts, name, cpus=asked["add"])
            emulated.wait_for_nodes(hosts, nodes + 1, NODE_TIMEOUT_S)
        done[step] = name
        (events / f"{step}.done").write_text(json.dumps({"host": name}))


@pytest.fixture(scope="module")
def eventful_run(cluster, tmp_path_factory):
    out = Path.home().resolve() / "grpo-runs"  # on the head: the driver's host's own home
    events = Path.home().resolve() / "grpo-events"
    at = ",".join(f"{name}={step}" for name, step in STEPS.items())
    job = ["python", "tests/integration/hosts_faults.py", str(events), at]
    job += ["--config", "configs/demo.toml", "--overwrite", "--run.output_dir", str(out)]
    job += ["--ray.placement", "strict_spread", "--rollout.num_actors", "2"]
    job += ["--learner.num_cpus", "2", "--sandbox.num_cpus", "1"]
    job += ["--run.checkpoint_every", str(CHECKPOINT_EVERY)]
    head, client = cluster.hosts[emulated.HEAD], cluster.hosts[emulated.CLIENT]
    ray = str(Path(sys.prefix) / "bin" / "ray")
    address = f"http://{head.address}:{emulated.DASHBOARD_PORT}"
    argv = [ray, "job", "submit", "--address", address, "--working-dir", ".", "--", *job]
    env = {**os.environ, **emulated.token_env(client)}
    seen = head.home / events.relative_to(Path.home().resolve())
    done: dict[int, str] = {}
    log = tmp_path_factory.mktemp("job") / "job.log"  # a file: a pipe left unread fills up
    with (
        log.open("w") as sink,
        subprocess.Popen(
            emulated.command(client, argv, cwd=REPO), env=env, stdout=sink, stderr=subprocess.STDOUT
        ) as job_process,
    ):
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while job_process.poll() is None and time.monotonic() < deadline:
            _serve(cluster, seen, done)
            time.sleep(0.5)
        if job_process.poll() is None:
            job_process.kill()
    assert job_process.wait() == 0, log.read_text()[-5000:]
    run_dir = head.home / out.relative_to(Path.home().resolve()) / "demo"
    return read_jsonl(run_dir / "metrics.jsonl"), done


def test_the_run_goes_on_without_a_lost_hosts_engine(eventful_run):
    records, _ = eventful_run
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    live = [r["rollout/live_actors"] for r in records]
    assert live[: ADD_AT - 1] == [2] * (KILL_AT - 1) + [1] * (ADD_AT - KILL_AT)


def test_the_lost_engine_comes_back_on_a_new_host(eventful_run, cluster):
    records, done = eventful_run
    restarts = [r["faults/rollout_restarts"] for r in records]
    assert restarts[: GROW_AT - 1] == [0] * (ADD_AT - 1) + [1] * (GROW_AT - ADD_AT)
    assert [r["rollout/live_actors"] for r in records][ADD_AT - 1 : GROW_AT - 1] == [2] * (
        GROW_AT - ADD_AT
    )
    cache = cluster.hosts[done[ADD_AT]].home / ".cache" / "grpo-code" / "models"
    assert len(list(cache.glob(f"*/{COMPLETE}"))) == 1  # it fetched the model there


def test_a_host_added_mid_run_gets_an_engine_through_scale(eventful_run, cluster):
    records, done = eventful_run
    sizes = [(r["rollout/num_actors"], r["rollout/live_actors"]) for r in records]
    assert sizes[GROW_AT - 1 :] == [(3, 3)] * (len(records) - GROW_AT + 1)
    cache = cluster.hosts[done[GROW_AT]].home / ".cache" / "grpo-code" / "models"
    assert len(list(cache.glob(f"*/{COMPLETE}"))) == 1


def test_the_learner_restarts_on_a_new_host_from_the_last_checkpoint(eventful_run, cluster):
    records, done = eventful_run
    checkpoint = STEPS["learner"] // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    restarts = [r["faults/learner_restarts"] for r in records]
    assert restarts == [0] * checkpoint + [1] * (len(records) - checkpoint)
    cache = cluster.hosts[done[STEPS["learner"]]].home / ".cache" / "grpo-code" / "models"
    fetched = [
        p.parent for p in cache.glob(f"*/{COMPLETE}") if (p.parent / "driver_state.json").exists()
    ]
    assert len(fetched) == 1
    assert json.loads((fetched[0] / "learner_state.json").read_text())["step"] == checkpoint


def test_the_sandbox_pool_restarts_on_a_new_host_and_no_reward_is_lost(eventful_run):
    records, _ = eventful_run
    checkpoint = STEPS["learner"] // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    restarts = [r["sandbox/pool_restarts"] for r in records]  # since the job started
    assert restarts == [0] * checkpoint + [1] * (len(records) - checkpoint)
    assert all(r["reward/masked_frac"] == 0 for r in records)


def test_the_reward_still_rises_after_the_faults(eventful_run):
    records, _ = eventful_run
    # The demo's rule (tests/integration/test_demo.py): the exact-answer rate of the last 10
    # steps at least 0.5, and 3x the 0.1 the best constant answer earns.
    exact = statistics.fmean(r["reward/pass_rate"] for r in records[-10:])
    assert len(records) == 300 and exact >= 0.5, exact
