"""The actors' placement (``launch/fleet/actors.py``): a bundle holds exactly the resources its
actor asks for."""

from __future__ import annotations

from launch.fleet.actors import bundle


def test_placement_bundles_hold_exactly_the_actor_resources():
    assert bundle(1.0, 0.0) == {"CPU": 1.0}
    assert bundle(0.0, 1.0) == {"GPU": 1.0}
    assert bundle(0.0, 0.0) == {}
