"""A training step meets the programs of issue 33 and still gets its rewards.

Built as ``launch.train`` builds it: the sandbox pool is a Ray actor (``launch.fleet.actors
.start_sandbox``, behind ``SandboxClient``) and ``GroupCollector`` takes a step's groups through
it and the reward, the path ``Driver.step`` calls. Only the rollout fleet is scripted: its
completions are the programs a policy under RL pressure may write (huge ints, deep, huge,
self-referential and non-UTF-8 values, nan, garbage on the value pipe). Before, the first of
them raised inside the pool's ``run``; Ray does not retry an application error and the driver
catches only actor deaths, so the run stopped there.
"""

from __future__ import annotations

import pytest

from common.config import Config
from common.types import Completion, Problem, Verdict
from launch.fleet.actors import start_sandbox
from launch.loop.groups import GroupCollector
from tests.integration.helpers import private_ray
from tests.unit.sandbox.helpers import GOOD_F
from tests.unit.sandbox.hostile_values import RETURNS, WRITE, WRITES

pytestmark = pytest.mark.integration

TESTS = ("assert f(1) == 2", "assert f(2) == 3")
GROUP_SIZE = 8


def hostile_programs() -> list[tuple[str, set[Verdict]]]:
    """Every program of the pool's hostile-value tests that runs against ``TESTS``, with the
    verdicts it may get, and honest ones to fill the last group."""
    programs = [(code, allowed) for code, tests, allowed in RETURNS.values() if tests is None]
    programs += [
        (f"{WRITE}def f(x):\n    {line}\n    return x + 1\n", allowed)
        for line, allowed in WRITES.values()
    ]
    programs += [(GOOD_F, {Verdict.PASSED})] * (-len(programs) % GROUP_SIZE)
    return programs


class ScriptedRollout:
    """Stands in for the rollout fleet: each completion's text is the next scripted program."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def generate_stream(self, requests):
        position = 0
        for request in requests:
            group = []
            for g in range(len(request.seeds)):
                text = self.texts[position]
                position += 1
                group.append(Completion(request.request_id, g, [1], [2], [0.0], text, "stop", 0))
            yield [group]


@pytest.mark.parametrize("mode", ["partial", "binary"])
def test_a_step_of_hostile_programs_is_scored(mode):
    programs = hostile_programs()
    groups_wanted = len(programs) // GROUP_SIZE
    config = Config.model_validate(
        {
            "rollout": {"group_size": GROUP_SIZE, "batch_size": len(programs)},
            "sandbox": {"num_workers": 2, "timeout_s": 5.0},
            "reward": {"terms": {"execution": {"options": {"mode": mode}}}},
        }
    )
    problem = Problem("p", "Write f.", TESTS)
    with private_ray():
        import ray

        sandbox = start_sandbox(config, run_id=f"hostile-{mode}")
        try:
            ray.get(sandbox.ready())
            fleet = type("Fleet", (), {})()
            fleet.rollout = ScriptedRollout([code for code, _ in programs])
            fleet.sandbox = sandbox
            collector = GroupCollector(
                config, fleet, [problem] * groups_wanted, [(1,)] * groups_wanted
            )
            groups, _ = collector.collect(1, lambda count: list(range(count)))
            stats = sandbox.stats()
        finally:
            sandbox.close()
    assert [program for g in groups for program in g.programs] == [c for c, _ in programs]
    results = [result for g in groups for result in g.results]
    verdicts = [(r.verdict, r.verdict in allowed) for r, (_, allowed) in zip(results, programs)]
    assert all(ok for _, ok in verdicts), verdicts
    rewards = [reward for g in groups for reward in g.rewards]
    assert None not in rewards  # nothing masked: every program's reward reaches the policy
    assert [reward == 1.0 for reward in rewards] == [r.passed for r in results]
    assert stats["sandbox/worker_restarts"] == 0
