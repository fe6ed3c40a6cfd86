"""LeetCode problems (``class_method``: a fresh ``Solution()`` per test) through the real entry
points: a run on LeetCodeDataset starts, judges every problem's tests and steps, and
``launch.evaluate`` writes pass@k per kind and difficulty.

The tiny random model cannot solve a LeetCode problem: the run checks that the tests reach the
pool and their verdicts and rewards come back, not that it learns.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from common.datasets import load_dataset
from tests.integration.helpers import REPO, read_jsonl, run_module

pytestmark = pytest.mark.integration

LEETCODE = REPO.parent / "shared" / "data" / "leetcode" / "LeetCodeDataset-v0.2.0-test.jsonl.gz"


def test_a_leetcode_run_judges_every_problems_tests_and_steps(long_context_model, tmp_path):
    args = ["--config", "configs/demo.toml", "--overwrite", "--run.output_dir", str(tmp_path)]
    args += ["--model.path", str(long_context_model), "--model.max_model_len", "8192"]
    args += ["--data.source", str(LEETCODE), "--data.split", "all", "--run.steps", "2"]
    args += ["--rollout.batch_size", "16", "--rollout.max_new_tokens", "32", "--rollout.stop", "[]"]
    run_module("launch.train", args, REPO, tmp_path / "console.log")
    run_dir = tmp_path / "demo"
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert len(metrics) == 2 and all("reward/mean" in m for m in metrics)
    rows = [row for path in (run_dir / "rollouts").glob("*.jsonl") for row in read_jsonl(path)]
    tests = {p.problem_id: p.num_tests for p in load_dataset(LEETCODE, "all")}
    assert len(rows) == 32
    for row in rows:
        assert row["tests_total"] == tests[row["problem_id"]]
        assert row["verdict"] != "infra_error"
    assert Counter(row["reward"] for row in rows)[0.0] == len(rows)  # no random program solves one


def test_evaluate_on_leetcode_writes_pass_at_k_per_kind_and_difficulty(
    long_context_model, tmp_path
):
    out = tmp_path / "eval"
    args = ["--model", str(long_context_model), "--problems", str(LEETCODE), "--split", "all"]
    args += ["--limit", "4", "--n", "2", "--k", "1,2", "--max-new-tokens", "16"]
    args += ["--max-model-len", "8192", "--out", str(out)]
    run_module("launch.evaluate", args, REPO, tmp_path / "eval.log")
    summary = json.loads((out / "summary.json").read_text())
    problems = load_dataset(LEETCODE, "all")[:4]
    assert set(summary["kinds"]) == {"class_method"}
    assert set(summary["difficulties"]) == {p.difficulty for p in problems}
    assert all(set(by_k) == {"pass@1", "pass@2"} for by_k in summary["difficulties"].values())
    assert summary["groups"] == {}
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 8 and {s["kind"] for s in samples} == {"class_method"}
    assert "kind class_method: pass@1" in (tmp_path / "eval.log").read_text()
