"""RolloutFleet.check: an engine Ray reports restarting (its node died) is left out while the
others serve, and taken back with the current weights once its ``ready`` call answers; with no
engine serving, the fleet waits for one. Stand-in actors and a stand-in Ray; the run that kills
a host is tests/integration/test_host_faults.py."""

from __future__ import annotations

import types

import pytest

from common.config import load_config


class _Actor:
    """An engine's handle: ``ready`` answers a ref naming it; loads are recorded."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loads: list[str] = []
        self.ready = types.SimpleNamespace(remote=lambda: ("ready", name))
        self.update_weights = types.SimpleNamespace(remote=self._load)

    def _load(self, update: str) -> tuple[str, str]:
        self.loads.append(update)
        return ("load", self.name)


@pytest.fixture
def fleet(monkeypatch):
    from launch.fleet import rollout_fleet  # imports Ray

    states = {"a0": "ALIVE", "a1": "ALIVE"}
    answered: set[str] = set()
    monkeypatch.setattr(
        rollout_fleet, "actor_states", lambda actors: [states[a.name] for a in actors]
    )
    monkeypatch.setattr(
        rollout_fleet.ray,
        "wait",
        lambda refs, timeout: ([r for r in refs if r[1] in answered], []),
    )
    monkeypatch.setattr(
        rollout_fleet.ray,
        "get",
        lambda ref, timeout=None: 0 if ref[0] == "ready" else {"version": 3.0, "seconds": 0.1},
    )
    made = rollout_fleet.RolloutFleet(load_config(None, []), "model", "r")
    made.actors = [_Actor("a0"), _Actor("a1")]
    made.latest_update = "update-3"
    return types.SimpleNamespace(fleet=made, states=states, answered=answered)


def test_a_restarting_engine_is_left_out_until_ray_brings_it_back(fleet):
    run = fleet
    run.states["a1"] = "RESTARTING"
    run.fleet.check()
    assert run.fleet.live() == [0]
    assert [a.name for a in run.fleet.serving] == ["a0"]
    run.fleet.check()  # its ready call has not answered: still out, and nothing waited for
    assert run.fleet.live() == [0]
    assert run.fleet.counters["faults/rollout_restarts"] == 0
    run.states["a1"] = "ALIVE"
    run.answered.add("a1")
    run.fleet.check()
    assert run.fleet.live() == [0, 1]
    assert run.fleet.actors[1].loads == ["update-3"]  # the current weights before it serves
    assert run.fleet.actors[0].loads == []
    assert run.fleet.counters["faults/rollout_restarts"] == 1


def test_with_no_engine_serving_the_fleet_waits_for_one(fleet):
    run = fleet
    run.states.update(a0="RESTARTING", a1="RESTARTING")
    recovered = []
    run.fleet._recover = lambda index: recovered.append(index)
    run.fleet.check()
    assert recovered == [0] and run.fleet.live() == [0]


def test_a_shrink_forgets_the_engines_it_removes(fleet, monkeypatch):
    from launch.fleet import rollout_fleet

    monkeypatch.setattr(rollout_fleet.ray, "kill", lambda actor, no_restart: None)
    run = fleet
    run.states["a1"] = "RESTARTING"
    run.fleet.check()
    run.fleet.resize(1)
    assert run.fleet.out == {} and run.fleet.live() == [0]
