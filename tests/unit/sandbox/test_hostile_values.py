"""What a program returns, or writes to its value pipe, through the real pool: always a verdict.

Each program runs in a real sandbox child; its value reaches the trusted front as a record and
is judged there. None of these may raise out of ``SandboxPool.run`` (which would end a training
run), end in ``infra_error`` (which the reward masks, hiding the program from the policy's
gradient) or cost a worker: the pool goes on serving.
"""

from __future__ import annotations

import json

import pytest

from common.types import ExecutionJob, Verdict
from sandbox import check
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import GOOD_F, run, shared_pool
from tests.unit.sandbox.hostile_values import RETURNS, WRITE, WRITES

DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="module")
def pool():
    with shared_pool("auto") as shared:
        yield shared


def _check(pool, result, allowed: set[Verdict]) -> None:
    assert result.verdict in allowed, (result.verdict, result.detail)
    assert len(result.detail) <= 300
    result.detail.encode("utf-8")  # goes into logs and multi-turn prompts
    assert run(pool, GOOD_F).verdict is Verdict.PASSED  # the pool goes on serving


@pytest.mark.parametrize("name", RETURNS)
def test_returned_values_get_a_verdict(pool, name):
    code, tests, allowed = RETURNS[name]
    setup, tests = tests or ("", ("assert f(1) == 2", "assert f(2) == 3"))
    _check(pool, run(pool, code, tests, setup), allowed)


@pytest.mark.parametrize("name", WRITES)
def test_writes_to_the_value_pipe_get_a_verdict(pool, name):
    line, allowed = WRITES[name]
    code = f"{WRITE}def f(x):\n    {line}\n    return x + 1\n"
    _check(pool, run(pool, code), allowed)


def test_garbage_written_while_the_program_loads_fails_it(pool):
    result = run(pool, f"{WRITE}write(b'\\xff')\n{GOOD_F}")
    assert result.verdict is Verdict.FAILED and result.test_verdicts == []
    assert result.detail == "program: a record the harness never sends"


def test_a_huge_int_is_shown_by_its_size(pool):
    result = run(pool, "def f(x):\n    return 10**6000")
    assert result.detail == "test 0: assertion failed, got <int of about 6001 digits>"


def test_all_of_them_in_one_batch_cost_no_worker(pool):
    """Together, in parallel and with stop at the first failure: verdicts, and no restart."""
    pool.stats()
    jobs = []
    for code, tests, _ in RETURNS.values():
        setup, tests = tests or ("", ("assert f(1) == 2", "assert f(2) == 3"))
        jobs.append(ExecutionJob(code, tests, setup))
    for line, _ in WRITES.values():
        code = f"{WRITE}def f(x):\n    {line}\n    return x + 1\n"
        jobs.append(ExecutionJob(code, ("assert f(1) == 2", "assert f(2) == 3")))
    for stop in (False, True):
        results = pool.run(jobs, stop_at_first_failure=stop)
        allowed = [a for _, _, a in RETURNS.values()] + [a for _, a in WRITES.values()]
        assert [r.verdict in a for r, a in zip(results, allowed)] == [True] * len(jobs)
    assert pool.stats()["sandbox/worker_restarts"] == 0


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_check_cli_judges_mbpp_task_5_returning_a_huge_int(tmp_path):
    """The issue's reproduction: ``sandbox.check`` on MBPP task 5 with ``return 10**6000``."""
    row = next(
        json.loads(line)
        for line in (DATA / "mbpp.jsonl").read_text().splitlines()
        if json.loads(line)["task_id"] == 5
    )
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps(row) + "\n")
    samples = tmp_path / "s.jsonl"
    completion = "def count_ways(n):\n    return 10**6000\n"
    samples.write_text(json.dumps({"task_id": 5, "completion": completion}) + "\n")
    out = tmp_path / "out.jsonl"
    args = ["--problems", str(problems), "--samples", str(samples), "--out", str(out)]
    assert check.main([*args, "--workers", "1"]) == 0
    (result,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (result["verdict"], result["tests_passed"], result["tests_total"]) == ("failed", 0, 3)
