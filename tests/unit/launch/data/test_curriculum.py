"""Curricula: deterministic given seed and history, exact on resume, and focused where they say."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from common.types import Problem
from launch.data.curriculum import (
    EasyToHardCurriculum,
    FailureFocusedCurriculum,
    make_curriculum,
    weighted_sample,
)
from launch.data.problems import PromptSampler

PROBLEMS = [
    Problem(str(i), f"p{i}", ("assert True",), reference_solution="x" * i) for i in range(20)
]


def play(curriculum, steps: int, count: int = 4) -> list[list[int]]:
    """Draw ``steps`` batches, feeding back a fixed pass fraction per problem."""
    drawn = []
    for _ in range(steps):
        indices = curriculum.next_indices(count)
        for index in indices:
            curriculum.observe(index, (index % 5) / 4)  # 0, .25, .5, .75, 1 by problem
        drawn.append(indices)
    return drawn


def test_uniform_reproduces_the_prompt_sampler():
    curriculum = make_curriculum("uniform", PROBLEMS, seed=3)
    sampler = PromptSampler(len(PROBLEMS), seed=3)
    assert play(curriculum, 7) == [sampler.next_indices(4) for _ in range(7)]


@pytest.mark.parametrize("policy", ["uniform", "failure_focused", "easy_to_hard"])
def test_deterministic_given_seed_and_history(policy):
    first = play(make_curriculum(policy, PROBLEMS, seed=5), 10)
    assert play(make_curriculum(policy, PROBLEMS, seed=5), 10) == first
    assert play(make_curriculum(policy, PROBLEMS, seed=6), 10) != first


@pytest.mark.parametrize("policy", ["uniform", "failure_focused", "easy_to_hard"])
def test_resume_from_state_dict_draws_exactly_the_same(policy):
    straight = make_curriculum(policy, PROBLEMS, seed=1)
    expected = play(straight, 12)
    interrupted = make_curriculum(policy, PROBLEMS, seed=1)
    head = play(interrupted, 5)
    state = json.loads(json.dumps(interrupted.state_dict()))  # as a checkpoint stores it
    resumed = make_curriculum(policy, PROBLEMS, seed=1)
    resumed.load_state_dict(state)
    assert head + play(resumed, 7) == expected


def test_state_of_another_policy_is_refused():
    state = make_curriculum("uniform", PROBLEMS, seed=0).state_dict()
    with pytest.raises(ValueError, match="checkpoint curriculum is 'uniform'"):
        make_curriculum("failure_focused", PROBLEMS, seed=0).load_state_dict(state)


@pytest.mark.parametrize("policy", ["uniform", "failure_focused", "easy_to_hard"])
def test_a_batch_has_distinct_problems(policy):
    for batch in play(make_curriculum(policy, PROBLEMS, seed=2), 20, count=8):
        assert len(set(batch)) == 8


def test_pass_rate_is_an_ema():
    curriculum = FailureFocusedCurriculum(3, seed=0, ema=0.5)
    curriculum.observe(1, 1.0)
    curriculum.observe(1, 0.0)
    curriculum.observe(1, 0.5)
    assert curriculum.pass_rate == [None, pytest.approx(0.5), None]  # 1 -> .5 -> .5
    assert curriculum.attempts == [0, 3, 0]


def test_failure_focused_prefers_problems_sometimes_solved():
    curriculum = FailureFocusedCurriculum(30, seed=0)
    for index in range(30):  # 10 always solved, 10 never, 10 half the time
        curriculum.observe(index, [1.0, 0.0, 0.5][index % 3])
    counts = Counter(i % 3 for _ in range(200) for i in curriculum.next_indices(3))
    assert counts[2] > 5 * (counts[0] + counts[1])
    assert counts[0] > 0 and counts[1] > 0  # the floor keeps every problem measurable
    stats = curriculum.stats()
    assert stats["curriculum/learnable_frac"] == pytest.approx(1 / 3)


def test_easy_to_hard_starts_with_the_easy_problems_and_grows():
    curriculum = EasyToHardCurriculum(
        20, seed=0, difficulty=list(range(20)), start_fraction=0.25, ramp_draws=10
    )
    assert set(curriculum.next_indices(5)) == set(range(5))  # pool: the 5 shortest solutions
    curriculum.draws = 10
    assert curriculum.pool_size(5) == 20


def test_easy_to_hard_ranks_by_observed_pass_rate():
    curriculum = EasyToHardCurriculum(10, seed=0, difficulty=[0.0] * 10, start_fraction=0.2)
    curriculum.observe(9, 1.0)
    curriculum.observe(8, 0.9)
    assert set(curriculum.next_indices(2)) == {8, 9}


def test_weighted_sample_is_proportional():
    import random

    rng = random.Random(0)
    counts = Counter(weighted_sample([1.0, 3.0], 1, rng)[0] for _ in range(4000))
    assert counts[1] / 4000 == pytest.approx(0.75, abs=0.03)


def test_unknown_policy_names_the_choices():
    with pytest.raises(ValueError, match="uniform, failure_focused, easy_to_hard"):
        make_curriculum("hardest_first", PROBLEMS, seed=0)
