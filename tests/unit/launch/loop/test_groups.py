"""GroupCollector's scoring: the default config reproduces the execution reward exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from algorithm.rewards import RewardConfig, execution_reward
from common.config import Config
from common.types import ExecutionResult, Problem, Verdict
from launch.loop.groups import GroupCollector
from tests.unit.launch.loop.helpers import FakeRollout

RESULTS = [
    ExecutionResult(Verdict.PASSED, 4, 4),
    ExecutionResult(Verdict.FAILED, 1, 4),
    ExecutionResult(Verdict.INFRA_ERROR, 0, 4),
    ExecutionResult(Verdict.SYNTAX_ERROR, 0, 4),
]


class FakeSandbox:
    """Stands in for ``launch.fleet.clients.SandboxClient``."""

    def run(self, jobs, stop_at_first_failure):
        return RESULTS * (len(jobs) // 4)


@pytest.fixture
def collector(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "get", lambda value: value)

    def make(reward: RewardConfig | None = None) -> GroupCollector:
        config = Config.model_validate({"rollout": {"group_size": 4, "batch_size": 8}})
        if reward is not None:
            config = config.model_copy(update={"reward": reward})
        problem = Problem("p", "def answer():\n    return", ("assert answer() == 7",),
                          program_prefix="def answer():\n    return")  # fmt: skip
        fleet = SimpleNamespace(rollout=FakeRollout(), sandbox=FakeSandbox())
        return GroupCollector(config, fleet, [problem, problem], [(1,), (1,)])

    return make


def test_default_rewards_are_the_execution_rewards(collector):
    groups, _ = collector().collect(1, lambda count: list(range(count)))
    expected = [execution_reward(r, "partial") for r in RESULTS]
    assert [g.rewards for g in groups] == [expected, expected]
    assert [g.terms for g in groups] == [{"execution": expected}] * 2


def test_term_means_are_logged_per_term(collector):
    reward = RewardConfig(
        terms={
            "execution": {},
            "length": {"weight": 0.5, "options": {"max_len": 4, "cache_len": 2}},
        }
    )
    coll = collector(reward)
    groups, _ = coll.collect(1, lambda count: list(range(count)))
    # completion g has g + 1 tokens: length penalties 0, 0, -0.5, -1
    assert groups[0].rewards == [1.0, 0.25, None, -0.5]
    assert coll.term_means["reward/execution/mean"] == pytest.approx((1 + 0.25 + 0) / 3)
    assert coll.term_means["reward/length/mean"] == pytest.approx(-0.375)
    assert coll.term_means["reward/execution/masked_frac"] == 0.25
