"""LeetCode problems (``class_method``: a fresh ``Solution()`` per test) through the real entry
points: a run on LeetCodeDataset starts, judges every problem's tests and steps, and
``launch.evaluate`` writes pass@k per kind and difficulty.

The tiny random model cannot solve a LeetCode problem: the run checks that the tests reach the
pool and their verdicts and rewards come back, not that it learns.
"""

from __future__ import annotations

import pytest

from common.datasets import load_dataset
from tests.integration.helpers import (
    REPO,
    check_a_short_run_judges_every_problem,
    evaluate_a_few,
    read_jsonl,
)

pytestmark = pytest.mark.integration

LEETCODE = REPO.parent / "shared" / "data" / "leetcode" / "LeetCodeDataset-v0.2.0-test.jsonl.gz"


def test_a_leetcode_run_judges_every_problems_tests_and_steps(long_context_model, tmp_path):
    check_a_short_run_judges_every_problem(
        "configs/demo.toml", LEETCODE, long_context_model, tmp_path
    )


def test_evaluate_on_leetcode_writes_pass_at_k_per_kind_and_difficulty(
    long_context_model, tmp_path
):
    summary = evaluate_a_few(LEETCODE, long_context_model, 4, tmp_path)
    out = tmp_path / "eval"
    problems = load_dataset(LEETCODE, "all")[:4]
    assert set(summary["kinds"]) == {"class_method"}
    assert set(summary["difficulties"]) == {p.difficulty for p in problems}
    assert all(set(by_k) == {"pass@1", "pass@2"} for by_k in summary["difficulties"].values())
    assert summary["groups"] == {}
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 8 and {s["kind"] for s in samples} == {"class_method"}
    assert "kind class_method: pass@1" in (tmp_path / "eval.log").read_text()
