"""Dynamic sampling: zero-variance groups are dropped and replaced, with a cap on rounds."""

from __future__ import annotations

import pytest

from algorithm.advantage import GroupAccumulator, dynamic_sample, is_informative


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


def _fake_sampler(pattern: list[bool]):
    """Groups named by their global index; pattern[i] says whether group i is informative."""
    calls: list[tuple[int, int]] = []
    counter = iter(range(10_000))

    def sample_round(round_index: int, num_groups: int) -> list[tuple[int, list[float]]]:
        calls.append((round_index, num_groups))
        groups = []
        for _ in range(num_groups):
            i = next(counter)
            informative = pattern[i % len(pattern)]
            groups.append((i, [0.0, 1.0] if informative else [1.0, 1.0]))
        return groups

    return sample_round, calls


def test_dynamic_sample_resamples_until_the_batch_is_full():
    sample_round, calls = _fake_sampler([True, False, False, True])
    kept, metrics = dynamic_sample(sample_round, lambda g: g[1], target_groups=4, max_rounds=5)
    # round 0: groups 0-3 -> keep 0, 3; round 1: 2 more (4, 5) -> keep 4; round 2: 6 -> drop;
    # round 3: 7 -> keep
    assert [g[0] for g in kept] == [0, 3, 4, 7]
    assert calls == [(0, 4), (1, 2), (2, 1), (3, 1)]
    assert metrics["train/sampling_rounds"] == 4
    assert metrics["train/dropped_groups"] == 4
    assert metrics["train/kept_groups"] == 4


def test_dynamic_sample_stops_at_the_round_cap():
    sample_round, calls = _fake_sampler([False, False, False, True])
    kept, metrics = dynamic_sample(sample_round, lambda g: g[1], target_groups=4, max_rounds=2)
    # round 0 keeps group 3; round 1 asks for 3 (4, 5, 6): all uniform; then the cap
    assert [g[0] for g in kept] == [3]
    assert len(calls) == 2
    assert metrics["train/sampling_rounds"] == 2
    assert metrics["train/kept_groups"] == 1
    assert metrics["train/dropped_groups"] == 6


def test_dynamic_sample_single_round_is_the_plain_rollout():
    sample_round, calls = _fake_sampler([True, False])
    kept, metrics = dynamic_sample(sample_round, lambda g: g[1], target_groups=4, max_rounds=1)
    assert calls == [(0, 4)] and len(kept) == 2
    assert metrics["train/dropped_groups"] == 2


def test_dynamic_sample_oversamples_later_rounds():
    sample_round, calls = _fake_sampler([True, False])
    dynamic_sample(sample_round, lambda g: g[1], target_groups=4, max_rounds=3, oversample=2.0)
    # round 0: 4 groups, 2 kept; round 1: ceil(2 * 2) = 4 groups, 2 kept
    assert calls == [(0, 4), (1, 4)]


def test_dynamic_sample_is_deterministic():
    results = []
    for _ in range(2):
        sample_round, _ = _fake_sampler([True, False, True, False, False])
        kept, metrics = dynamic_sample(sample_round, lambda g: g[1], 5, 4)
        results.append(([g[0] for g in kept], metrics))
    assert results[0] == results[1]


def test_invalid_arguments_are_refused():
    with pytest.raises(ValueError, match="max_sampling_rounds"):
        GroupAccumulator(target_groups=2, max_rounds=0)
    with pytest.raises(ValueError, match="oversample"):
        dynamic_sample(lambda r, n: [], lambda g: g, 2, 2, oversample=0.5)
