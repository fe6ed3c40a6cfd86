"""A whole program's tests travel to the pool by reference, once per problem, through the
client ``launch.train`` uses (``launch.fleet.actors.start_sandbox``, ``SandboxClient``): the
pool fetches a problem's tests the first time it is sent them and keeps them, and after Ray
restarts the pool the new process fetches them again, with no call failing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.sandbox.stdio import table_program
from common.config import Config
from common.packages import load_packages
from common.types import Problem, Verdict
from launch.fleet.actors import start_sandbox
from tests.integration.helpers import private_ray
from tests.unit.sandbox.helpers import GOOD_F

pytestmark = pytest.mark.integration

KICKSTART = Path(__file__).resolve().parents[3] / "shared/data/codejam/kickstart"
FUNCTION = Problem("f", "Write f.", ("assert f(1) == 2",))
RESTART_WAIT_S = 120  # a new pool process starts its workers in seconds; this is a backstop


def _jobs(problem: Problem) -> tuple[list, list[Verdict]]:
    """A right program (it prints each test's answer), a wrong one, and a function job."""
    jobs = [problem.job(table_program(problem)), problem.job("print(0)"), FUNCTION.job(GOOD_F)]
    return jobs, [Verdict.PASSED, Verdict.FAILED, Verdict.PASSED]


def test_a_problems_tests_are_fetched_once_and_again_by_a_restarted_pool():
    first, second = sorted(load_packages(KICKSTART)[0], key=lambda p: p.problem_id)[:2]
    config = Config.model_validate({"sandbox": {"num_workers": 2, "cache": False}})
    with private_ray():
        import ray

        sandbox = start_sandbox(config, run_id="by-reference")
        try:
            ray.get(sandbox.ready())
            fetched = []
            for problems in ([first], [first, second], [first, second]):
                jobs, wanted = [], []
                for problem in problems:
                    more, verdicts = _jobs(problem)
                    jobs += more
                    wanted += verdicts
                assert [r.verdict for r in ray.get(sandbox.run(jobs, False))] == wanted
                fetched.append(sandbox.stats()["sandbox/tests_fetched"])
            assert fetched == [1, 1, 0]  # the first problem's tests once, then the second's

            ray.kill(sandbox.handle, no_restart=False)
            deadline = time.monotonic() + RESTART_WAIT_S
            while sandbox.stats()["sandbox/pool_restarts"] == 0:  # the old process answers 0
                assert time.monotonic() < deadline, "the pool was not restarted"
            jobs, wanted = _jobs(first)
            assert [r.verdict for r in sandbox.execute(jobs)] == wanted
            assert sandbox.stats()["sandbox/tests_fetched"] == 1  # a new process fetches anew
        finally:
            sandbox.close()
