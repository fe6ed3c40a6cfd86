"""Dynamic sampling: zero-variance groups are dropped and replaced, with a cap on rounds; hot
resampling samples a round's tied prompts again first, each at most once a step."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from algorithm.advantage import Draw, GroupAccumulator, is_informative, sample_groups
from common.config import AdvantageConfig


def test_is_informative():
    assert is_informative([1.0, 0.0, 1.0])
    assert not is_informative([0.5, 0.5, 0.5])  # uniform: advantages all 0
    assert not is_informative([1.0, None, None])  # one scored completion: no baseline
    assert is_informative([1.0, None, 0.0])  # None is left out, as in the advantages
    assert not is_informative([None, None])


def test_accumulator_drops_uniform_groups_and_truncates_the_surplus():
    acc = GroupAccumulator(target_groups=3, max_rounds=4)
    assert acc.add_round([[1, 1], [0, 1], [0, 0]]) == [1]
    assert not acc.done and acc.needed == 2
    # four informative groups offered, two needed: the first two in order are kept
    assert acc.add_round([[1, 0], [1, 1], [0, 1], [1, 0], [0, 1]]) == [0, 2]
    assert acc.done
    assert acc.kept == [(0, 1), (1, 0), (1, 2)]
    assert acc.metrics() == {
        "train/dropped_groups": 3.0,
        "train/sampling_rounds": 2.0,
        "train/kept_groups": 3.0,
        "train/surplus_groups": 2.0,
    }
    with pytest.raises(RuntimeError, match="done"):
        acc.add_round([[0, 1]])


@dataclass
class FakeGroup:
    index: int  # the prompt
    rewards: list[float]
    temperature: float | None = None


def _config(max_rounds: int = 5, hot: float = 0.0, dynamic: bool = True) -> AdvantageConfig:
    return AdvantageConfig(
        dynamic_sampling=dynamic, max_sampling_rounds=max_rounds, low_variance_temperature=hot
    )


def _fake_sampler(pattern: list[bool]):
    """New prompts are numbered in draw order; pattern[i] says whether prompt i's group is
    informative (a prompt sampled again hot is informative when it is marked so)."""
    calls: list[Draw] = []
    counter = iter(range(10_000))

    def draw(count: int) -> list[int]:
        return [next(counter) for _ in range(count)]

    def sample(draw: Draw) -> list[FakeGroup]:
        calls.append(draw)
        informative = [pattern[i % len(pattern)] for i in draw.indices]
        return [
            FakeGroup(i, [0.0, 1.0] if ok else [1.0, 1.0], draw.temperature)
            for i, ok in zip(draw.indices, informative, strict=True)
        ]

    return sample, draw, calls


def _rounds(calls: list[Draw]) -> list[tuple[int, int]]:
    return [(call.round, len(call.indices)) for call in calls]


def test_dynamic_sample_resamples_until_the_batch_is_full():
    sample, draw, calls = _fake_sampler([True, False, False, True])
    sampled = sample_groups(sample, draw, 4, _config(max_rounds=5))
    # round 0: groups 0-3 -> keep 0, 3; round 1: 2 more (4, 5) -> keep 4; round 2: 6 -> drop;
    # round 3: 7 -> keep
    assert [g.index for g in sampled.groups] == [0, 3, 4, 7]
    assert [g.index for g in sampled.sampled] == list(range(8))
    assert _rounds(calls) == [(0, 4), (1, 2), (2, 1), (3, 1)]
    assert sampled.metrics["train/sampling_rounds"] == 4
    assert sampled.metrics["train/dropped_groups"] == 4
    assert sampled.metrics["train/kept_groups"] == 4
    assert "advantage/resampled_groups" not in sampled.metrics


def test_dynamic_sample_stops_at_the_round_cap():
    sample, draw, calls = _fake_sampler([False, False, False, True])
    sampled = sample_groups(sample, draw, 4, _config(max_rounds=2))
    # round 0 keeps group 3; round 1 asks for 3 (4, 5, 6): all uniform; then the cap
    assert [g.index for g in sampled.groups] == [3]
    assert len(calls) == 2
    assert sampled.metrics["train/sampling_rounds"] == 2
    assert sampled.metrics["train/kept_groups"] == 1
    assert sampled.metrics["train/dropped_groups"] == 6


def test_dynamic_sample_single_round_is_the_plain_rollout():
    sample, draw, calls = _fake_sampler([True, False])
    sampled = sample_groups(sample, draw, 4, _config(max_rounds=1))
    assert _rounds(calls) == [(0, 4)] and len(sampled.groups) == 2
    assert sampled.metrics["train/dropped_groups"] == 2


def test_without_dynamic_sampling_one_round_keeps_every_group():
    sample, draw, calls = _fake_sampler([True, False])
    sampled = sample_groups(sample, draw, 4, _config(dynamic=False))
    assert _rounds(calls) == [(0, 4)] and calls[0].temperature is None
    assert [g.index for g in sampled.groups] == [0, 1, 2, 3] and sampled.metrics == {}


def test_dynamic_sample_oversamples_later_rounds():
    sample, draw, calls = _fake_sampler([True, False])
    sample_groups(sample, draw, 4, _config(max_rounds=3), oversample=2.0)
    # round 0: 4 groups, 2 kept; round 1: ceil(2 * 2) = 4 groups, 2 kept
    assert _rounds(calls) == [(0, 4), (1, 4)]


def test_a_later_round_samples_the_tied_prompts_again_hot_first():
    sample, draw, calls = _fake_sampler([True, False, False, True, False, True])
    sampled = sample_groups(sample, draw, 4, _config(max_rounds=3, hot=1.5))
    # round 0: prompts 0-3, 1 and 2 tie; round 1: 1 and 2 again at 1.5 (tie again), then
    # round 2: no prompt twice hot in a step, so two new ones (4 ties, 5 is kept)
    assert [(c.round, c.indices, c.temperature) for c in calls] == [
        (0, [0, 1, 2, 3], None),
        (1, [1, 2], 1.5),
        (2, [4, 5], None),
    ]
    assert [g.index for g in sampled.groups] == [0, 3, 5]
    assert sampled.metrics["advantage/resampled_groups"] == 2


def test_hot_resampling_fills_the_rest_of_a_round_with_new_prompts():
    sample, draw, calls = _fake_sampler([True, False, True, True, True])
    sampled = sample_groups(sample, draw, 4, _config(max_rounds=2, hot=2.0), oversample=2.0)
    # round 0 keeps 0, 2, 3; one needed, two asked for: prompt 1 again hot (it ties again, as
    # marked), then one new prompt (4, kept)
    assert [(c.round, c.indices, c.temperature) for c in calls][1:] == [
        (1, [1], 2.0),
        (1, [4], None),
    ]
    assert [g.index for g in sampled.groups] == [0, 2, 3, 4]
    assert sampled.metrics["advantage/resampled_groups"] == 1


def test_dynamic_sample_is_deterministic():
    results = []
    for _ in range(2):
        sample, draw, _ = _fake_sampler([True, False, True, False, False])
        sampled = sample_groups(sample, draw, 5, _config(max_rounds=4, hot=1.5))
        results.append(([g.index for g in sampled.groups], sampled.metrics))
    assert results[0] == results[1]


def test_invalid_arguments_are_refused():
    with pytest.raises(ValueError, match="max_sampling_rounds"):
        GroupAccumulator(target_groups=2, max_rounds=0)
    with pytest.raises(ValueError, match="oversample"):
        sample_groups(lambda d: [], lambda n: [], 2, _config(), oversample=0.5)
