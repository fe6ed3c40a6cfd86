"""The driver's bookkeeping: masked advantages, zero-variance groups, prompt order, programs."""

from __future__ import annotations

import math

import pytest

from algorithm.advantage import masked_group_advantages, zero_std_fraction
from common.prompts import build_program, extract_code
from launch.data.problems import PromptSampler
from launch.data.tasks import synthetic_problem


def test_advantages_are_normalised_per_group_by_hand():
    # group 1: [1, 0, 0, 1] mean 0.5, population std 0.5 -> +-1 (eps 0)
    # group 2: [0.5, 0.5, 0.5, 0.5] zero variance -> exactly 0, not NaN
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5]
    advantages = masked_group_advantages(rewards, group_size=4, eps=0.0)
    assert advantages[:4] == pytest.approx([1.0, -1.0, -1.0, 1.0])
    assert advantages[4:] == [0.0, 0.0, 0.0, 0.0]
    assert not any(math.isnan(a) for a in advantages)


def test_masked_samples_stay_out_of_the_group_statistics():
    # None is "no reward" (sandbox failure): the group is normalised over [1, 0] alone.
    rewards = [1.0, None, 0.0, None]
    advantages = masked_group_advantages(rewards, group_size=4, eps=0.0)
    assert advantages == [pytest.approx(1.0), None, pytest.approx(-1.0), None]


def test_group_with_one_reward_has_no_baseline():
    assert masked_group_advantages([None, 1.0, None, None], 4, eps=1e-4) == [None] * 4


def test_batch_std_scale_divides_by_the_std_of_all_rewards():
    rewards = [1.0, 0.0, 0.0, 0.0]  # batch mean 0.25, population std sqrt(3)/4
    advantages = masked_group_advantages(rewards, 2, eps=0.0, scale="batch_std")
    std = math.sqrt(3) / 4
    assert advantages == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0])


def test_zero_std_fraction_counts_uniform_groups():
    assert zero_std_fraction([1.0, 1.0, 0.0, 1.0, None, 0.0], group_size=2) == pytest.approx(2 / 3)


def test_sampler_is_a_function_of_seed_and_position():
    full = PromptSampler(10, seed=3)
    first, second = full.next_indices(7), full.next_indices(7)
    resumed = PromptSampler(10, seed=3, position=7)
    assert resumed.next_indices(7) == second
    assert sorted(first + second[:3]) == list(range(10))  # every problem once per epoch


def test_extract_code_prefers_the_python_fence():
    text = "Sure!\n```text\nnot code\n```\nHere:\n```python\ndef f():\n    return 1\n```\nBye"
    assert extract_code(text) == "def f():\n    return 1\n"


def test_extract_code_returns_raw_text_without_fences():
    assert extract_code("def f(): return 2") == "def f(): return 2"


def test_completion_style_program_continues_the_header():
    problem = synthetic_problem(4)
    assert build_program(problem, "4\n") == problem.prompt + "4\n"


def test_grafana_dashboard_queries_metrics_the_driver_exports():
    import json
    from pathlib import Path

    from launch.loop.telemetry import prometheus_name

    dashboard = json.loads(
        (Path(__file__).parents[2] / "launch/grafana_dashboard.json").read_text()
    )
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert any(prometheus_name("reward/mean") in expr for expr in exprs)
    assert prometheus_name("eval/pass@1") == "grpo_eval_pass_1"
    assert all(expr.startswith("ray_grpo_") for expr in exprs)


def test_placement_bundles_hold_exactly_the_actor_resources():
    from launch.fleet.actors import bundle

    assert bundle(1.0, 0.0) == {"CPU": 1.0}
    assert bundle(0.0, 1.0) == {"GPU": 1.0}
    assert bundle(0.0, 0.0) == {}
