"""The prompt sampler (``launch/data/problems.py``): its order is a function of the seed and the
position, so a resumed run draws what the straight run would."""

from __future__ import annotations

from launch.data.problems import PromptSampler


def test_sampler_is_a_function_of_seed_and_position():
    full = PromptSampler(10, seed=3)
    first, second = full.next_indices(7), full.next_indices(7)
    resumed = PromptSampler(10, seed=3, position=7)
    assert resumed.next_indices(7) == second
    assert sorted(first + second[:3]) == list(range(10))  # every problem once per epoch
