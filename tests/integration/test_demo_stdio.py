"""Whole programs on stdin/stdout through the real entry points: the stdin/stdout demo learns
(``python -m launch.train --config configs/demo_stdio.toml``), its checkpoint evaluates per test
group, and a run on the Kick Start packages starts, judges and steps.

The tiny random model cannot solve a contest problem: the Kick Start run checks that the
packages' tests reach the pool and their verdicts and rewards come back, not that it learns.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest

from common.config import load_config
from common.datasets import load_dataset
from launch.data.problems import load_raw
from tests.integration.helpers import (
    REPO,
    check_a_short_run_judges_every_problem,
    evaluate_a_few,
    read_jsonl,
    run_module,
)

pytestmark = pytest.mark.integration

LAST = 10  # steps at each end of the run that make its first and final rates
Z95 = 1.96  # two-sided normal quantile of a 95% interval
KICKSTART = REPO.parent / "shared" / "data" / "codejam" / "kickstart"
#: The stdin/stdout demo's exact-answer rate must gain this much over the run: seed 0 went from
#: 0.014 (steps 1-10) to 0.967 (291-300) on 2026-12-07 (docs/benchmarks.md); the function demo's
#: weakest seed ended at 0.791.
GAIN = 0.5


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_stdio")
    args = ["--config", "configs/demo_stdio.toml", "--overwrite", "--run.output_dir", str(out)]
    run_module("launch.train", args, REPO, out / "console.log")
    config = load_config(REPO / "configs" / "demo_stdio.toml", ["--run.output_dir", str(out)])
    return config, config.run_dir


def _rate(records: list[dict]) -> float:
    return statistics.fmean(r["reward/pass_rate"] for r in records)


def test_the_stdio_demo_learns_exact_answers_a_constant_cannot_earn(demo):
    from bench.launch.constant import best, score_constants
    from sandbox.trusted.pool import SandboxPool

    config, run_dir = demo
    records = read_jsonl(run_dir / "metrics.jsonl")
    first, last = _rate(records[:LAST]), _rate(records[-LAST:])
    assert last - first >= GAIN, (first, last)
    problems = load_raw(config.data.source, None, "auto")
    assert {p.kind for p in problems} == {"stdio"}
    with SandboxPool(config.sandbox) as pool:
        constant = best(score_constants(config, problems, [str(d) for d in range(10)], pool))
    assert constant.pass_rate == pytest.approx(0.1)  # one target in ten
    assert last >= 3 * constant.reward, (last, constant)


def test_evaluate_on_the_checkpoint_agrees_and_reports_each_test_group(demo, tmp_path):
    config, run_dir = demo
    out = tmp_path / "eval"
    args = ["--model", str(run_dir / "checkpoint"), "--out", str(out)]
    run_module("launch.evaluate", args, REPO, tmp_path / "eval.log")
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["groups"]) == {"sample", "secret"}
    # one digit passes every input or none: each group's pass@1 is the problem's
    assert summary["groups"]["sample"]["pass@1"] == pytest.approx(summary["pass@1"])
    evaluated, samples = summary["pass@1"], summary["num_problems"] * summary["n"]
    trained = _rate(read_jsonl(run_dir / "metrics.jsonl")[-LAST:])
    completions = LAST * config.rollout.batch_size
    pooled = (trained * completions + evaluated * samples) / (completions + samples)
    interval = Z95 * math.sqrt(pooled * (1 - pooled) * (1 / completions + 1 / samples))
    assert abs(evaluated - trained) <= interval, (evaluated, trained, interval)


def test_a_kick_start_run_judges_every_packages_tests_and_steps(long_context_model, tmp_path):
    check_a_short_run_judges_every_problem(
        "configs/demo_stdio.toml", KICKSTART, long_context_model, tmp_path
    )


def test_evaluate_on_the_kick_start_set_writes_pass_at_k_per_group(long_context_model, tmp_path):
    summary = evaluate_a_few(KICKSTART, long_context_model, 3, tmp_path)
    out = tmp_path / "eval"
    problems = load_dataset(KICKSTART, "all")[:3]
    groups = {test.group for p in problems for test in p.stdio.tests}
    assert set(summary["groups"]) == groups
    assert all(set(by_k) == {"pass@1", "pass@2"} for by_k in summary["groups"].values())
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 6 and all(set(s["groups"]) <= groups for s in samples)
    assert "tests secret" in (tmp_path / "eval.log").read_text()
