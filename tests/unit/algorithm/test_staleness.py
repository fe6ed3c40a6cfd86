"""Which groups an async step trains on (``algorithm/staleness.py``): weight versions, the bound
``async.max_staleness`` and the ``async/*`` counts, worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from algorithm.staleness import group_version, split_stale, staleness_metrics


def group(*versions: int) -> SimpleNamespace:
    return SimpleNamespace(completions=[SimpleNamespace(weight_version=v) for v in versions])


def test_group_version_is_its_oldest_completion():
    assert group_version(group(5, 4, 5)) == 4


def test_split_stale_keeps_groups_within_the_bound():
    fresh, one_behind, two_behind = group(7, 7), group(6, 6), group(5, 5)
    kept, dropped = split_stale([fresh, one_behind, two_behind], learner_version=7, max_staleness=1)
    assert kept == [fresh, one_behind]
    assert dropped == [two_behind]


def test_synchronous_bound_drops_anything_behind():
    kept, dropped = split_stale([group(3, 3), group(2, 3)], learner_version=3, max_staleness=0)
    assert len(kept) == 1 and len(dropped) == 1


def test_staleness_metrics_count_samples_and_groups():
    kept = [group(7, 7), group(6, 6, 6)]  # ages 0, 0, 1, 1, 1
    dropped = [group(4, 4), group(3)]
    metrics = staleness_metrics(kept, dropped, learner_version=7)
    assert metrics == {
        "async/staleness_mean": pytest.approx(3 / 5),
        "async/staleness_max": 1.0,
        "async/dropped_samples": 3.0,
        "async/dropped_groups": 2.0,
    }


def test_staleness_metrics_of_an_empty_batch():
    metrics = staleness_metrics([], [group(1)], learner_version=5)
    assert metrics["async/staleness_mean"] == 0.0
    assert metrics["async/dropped_samples"] == 1.0
