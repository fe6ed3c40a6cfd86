"""Before any actor starts: the resources a config asks for against the cluster's nodes
(launch/fleet/preflight.py) and the start waits' messages (the model resolved on the driver:
launch/data/test_model_source.py). Pure functions, plus one small local Ray in a subprocess for
the waits that end."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import types

import pytest

from common.config import Config, ConfigError
from launch.fleet import preflight
from launch.fleet.preflight import (
    Ask,
    Node,
    PlacementError,
    asks_text,
    check_resources,
    placement_timeout_message,
    run_asks,
    shortfall,
    start_timeout_message,
)
from tests.conftest import REPO_ROOT


def _config(**sections) -> Config:
    return Config.model_validate(sections)


def _gpu_run(**rollout) -> Config:
    """The shipped GPU configs' shape: one learner GPU, one engine GPU."""
    return _config(learner={"num_gpus": 1}, rollout={"num_gpus": 1, **rollout})


def _problem(config: Config, nodes: list[Node]) -> str | None:
    found = shortfall(run_asks(config), nodes, config.ray.placement)
    return None if found is None else str(found)


# -- what the run asks for ---------------------------------------------------------------------
def test_the_default_run_asks_for_a_learner_and_an_engine_cpu_each():
    asks = run_asks(_config())
    assert [(a.role, a.count, a.num_cpus, a.num_gpus) for a in asks] == [
        ("learner", 1, 1.0, 0.0),
        ("rollout", 1, 1.0, 0.0),
    ]  # the sandbox front asks for no CPU by default: left out


def test_ranks_engines_sandbox_and_scorers_are_all_counted():
    config = _config(
        learner={"num_ranks": 2, "num_cpus": 2, "num_gpus": 1},
        rollout={"num_actors": 3, "num_gpus": 2, "tensor_parallel_size": 2},
        sandbox={"num_cpus": 4},
        reward={
            "terms": {
                "execution": {},
                "style": {"kind": "scorer", "options": {"path": "x", "num_gpus": 0.5}},
            }
        },
    )
    asks = {a.role: a for a in run_asks(config)}
    assert (asks["learner"].count, asks["learner"].num_gpus, asks["learner"].grouped) == (
        2,
        1,
        True,
    )
    assert (asks["rollout"].count, asks["rollout"].num_gpus) == (3, 2)
    assert asks["rollout"].note == "tensor_parallel_size 2"
    assert not asks["rollout"].grouped  # ray.placement = "none": engines outside the group
    assert asks["sandbox"].num_cpus == 4
    assert asks["scorer style"].num_gpus == 0.5
    assert asks["scorer style"].section == "reward.terms.style.options"


def test_placement_puts_the_engines_in_the_group():
    asks = {a.role: a for a in run_asks(_config(ray={"placement": "pack"}))}
    assert asks["learner"].grouped and asks["rollout"].grouped


# -- against the nodes --------------------------------------------------------------------------
def test_two_gpus_on_a_one_gpu_machine_are_refused_in_one_line():
    problem = _problem(_gpu_run(), [Node("10.0.0.1", 16, 1)])
    assert problem == (
        "the run needs 2 GPUs (learner 1 x 1, rollout 1 x 1) and the cluster has 1 "
        "(node 10.0.0.1: 1): set rollout.colocate = true with learner.num_gpus = "
        "rollout.num_gpus = 0.5 to share one GPU (as configs/*-1gpu.toml), or add a GPU node"
    )


def test_two_gpus_fit_one_node_of_two_or_two_nodes_of_one():
    assert _problem(_gpu_run(), [Node("a", 16, 2)]) is None
    assert _problem(_gpu_run(), [Node("a", 16, 1), Node("b", 16, 1)]) is None


def test_a_gpu_run_on_a_cpu_cluster_says_how_to_run_on_cpu():
    problem = _problem(_gpu_run(), [Node("10.0.0.1", 8, 0)])
    assert problem is not None
    assert "the cluster has 0 (node 10.0.0.1: 0)" in problem
    assert "set the num_gpus above to 0 to run on CPU" in problem


def test_more_engines_than_gpus_without_a_learner_gpu_asks_for_fewer():
    problem = _problem(_config(rollout={"num_actors": 3, "num_gpus": 1}), [Node("a", 8, 2)])
    assert problem is not None and "rollout 3 x 1" in problem
    assert "colocate" not in problem  # the learner has no GPU to share
    assert "lower rollout.num_actors" in problem


def test_a_tensor_parallel_engine_needs_its_gpus_on_one_node():
    config = _config(rollout={"num_gpus": 2, "tensor_parallel_size": 2})
    problem = _problem(config, [Node("a", 8, 1), Node("b", 8, 1)])
    assert problem is not None
    assert problem.startswith("a rollout actor asks for 2 GPUs and 1 CPU on one node")
    assert "(tensor_parallel_size 2)" in problem
    assert "lower rollout.tensor_parallel_size" in problem
    assert _problem(config, [Node("a", 8, 2)]) is None


def test_cpus_short_on_a_joined_cluster_are_refused_with_the_breakdown():
    config = _config(learner={"num_cpus": 4}, rollout={"num_cpus": 4}, sandbox={"num_cpus": 8})
    problem = _problem(config, [Node("a", 8, 0), Node("b", 4, 0)])
    assert problem is not None
    assert problem.startswith(
        "the run needs 16 CPUs (learner 1 x 4, rollout 1 x 4, sandbox 8) and the cluster "
        "has 12 (node a: 8, node b: 4)"
    )
    assert "ray.num_cpus = 0" in problem


def test_actors_that_each_fit_but_not_together_are_refused():
    # 6 CPUs in all for 6 asked, but 2 + 2 + 2 cannot share nodes of 3 and 3
    config = _config(learner={"num_ranks": 2, "num_cpus": 2}, rollout={"num_cpus": 0},
                     sandbox={"num_cpus": 2})  # fmt: skip
    problem = _problem(config, [Node("a", 3, 0), Node("b", 3, 0)])
    assert problem is not None
    assert problem.startswith("the run's actors do not fit on the cluster's nodes together")
    assert _problem(config, [Node("a", 4, 0), Node("b", 2, 0)]) is None


def test_strict_pack_needs_the_whole_group_on_one_node():
    nodes = [Node("a", 16, 1), Node("b", 16, 1)]
    assert _problem(_gpu_run(), nodes) is None  # placement "none": anywhere
    config = _config(learner={"num_gpus": 1}, rollout={"num_gpus": 1},
                     ray={"placement": "strict_pack"})  # fmt: skip
    problem = _problem(config, nodes)
    assert problem is not None and "'strict_pack'" in problem and "2 bundles" in problem
    assert problem.endswith("use ray.placement = 'pack'")
    assert _problem(config, [Node("a", 16, 2)]) is None


def test_strict_spread_needs_a_node_per_bundle():
    config = _config(rollout={"num_actors": 2}, ray={"placement": "strict_spread"})
    problem = _problem(config, [Node("a", 16, 0), Node("b", 16, 0)])
    assert problem is not None and "each of the placement group's 3 bundles" in problem
    assert _problem(config, [Node(n, 16, 0) for n in "abc"]) is None


def test_fractional_gpus_of_a_colocated_pair_share_one_gpu():
    # the seam rollout.colocate builds on: two half-GPU asks fit one GPU, three do not
    pair = [Ask("learner", 1, 1, 0.5, True, "learner"), Ask("rollout", 1, 1, 0.5, True, "rollout")]
    assert shortfall(pair, [Node("a", 4, 1)], "pack") is None
    third = Ask("scorer s", 1, 1, 0.5, False, "reward.terms.s.options")
    assert shortfall([*pair, third], [Node("a", 4, 1)], "pack") is not None


def test_many_nodes_are_listed_up_to_a_few():
    nodes = [Node(f"10.0.0.{i}", 1, 0) for i in range(10)]
    problem = _problem(_gpu_run(), nodes)
    assert problem is not None and "node 10.0.0.5: 0, 4 more nodes)" in problem


# -- the autoscaler ---------------------------------------------------------------------------
def _cluster(monkeypatch, nodes: list[Node], limits: dict[str, float] | None) -> None:
    monkeypatch.setattr(preflight, "cluster_nodes", lambda: nodes)
    monkeypatch.setattr(preflight, "autoscaler_limits", lambda: limits)


def test_without_an_autoscaler_a_shortfall_is_refused(monkeypatch):
    _cluster(monkeypatch, [Node("a", 16, 1)], None)
    with pytest.raises(PlacementError, match=r"^the run needs 2 GPUs .*add a GPU node$"):
        check_resources(_gpu_run())
    assert issubclass(PlacementError, ConfigError)  # exit status 2 through launch.train


def test_an_autoscaler_that_can_add_the_gpus_only_warns(monkeypatch, caplog):
    _cluster(monkeypatch, [Node("a", 16, 1)], {"CPU": 64, "GPU": 8})
    with caplog.at_level(logging.WARNING, logger=preflight.__name__):
        check_resources(_gpu_run())
    assert "autoscaler may add nodes" in caplog.text and "the run needs 2 GPUs" in caplog.text


def test_an_autoscaler_that_cannot_add_enough_is_refused(monkeypatch):
    _cluster(monkeypatch, [Node("a", 16, 1)], {"CPU": 64, "GPU": 1})
    with pytest.raises(PlacementError, match="its autoscaler adds at most 1 GPU"):
        check_resources(_gpu_run())


def test_a_run_that_fits_is_not_refused(monkeypatch):
    _cluster(monkeypatch, [Node("a", 16, 2)], None)
    check_resources(_gpu_run())


# -- waits that end -----------------------------------------------------------------------------
def test_asks_text():
    assert asks_text(1, 1) == "1 CPU, 1 GPU"
    assert asks_text(2, 0.5) == "2 CPUs, 0.5 GPUs"
    assert asks_text(0) == "no resources"


def test_the_start_timeout_names_each_late_actor_and_why():
    message = start_timeout_message(
        [
            ("learner-run", "1 CPU, 1 GPU", "unplaced"),
            ("rollout-run-0", "1 CPU, 1 GPU", "loading on 10.0.0.2"),
        ],
        900,
    )
    assert "\n" not in message
    assert message.startswith(
        "2 actor(s) did not start within 900 s (ray.start_timeout_s): learner-run (1 CPU, "
        "1 GPU): unplaced; rollout-run-0 (1 CPU, 1 GPU): loading on 10.0.0.2;"
    )
    assert "Ray could not place the unplaced ones" in message
    assert "raise ray.start_timeout_s" in message


def test_an_actor_state_ray_cannot_read_is_unknown():
    assert preflight.actor_state(object()) == "unknown"


def test_the_placement_timeout_names_the_bundles():
    message = placement_timeout_message(
        {"learner-run": {"CPU": 1, "GPU": 1}, "rollout-run-0": {"GPU": 1}}, 600
    )
    assert "within 600 s (ray.start_timeout_s)" in message
    assert "learner-run (1 CPU, 1 GPU), rollout-run-0 (1 GPU)" in message


def test_a_restarting_rollout_actor_has_start_timeout_s_to_come_back(monkeypatch):
    """A restart loads the engine again, maybe on a cold node, as a start does: the fleet waits
    for it ``ray.start_timeout_s`` (on a fake clock: each readiness probe times out after its
    full wait), then ends the run naming that setting."""
    from launch.fleet import rollout_fleet  # as test_colocation: imports Ray

    clock = [0.0]

    def advance(seconds: float) -> None:
        clock[0] += seconds

    def probe_times_out(ref, timeout: float):
        advance(timeout)
        raise rollout_fleet.ray.exceptions.GetTimeoutError("still loading")

    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], sleep=advance)
    monkeypatch.setattr(rollout_fleet, "time", fake_time)
    monkeypatch.setattr(rollout_fleet.ray, "get", probe_times_out)
    fleet = rollout_fleet.RolloutFleet(_config(ray={"start_timeout_s": 300}), "model", "r")
    fleet.actors = [types.SimpleNamespace(ready=types.SimpleNamespace(remote=lambda: None))]
    with pytest.raises(RuntimeError, match=r"within 300 s \(ray\.start_timeout_s\)"):
        fleet._recover(0)
    probe_s = 60 + 1  # one readiness probe (ray.get's timeout) and the pause after it
    assert 300 < clock[0] <= 300 + probe_s


_LOCAL_RAY = """
import ray
from common.config import Config
from launch.fleet.preflight import (
    PlacementError, Starting, actor_state, actor_states, check_resources, wait_placed,
    wait_started
)

ray.init(address="local", num_cpus=1, num_gpus=0, include_dashboard=False, logging_level="ERROR")

@ray.remote
class Idle:
    pass

try:  # this machine has no GPU: the check refuses before anything starts
    check_resources(Config.model_validate({"learner": {"num_gpus": 1}}))
except PlacementError as exc:
    print("CHECK", exc)
handle = Idle.options(name="wants-a-gpu", num_cpus=0, num_gpus=1).remote()
try:
    wait_started([Starting("wants-a-gpu", handle.__ray_ready__.remote(), handle, "1 GPU")], 1)
except PlacementError as exc:
    print("WAIT", exc)
alive, dead = Idle.options(num_cpus=0).remote(), Idle.options(num_cpus=0).remote()
ray.get([alive.__ray_ready__.remote(), dead.__ray_ready__.remote()])
ray.kill(dead, no_restart=True)
try:  # answers once the GCS has marked it dead
    ray.get(dead.__ray_ready__.remote())
except ray.exceptions.RayActorError:
    pass
handles = [handle, alive, dead, object()]  # the last a stand-in, not an actor
print("STATES", *actor_states(handles), *[actor_state(h) for h in handles])
group = ray.util.placement_group([{"GPU": 1}])
try:
    wait_placed(group, {"learner-run": {"GPU": 1}}, 1)
except PlacementError as exc:
    print("GROUP", exc)
"""


def test_waits_on_a_local_ray_end_with_the_actors_name():
    """A real local cluster without a GPU: the check refuses a GPU learner, and an actor (and a
    placement group) asking for a GPU ends its wait by the timeout, named, as unplaced; the
    actors' states read in one query and one by one agree."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LOCAL_RAY)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = {line.split(" ", 1)[0]: line for line in done.stdout.splitlines()}
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the run needs 1 GPU (learner 1 x 1) and the cluster has 0" in lines["CHECK"]
    assert "wants-a-gpu (1 GPU): unplaced" in lines["WAIT"]
    assert "within 1 s" in lines["WAIT"]
    assert "bundles for learner-run (1 GPU)" in lines["GROUP"]
    # one read of the job's actor table says what one read per actor says
    assert lines["STATES"].split()[1:] == ["unplaced", "ALIVE", "DEAD", "unknown"] * 2


def test_a_refusal_exits_with_status_2_in_one_line(monkeypatch, capsys):
    from launch import train

    def refused(*args, **kwargs):
        raise PlacementError("the run needs 2 GPUs (learner 1 x 1, rollout 1 x 1) and ...")

    monkeypatch.setattr(train, "train", refused)
    assert train.main(["--config", "configs/demo.toml", "--run.steps", "1"]) == 2
    assert capsys.readouterr().err == (
        "error: the run needs 2 GPUs (learner 1 x 1, rollout 1 x 1) and ...\n"
    )


def test_start_fleet_checks_before_the_placement_group_is_reserved(monkeypatch):
    from launch.fleet import fleet

    def refused(config):
        raise PlacementError("the run needs 2 GPUs")

    def reserve(*args):
        raise AssertionError("Placement.create ran before the check")

    monkeypatch.setattr(fleet, "check_resources", refused)
    monkeypatch.setattr(fleet.Placement, "create", reserve)
    with pytest.raises(PlacementError):
        fleet.start_fleet(_gpu_run(), "model", "run")


def test_new_rollout_actors_are_waited_for_by_name_and_timeout(monkeypatch):
    from types import SimpleNamespace

    from launch.fleet import rollout_fleet

    waits = []
    engine = SimpleNamespace(ready=SimpleNamespace(remote=lambda: "ref"))
    monkeypatch.setattr(rollout_fleet, "start_rollout_worker", lambda *args: engine)
    monkeypatch.setattr(rollout_fleet, "wait_started", lambda items, s: waits.append((items, s)))
    config = _config(rollout={"num_gpus": 1}, ray={"start_timeout_s": 42})
    fleet = rollout_fleet.RolloutFleet(config, "model", "run")
    fleet.start(2)
    fleet.resize(3)
    assert [([item.name for item in items], s) for items, s in waits] == [
        (["rollout-run-0", "rollout-run-1"], 42),
        (["rollout-run-2"], 42),
    ]
    assert waits[0][0][0].asks == "1 CPU, 1 GPU"


def test_a_running_fleet_drops_engines_that_do_not_start_and_goes_on(monkeypatch, caplog):
    import ray

    from launch.fleet import rollout_fleet

    started = iter(range(10))
    monkeypatch.setattr(rollout_fleet, "start_rollout_worker", lambda *args: next(started))
    killed = []
    monkeypatch.setattr(ray, "kill", lambda actor, no_restart: killed.append(actor))
    fleet = rollout_fleet.RolloutFleet(_config(), "model", "run")
    monkeypatch.setattr(fleet, "_wait_started", lambda new, first: None)
    fleet.start(1)

    def late(new, first):
        raise PlacementError("1 actor(s) did not start within 900 s")

    monkeypatch.setattr(fleet, "_wait_started", late)
    with caplog.at_level(logging.WARNING, logger=rollout_fleet.__name__):
        fleet.resize(3)
    assert fleet.actors == [0] and killed == [1, 2]
    assert "stays at 1 actor(s): 1 actor(s) did not start" in caplog.text
    empty = rollout_fleet.RolloutFleet(_config(), "model", "run")
    monkeypatch.setattr(empty, "_wait_started", late)
    with pytest.raises(PlacementError):  # at the start of a run there is no fleet to go on with
        empty.start(1)


def test_a_colocated_pair_asks_for_one_gpu_bundle_and_fits_one_gpu():
    config = Config.model_validate(
        {
            "rollout": {"colocate": True, "num_gpus": 0.5, "num_cpus": 1},
            "learner": {"num_gpus": 0.5, "num_cpus": 1},
        }
    )
    asks = run_asks(config)
    pair = [ask for ask in asks if ask.role.startswith("learner + rollout")]
    assert len(pair) == 1 and (pair[0].count, pair[0].num_gpus, pair[0].num_cpus) == (1, 1.0, 2)
    assert not any(ask.role in ("learner", "rollout") for ask in asks)
    assert shortfall(asks, [Node("10.0.0.1", 8, 1)], "pack") is None
    assert "1 GPU" in str(shortfall(asks, [Node("10.0.0.1", 8, 0)], "pack"))
